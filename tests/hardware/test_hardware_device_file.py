"""Any GPU: `--device-file FILE.toml` (attnio.hardware.device_file), the generations, a borrowed fit
that always warns (attnio.hardware.fits), kernels a generation cannot run, the sm89 and sm100
presets."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest

import attnio
from attnio.core.errors import ParameterError
from attnio.hardware import device_file, devices, fits
from attnio.hardware.timing import generation, load_params

DOCS = Path(__file__).resolve().parents[2] / "docs" / "devices"
RTX = DOCS / "rtx4090.toml"
B200 = DOCS / "b200.toml"


def _cli(capsys, *argv):
    from attnio.cli import main

    rc = main(["gpu", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _score_time(dev, shape=(2048, 64), config="fa2"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fits.FitWarning)
        return attnio.hardware.score(dev, shape, config).time_s


# ---------------------------------------------------------------------- the two examples
def test_the_documented_examples_load_and_equal_the_presets_they_describe():
    rtx, b200 = device_file.load(RTX), device_file.load(B200)
    assert (rtx.name, generation(rtx), rtx.wgmma) == ("my-rtx4090", "sm89", False)
    assert (b200.name, generation(b200), b200.wgmma) == ("my-b200", "sm100", False)
    for dev, preset in ((rtx, "rtx4090"), (b200, "b200")):
        p = devices.get(preset)
        assert dev.missing() == []
        for f in ("sm_count", "smem_per_sm", "smem_per_block", "l2_bytes", "hbm_bw",
                  "regs_per_sm", "max_threads_per_sm", "max_ctas_per_sm", "sm_l2_bytes_per_clk",
                  "l2_hit_latency_clk", "dram_latency_clk"):
            assert getattr(dev, f) == pytest.approx(getattr(p, f)), (preset, f)
        assert dev.clock_hz == pytest.approx(p.clock_hz, rel=1e-4)
        assert dev.tensor_flops == pytest.approx(p.tensor_flops)
        # the same figures give the same prediction as the preset
        assert _score_time(dev) == pytest.approx(_score_time(preset), rel=1e-4)


@pytest.mark.filterwarnings("ignore::attnio.hardware.fits.FitWarning")
def test_a_device_file_is_accepted_wherever_a_device_is():
    dev = device_file.load(RTX)
    assert attnio.plan(4096, 64, device=dev).memory.M == dev.smem_per_block // 2
    s = attnio.hardware.score(dev, (4096, 128), "fa2")
    assert s.feasible and s.time_s > 0 and s.device == "my-rtx4090"


# ---------------------------------------------------------------------- a fit is never borrowed silently
@pytest.mark.parametrize("dev, gen, borrows", [
    ("rtx4090", "sm89", "sm80"), ("l40s", "sm89", "sm80"), ("b200", "sm100", "sm90"),
    (RTX, "sm89", "sm80"), (B200, "sm100", "sm90")])
def test_a_generation_without_a_fit_warns_naming_the_fit_it_borrows(dev, gen, borrows):
    d = device_file.load(dev) if isinstance(dev, Path) else devices.get(dev)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        p = load_params(d)
    msgs = [str(x.message) for x in w if issubclass(x.category, fits.FitWarning)]
    assert len(msgs) == 1 and f"({gen})" in msgs[0] and f"borrows {borrows}'s fit" in msgs[0]
    assert "\n" not in msgs[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert p == load_params(borrows)


@pytest.mark.parametrize("dev", ["h100", "a100", "h200"])
def test_a_generation_with_its_own_fit_does_not_warn(dev):
    with warnings.catch_warnings():
        warnings.simplefilter("error", fits.FitWarning)
        load_params(devices.get(dev))


def test_cli_prints_the_borrowed_fit_as_one_warning_line(capsys):
    rc, out, err = _cli(capsys, "score", "--N", "2048", "--d", "64", "--device-file", str(RTX))
    assert rc == 0 and "my-rtx4090" in out and "us over" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "borrows sm80's fit" in lines[0]
    rc, out, err = _cli(capsys, "score", "--N", "2048", "--d", "64", "--device", "h100")
    assert rc == 0 and err == ""


# ---------------------------------------------------------------------- kernels a generation cannot run
def test_wgmma_is_refused_outside_sm90():
    h100 = devices.get("h100")
    with pytest.raises(ParameterError, match="wgmma=True needs compute capability 9.0"):
        dataclasses.replace(h100, name="fake-b200", compute_capability="10.0")
    assert dataclasses.replace(h100, compute_capability="10.0", wgmma=False).wgmma is False


@pytest.mark.parametrize("argv, needle", [
    (["score", "--N", "1024", "--d", "64", "--device", "b200", "--kernel", "fa3"],
     "needs Hopper"),
    (["score", "--N", "1024", "--d", "64", "--device-file", str(B200), "--kernel", "fa3"],
     "needs Hopper"),
    (["tune", "--N", "1024", "--d", "64", "--device-file", str(B200), "--algorithm", "fa3"],
     "--algorithm fa3 needs Hopper"),
    (["score", "--N", "1024", "--d", "64", "--device-file", str(RTX), "--config",
      "algorithm=fa3,Br=128,Bc=64"], None),
])
def test_fa3_on_a_generation_without_wgmma_is_refused_or_infeasible(capsys, argv, needle):
    rc, out, err = _cli(capsys, *argv)
    if needle is None:   # an explicit fa3 config: scored as infeasible, saying why
        assert rc == 1 and "INFEASIBLE" in out and "wgmma" in out
    else:
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------- presets
@pytest.mark.parametrize("name, gen", [("rtx4090", "sm89"), ("l40s", "sm89"), ("b200", "sm100")])
def test_sm89_and_sm100_presets_are_scorable_and_cited(name, gen):
    dev = devices.get(name).require_model()
    assert generation(dev) == gen and not dev.wgmma
    for fig in ("sm_count", "l2_bytes", "clock_hz", "hbm_bw", "tensor_flops"):
        keys = dev.cite(fig)
        assert keys and all(k in devices.SOURCES for k in keys.split(", ")), (name, fig)
    assert any("borrows" in n for n in dev.notes)
    assert _score_time(dev) > 0


# ---------------------------------------------------------------------- every verb takes it
def test_every_gpu_verb_takes_a_device_file(capsys, tmp_path):
    rc, out, _ = _cli(capsys, "devices", "--device-file", str(RTX), "--json")
    assert rc == 0 and "my-rtx4090" in {d["name"] for d in json.loads(out)}
    rc, out, _ = _cli(capsys, "kernels", "--device-file", str(RTX), "--json")
    assert rc == 0 and json.loads(out) and all(r["kernel"] == "fa2" for r in json.loads(out))
    rc, out, err = _cli(capsys, "tune", "--N", "1024", "--d", "64", "--device-file", str(RTX),
                        "--top", "2", "--json", "--max-replays", "2")
    assert rc == 0 and json.loads(out) and "borrows sm80" in err
    f = tmp_path / "m.csv"
    f.write_text("device,kernel,pass,dtype,d,causal,N,batch,heads,time_s\n"
                 "my-rtx4090,fa2,fwd,fp16,64,0,2048,4,8,0.0002\n")
    rc, out, err = _cli(capsys, "validate", "--measurements", str(f), "--device-file", str(RTX))
    assert rc == 0 and "my-rtx4090" in out and "borrows sm80" in err
    rc, out, err = _cli(capsys, "score", "--N", "1024", "--d", "64", "--device", "h100",
                        "--device-file", str(RTX))
    assert rc == 2 and "not both" in err


# ---------------------------------------------------------------------- malformed files
def _edit(tmp_path, text: str | bytes) -> Path:
    f = tmp_path / "dev.toml"
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text)
    return f


BASE = RTX.read_text()


@pytest.mark.parametrize("text, needles", [
    (BASE.replace("sm_count = 128\n", ""), ["key 'sm_count'", "missing"]),
    (BASE.replace("sm_count = 128", 'sm_count = "many"'),
     ["key 'sm_count'", "an integer in [1, 1024]", "'many'"]),
    (BASE.replace("sm_count = 128", "sm_count = 128.5"), ["key 'sm_count'", "[1, 1024]"]),
    (BASE.replace("sm_count = 128", "sm_count = 0"), ["key 'sm_count'", "[1, 1024]", "got 0"]),
    (BASE.replace("clock_mhz = 2520", "clock_mhz = nan"), ["key 'clock_mhz'", "[100, 5000]"]),
    (BASE.replace("hbm_gb_s = 1008", "hbm_gb_s = true"), ["key 'hbm_gb_s'", "[1, 100000]"]),
    (BASE.replace("generation = ", "bogus = 1\ngeneration = "), ["key 'bogus'", "unknown key"]),
    (BASE.replace("fp16 = 165.2", "fp12 = 165.2"), ["key 'tensor_tflops.fp12'", "unknown"]),
    (BASE.replace('"sm89"', '"sm75"'), ["key 'generation'", "sm80, sm86, sm89, sm90, sm100",
                                        "'sm75'"]),
    (BASE.replace("smem_per_block_kib = 99", "smem_per_block_kib = 101"),
     ["key 'smem_per_block_kib'", "[16, 100]"]),
    (BASE.replace('"my-rtx4090"', '"h100"'), ["key 'name'", "preset"]),
    (BASE.replace("fp16 = 165.2\nbf16 = 165.2\n", ""), ["key 'tensor_tflops.bf16'", "missing"]),
    (BASE.split("[tensor_tflops]")[0] + "tensor_tflops = 3\n",
     ["key 'tensor_tflops'", "must be a table"]),
    (BASE.replace('"sm89"', '"sm86"'), ["key 'tensor_tflops.fp8'", "sm86 has no fp8"]),
    ("name = \n", ["not valid TOML"]),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00", ["binary file"]),
    (b"\xff\xfe\xfa garbage", ["not UTF-8"]),
])
def test_a_malformed_device_file_is_one_line_naming_file_key_and_range(tmp_path, capsys, text,
                                                                       needles):
    f = _edit(tmp_path, text)
    with pytest.raises(ParameterError) as e:
        device_file.load(f)
    assert e.value.param == "device_file"
    rc, out, err = _cli(capsys, "score", "--N", "1024", "--d", "64", "--device-file", str(f))
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"attnio gpu score: error: --device-file {f}")
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert "Traceback" not in err


@pytest.mark.parametrize("verb", ["devices", "kernels", "score", "tune", "validate",
                                  "calibrate"])
def test_a_missing_device_file_is_refused_on_every_verb(tmp_path, capsys, verb):
    m = tmp_path / "m.csv"
    m.write_text("device,kernel,pass,dtype,d,causal,N,batch,heads,time_s\n"
                 "h100,fa2,fwd,fp16,64,0,2048,4,8,0.0002\n")
    extra = {"score": ["--N", "1024", "--d", "64"], "tune": ["--N", "1024", "--d", "64"],
             "validate": ["--measurements", str(m)],
             "calibrate": ["--measurements", str(m), "--out", str(tmp_path / "c.json")]}
    rc, out, err = _cli(capsys, verb, *extra.get(verb, []), "--device-file",
                        str(tmp_path / "nope.toml"))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--device-file" in err and "nope.toml: no such file" in err
    assert not (tmp_path / "c.json").exists()


def test_a_folder_given_as_device_file_is_refused(tmp_path):
    with pytest.raises(ParameterError, match="is a folder"):
        device_file.load(tmp_path)


def test_a_generation_without_a_preset_takes_its_limits_and_a_preset_dies_memory_figures(
        tmp_path):
    """An A10-like sm86 file with only the required keys: cuda_cc's 8.6 limits (16 CTAs, 1,536
    threads per SM), the RTX 4090's memory-system figures marked assumed, fp16 = bf16."""
    f = tmp_path / "a10.toml"
    f.write_text('name = "a10"\ngeneration = "sm86"\nsm_count = 72\nclock_mhz = 1695\n'
                 "smem_per_sm_kib = 100\nsmem_per_block_kib = 99\nl2_mib = 6\nhbm_gb_s = 600\n"
                 "[tensor_tflops]\nbf16 = 125\n")
    dev = device_file.load(f)
    assert (dev.compute_capability, dev.max_ctas_per_sm, dev.max_threads_per_sm) == ("8.6", 16,
                                                                                    1536)
    assert dev.tensor_flops["fp16"] == dev.tensor_flops["bf16"] == 125e12
    assert dev.tensor_flops["fp8"] is None and dev.hbm_bytes is None
    rtx = devices.get("rtx4090")
    assert dev.l2_hit_latency_clk == rtx.l2_hit_latency_clk
    assert set(dev.assumed) == {"sm_l2_bytes_per_clk", "l2_hit_latency_clk", "dram_latency_clk"}
    assert dev.l2_bytes == 6 * 2**20 and dev.hbm_bw == 600e9 and dev.clock_hz == 1695e6
    with pytest.warns(fits.FitWarning, match=r"a10 \(sm86\).*borrows sm80"):
        assert attnio.hardware.score(dev, (2048, 64), "fa2").feasible

