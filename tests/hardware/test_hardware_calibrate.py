"""Your own GPU: `attnio gpu calibrate --measurements FILE.csv --out calib.json` fits the time
model to a user's rows (attnio.hardware.calibrate), `--calibration FILE` uses the fit on score,
tune and validate, and the output is never an input, a device, a FIFO or a folder."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

import attnio
from attnio.core.errors import ParameterError
from attnio.hardware import calibrate, device_file, fits
from attnio.hardware.timing import BOUNDS, PARAMS, load_params

pytest.importorskip("scipy")

RTX = Path(__file__).resolve().parents[2] / "docs" / "devices" / "rtx4090.toml"

#: Ten rows of the calibration set (shared/data/gpu-published/train.csv: the FlashAttention-3
#: paper's forward FP16 figure, H100 SXM5, d = 64, non-causal).
SMALL = """\
source,device,kernel,pass,dtype,d,causal,N,batch,heads,tflops
fa3 paper,h100-sxm,fa2,fwd,fp16,64,0,512,32,32,282
fa3 paper,h100-sxm,fa2,fwd,fp16,64,0,1024,16,32,306
fa3 paper,h100-sxm,fa2,fwd,fp16,64,0,2048,8,32,318
fa3 paper,h100-sxm,fa2,fwd,fp16,64,0,4096,4,32,321
fa3 paper,h100-sxm,fa2,fwd,fp16,64,0,8192,2,32,322
fa3 paper,h100-sxm,fa2,fwd,fp16,64,0,16384,1,32,324
fa3 paper,h100-sxm,fa3,fwd,fp16,64,0,512,32,32,333
fa3 paper,h100-sxm,fa3,fwd,fp16,64,0,1024,16,32,392
fa3 paper,h100-sxm,fa3,fwd,fp16,64,0,2048,8,32,460
fa3 paper,h100-sxm,fa3,fwd,fp16,64,0,4096,4,32,476
"""


def _cli(capsys, *argv):
    from attnio.cli import main

    rc = main(["gpu", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """The small CSV and the fit `gpu calibrate` wrote for it."""
    from attnio.cli import main

    d = tmp_path_factory.mktemp("calib")
    m, out = d / "small.csv", d / "calib.json"
    m.write_text(SMALL)
    assert main(["gpu", "calibrate", "--measurements", str(m), "--out", str(out)]) == 0
    return m, out


def test_calibrate_fits_the_rows_generation_within_bounds_with_provenance(fitted):
    m, out = fitted
    doc = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(c))
    assert set(doc["generations"]) == {"sm90"}
    g = doc["generations"]["sm90"]
    assert set(g["params"]) == set(PARAMS)
    for k, v in g["params"].items():
        assert BOUNDS[k][0] <= v <= BOUNDS[k][1]
    pv = g["provenance"]
    assert pv["rows"] == 10 and pv["devices"] == ["h100-sxm"] and len(pv["sha256"]) == 64
    assert pv["fitted_to"] == str(m) and pv["underdetermined"] is False
    # no standard-attention row: the HBM efficiency is not fitted, it keeps the stored value
    assert "hbm_eff" in pv["kept"] and set(pv["kept"]) | set(pv["fitted"]) == set(PARAMS)
    stored = vars(load_params("sm90"))
    for k in pv["kept"]:
        assert g["params"][k] == pytest.approx(stored[k], abs=1e-6)
    # the fit is no worse than the stored fit it started from, on the rows it was fitted to
    assert pv["mean_abs_err"] <= g["before"]["mean_abs_err"] + 1e-9
    assert calibrate.load(out)["sm90"]["params"] == pytest.approx(g["params"])


def test_score_tune_and_validate_use_the_calibration(fitted, capsys):
    m, out = fitted
    gens = calibrate.load(out)
    base = ["--N", "4096", "--d", "64", "--heads", "8", "--batch", "2", "--json"]
    rc, o1, _ = _cli(capsys, "score", *base)
    rc2, o2, _ = _cli(capsys, "score", *base, "--calibration", str(out))
    assert rc == rc2 == 0
    t_stored, t_user = json.loads(o1)["time_s"], json.loads(o2)["time_s"]
    with fits.using(gens):
        assert load_params("sm90") == attnio.hardware.timing.Params(**gens["sm90"]["params"])
        t_api = attnio.hardware.score("h100", attnio.Shape(4096, 4096, 64, heads=8, batch=2),
                                      "fa3").time_s
    assert t_user == pytest.approx(t_api) and t_user != pytest.approx(t_stored)
    assert load_params("sm90") != attnio.hardware.timing.Params(**gens["sm90"]["params"])
    rc, o, _ = _cli(capsys, "tune", *base, "--top", "2", "--max-replays", "2",
                    "--calibration", str(out))
    assert rc == 0 and json.loads(o)
    rc, o, _ = _cli(capsys, "validate", "--measurements", str(m), "--calibration", str(out),
                    "--json")
    fit_err = json.loads(out.read_text())["generations"]["sm90"]["provenance"]["mean_abs_err"]
    assert rc == 0 and json.loads(o)["mean_abs_err"] == pytest.approx(fit_err, rel=1e-3)


def test_a_users_own_fit_replaces_the_borrowed_one_and_its_warning(tmp_path, capsys):
    """An RTX 4090 (sm89, no stored fit): rows made from the model's own prediction x 1.25."""
    dev = device_file.load(RTX)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fits.FitWarning)
        for N in (1024, 2048, 4096):
            t = attnio.hardware.score(dev, attnio.Shape(N, N, 64, heads=8, batch=2), "fa2").time_s
            rows.append(f"my-rtx4090,fa2,fwd,bf16,64,0,{N},2,8,{t * 1.25}\n")
    m = tmp_path / "mine.csv"
    m.write_text("device,kernel,pass,dtype,d,causal,N,batch,heads,time_s\n" + "".join(rows))
    out = tmp_path / "mine.json"
    rc, o, err = _cli(capsys, "calibrate", "--measurements", str(m), "--out", str(out),
                      "--device-file", str(RTX))
    assert rc == 0 and "sm89: 3 rows" in o and "kept (the rows do not depend on them)" in o
    rc, o, err = _cli(capsys, "validate", "--measurements", str(m), "--device-file", str(RTX),
                      "--json")
    assert rc == 0 and "borrows sm80" in err
    assert json.loads(o)["mean_abs_err"] == pytest.approx(0.2, abs=0.01)  # 1/1.25 - 1
    rc, o, err = _cli(capsys, "validate", "--measurements", str(m), "--device-file", str(RTX),
                      "--calibration", str(out), "--json")
    assert rc == 0 and err == "" and json.loads(o)["mean_abs_err"] < 0.05


def test_a_calibration_for_another_generation_is_refused(fitted, capsys):
    _, out = fitted
    rc, o, err = _cli(capsys, "score", "--N", "1024", "--d", "64", "--device", "a100",
                      "--calibration", str(out))
    assert rc == 2 and o == "" and len(err.strip().splitlines()) == 1
    assert "holds the fit of sm90" in err and "a100-80gb is sm80" in err


# ---------------------------------------------------------------------- the output file
def _out_cases(tmp_path, m, dev):
    link = tmp_path / "link.csv"
    link.symlink_to(m)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    devlink = tmp_path / "dev.toml"
    devlink.write_text(dev.read_text())
    return {"the input": (m, "is the input"), "a link to the input": (link, "a link to it"),
            "a device": (Path("/dev/null"), "is a device"), "a FIFO": (fifo, "is a FIFO"),
            "a folder": (folder, "is a folder"),
            "the device file": (devlink, "is the input"),
            "a missing folder": (tmp_path / "nope" / "c.json", "does not exist")}


@pytest.mark.parametrize("case", ["the input", "a link to the input", "a device", "a FIFO",
                                  "a folder", "the device file", "a missing folder"])
def test_an_out_that_is_an_input_device_fifo_or_folder_is_refused_before_writing(
        tmp_path, capsys, case):
    m = tmp_path / "small.csv"
    m.write_text(SMALL)
    path, needle = _out_cases(tmp_path, m, RTX)[case]
    before = sorted(os.listdir(tmp_path))
    argv = ["calibrate", "--measurements", str(m), "--out", str(path)]
    if case == "the device file":
        argv += ["--device-file", str(path)]
    rc, o, err = _cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert rc == 2 and o == "" and len(lines) == 1 and needle in lines[0] and "--out" in lines[0]
    assert m.read_text() == SMALL and sorted(os.listdir(tmp_path)) == before


def test_write_replaces_a_file_whole_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "c.json"
    out.write_text("old")
    table = {"generations": {"sm90": {"params": dict(vars(load_params("sm90")))}}}
    calibrate.write(table, out, inputs=[])
    assert json.loads(out.read_text()) == table and os.listdir(tmp_path) == ["c.json"]
    with pytest.raises(ParameterError):
        calibrate.write({"x": float("inf")}, out)      # no Infinity in the file
    assert json.loads(out.read_text()) == table and os.listdir(tmp_path) == ["c.json"]


# ---------------------------------------------------------------------- a bad calibration file
P = dict(vars(load_params("sm90")))


@pytest.mark.parametrize("text, needle", [
    ("not json", "not a calibration file"),
    (json.dumps({"generations": {}}), "key 'generations'"),
    (json.dumps({"generations": {"sm75": {"params": P}}}), "key 'generations.sm75'"),
    (json.dumps({"generations": {"sm90": {"params": {**P, "hbm_eff": 7}}}}),
     "key 'generations.sm90.params.hbm_eff': must be a number in [0.3, 1]"),
    (json.dumps({"generations": {"sm90": {"params": {**P, "extra": 1}}}}), "unknown parameter"),
    ('{"generations": {"sm90": {"params": {"hbm_eff": NaN}}}}', "not a calibration file"),
])
def test_a_bad_calibration_file_is_one_line(tmp_path, capsys, text, needle):
    f = tmp_path / "c.json"
    f.write_text(text)
    rc, o, err = _cli(capsys, "score", "--N", "1024", "--d", "64", "--calibration", str(f))
    lines = err.strip().splitlines()
    assert rc == 2 and o == "" and len(lines) == 1 and needle in lines[0]
    assert lines[0].startswith(f"attnio gpu score: error: --calibration {f}")
