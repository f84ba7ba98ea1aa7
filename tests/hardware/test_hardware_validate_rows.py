"""`gpu validate` on the rows a kernel engineer has (Nq, Nkv, window, kv_heads, page_size,
config), each row naming the config it assumed, and a CSV reader that refuses bad files in one
line naming the file, the row and the column (no traceback, no Infinity in the JSON)."""

from __future__ import annotations

import csv
import json

import pytest

from attnio.core.errors import ParameterError
from attnio.core.workload import Shape
from attnio.hardware import devices
from attnio.hardware.kernels import named_config, parse_config
from attnio.hardware.validate import OPTIONAL, load_rows, validate

HEAD = ("device,kernel,pass,dtype,d,causal,N,Nq,Nkv,batch,heads,kv_heads,window,page_size,"
        "config,time_s\n")
ROWS = {
    "decode": "h100,fa3,fwd,bf16,128,0,,1,8192,8,64,8,,,,0.0001\n",
    "window": "h100,fa3,fwd,bf16,128,1,4096,,,2,16,,1024,,,0.0002\n",
    "paged": "h100,fa3,fwd,bf16,128,0,,1,8192,8,64,8,,256,,0.0001\n",
    "config": 'h100,fa3,fwd,bf16,128,0,4096,,,2,16,,,,"Br=128,Bc=128,warps=12,stages=2",0.0005\n',
    "bwd": "a100,fa2,bwd,bf16,64,1,4096,,,2,32,,,,Br=64;Bc=128;warps=8;stages=1,0.002\n",
    "plain": "h100,fa3,fwd,bf16,128,0,4096,,,2,16,,,,,0.0005\n",
}


def _cli(capsys, *argv):
    from attnio.cli import main

    rc = main(["gpu", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _no_constant(c):
    raise AssertionError(f"JSON holds {c}")


@pytest.fixture(scope="module")
def engineer(tmp_path_factory):
    f = tmp_path_factory.mktemp("v") / "eng.csv"
    f.write_text(HEAD + "".join(ROWS.values()))
    return f, validate(f)


def test_optional_columns_shape_each_row(engineer):
    f, res = engineer
    rows = {k: r for k, r in zip(ROWS, res["rows"])}
    d = rows["decode"]
    assert (d["Nq"], d["Nkv"], d["N"], d["kv_heads"], d["heads"]) == (1, 8192, None, 8, 64)
    shape = Shape(1, 8192, 128, batch=8, heads=64, kv_heads=8)
    shipped = named_config("fa3", devices.get("h100"), shape, "bf16")
    assert d["config"] == shipped.short() + " (shipped)"
    assert d["configs"] == [shipped.as_dict()]
    assert rows["window"]["window"] == 1024 and rows["window"]["causal"] is True
    # a paged row runs the config flash-attn runs on a paged cache, at paged K/V's HBM rate
    paged = named_config("fa3", devices.get("h100"), shape, "bf16", page_size=256)
    assert rows["paged"]["page_size"] == 256 and paged.page_size == 256
    assert rows["paged"]["config"] == paged.short() + " (shipped)"
    assert rows["paged"]["predicted_s"] > rows["decode"]["predicted_s"]
    given = parse_config("Br=128,Bc=128,warps=12,stages=2", algorithm="fa3", dtype="bf16")
    assert rows["config"]["config"] == given.short() + " (given)"
    assert rows["config"]["predicted_s"] != rows["plain"]["predicted_s"]   # another tile
    assert rows["bwd"]["configs"][0]["algorithm"] == "fa2_bwd"
    assert rows["bwd"]["configs"][0]["Br"] == 64 and rows["bwd"]["configs"][0]["Bc"] == 128
    for r in res["rows"]:
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)


def test_cli_names_each_rows_config_and_documents_the_columns(engineer, capsys):
    f, _ = engineer
    rc, out, _ = _cli(capsys, "validate", "--measurements", str(f))
    lines = out.strip().splitlines()
    assert rc == 0 and lines[0].rstrip().endswith("config") and len(lines) == len(ROWS) + 2
    assert "Nq=1 Nkv=8192" in lines[1] and "(shipped)" in lines[1]
    assert "(given)" in lines[4]
    rc, out, _ = _cli(capsys, "validate", "--measurements", str(f), "--json")
    assert rc == 0 and len(json.loads(out, parse_constant=_no_constant)["rows"]) == len(ROWS)
    rc, out, _ = _cli(capsys, "validate", "--help")
    helptext = " ".join(out.split())
    assert rc == 0
    for col in OPTIONAL:
        assert col in helptext, col


def test_a_utf8_byte_order_mark_is_read_as_the_same_file(tmp_path, engineer):
    f, res = engineer
    g = tmp_path / "bom.csv"
    g.write_bytes(b"\xef\xbb\xbf" + f.read_bytes())
    assert validate(g)["rows"] == res["rows"]


# ---------------------------------------------------------------------- refusals
def _write(tmp_path, header: list[str], row: list[str]):
    f = tmp_path / "bad.csv"
    with f.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerow(row)
    return f


H = ["source", "device", "kernel", "pass", "dtype", "d", "causal", "N", "batch", "heads",
     "tflops"]
R = ["paper", "h100", "fa2", "fwd", "fp16", "64", "0", "512", "32", "32", "282"]


def _with(col, value, header=H, row=R):
    header, row = list(header), list(row)
    if col in header:
        row[header.index(col)] = value
    else:
        header.append(col)
        row.append(value)
    return header, row


BAD = {
    "200 kB field": (*_with("source", "x" * 200_000), "source"),
    "tflops=1e300": (*_with("tflops", "1e300"), "tflops"),
    "tflops=inf": (*_with("tflops", "inf"), "tflops"),
    "tflops=nan": (*_with("tflops", "nan"), "tflops"),
    "time_s=5e-324": (*_with("time_s", "5e-324", [c for c in H if c != "tflops"], R[:-1]),
                      "time_s"),
    "time_s=1e300": (*_with("time_s", "1e300", [c for c in H if c != "tflops"], R[:-1]),
                     "time_s"),
    "Nq=0": (*_with("Nq", "0"), "Nq"),
    "N and Nq empty": (*_with("N", ""), "N"),
    "window, not causal": (*_with("window", "64"), "window"),
    "kv_heads not a divisor": (*_with("kv_heads", "5"), "kv_heads"),
    "page_size=0": (*_with("page_size", "0"), "page_size"),
    "config bad key": (*_with("config", "Br=128,Zz=3"), "config"),
    "config too big": (*_with("config", "Br=256,Bc=256,warps=8,stages=3"), "config"),
    "config on fwd+bwd": (*_with("config", "Br=128,Bc=64", row=[*R[:3], "fwd+bwd", *R[4:]]),
                          "config"),
    "config dtype conflicts": (*_with("config", "Br=128,Bc=64,dtype=fp8"), "config"),
    "config for a bwd algorithm on fwd": (*_with("config", "algorithm=fa2_bwd,Br=64,Bc=128"),
                                          "config"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_row_is_one_line_naming_file_row_and_column(tmp_path, capsys, case):
    header, row, col = BAD[case]
    f = _write(tmp_path, header, row)
    with pytest.raises(ParameterError):
        load_rows(f) if "config too big" not in case else validate(f)
    rc, out, err = _cli(capsys, "validate", "--measurements", str(f), "--json")
    assert rc == 2 and out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "bad.csv" in lines[0] and "row 1 (line 2)" in lines[0] and f"column {col!r}" in \
        lines[0], lines[0]


@pytest.mark.parametrize("data, needle", [
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "a binary file (NUL byte"),
    (b"device,kernel\n\xff\xfe\xfd,fa2\n", "not UTF-8 text"),
    (b"device,kernel,pass,dtype,d,causal,N,batch,heads,tflops\n"
     b"h100,fa2,fwd,fp16,64,0,512,32,32,282,99\n", "more field(s) than the header"),
    (b"device,kernel,pass,dtype,d,causal,N,batch,heads,tflops\nh100,fa2,fwd\n", "missing"),
])
def test_a_bad_file_is_one_line(tmp_path, capsys, data, needle):
    f = tmp_path / "bad.csv"
    f.write_bytes(data)
    rc, out, err = _cli(capsys, "validate", "--measurements", str(f))
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and needle in lines[0]
    assert "bad.csv" in lines[0] and "column" in lines[0]


def test_paged_rows_follow_flash_attns_paged_kernels(tmp_path):
    """FA3 loads pages with TMA only when the page size is a multiple of kBlockN and
    seqlen_q x heads/kv_heads > kBlockM (``get_pagedkv_tma``); otherwise its non-TMA tile
    (``paged_kv_non_TMA``) with PackGQA.  FA2 needs pages of a multiple of 256 and always runs
    its split-KV kernel."""
    h100, a100 = devices.get("h100"), devices.get("a100")
    prefill = Shape(8192, 8192, 128, batch=2, heads=16)
    flat = named_config("fa3", h100, prefill, "bf16")
    assert (flat.Br, flat.Bc) == (128, 176)
    tma = named_config("fa3", h100, prefill, "bf16", page_size=176 * 2)
    assert (tma.Br, tma.Bc, tma.page_size, tma.pack_gqa) == (128, 176, 352, False)
    non_tma = named_config("fa3", h100, prefill, "bf16", page_size=256)   # 256 % 176 != 0
    assert (non_tma.Br, non_tma.Bc, non_tma.pack_gqa) == (128, 128, True)
    assert "non-TMA" in non_tma.label
    decode = Shape(1, 8192, 128, batch=8, heads=64, kv_heads=8)   # 1 x 8 rows <= kBlockM
    assert named_config("fa3", h100, decode, "bf16", page_size=128 * 4).pack_gqa
    fa2 = named_config("fa2", a100, prefill, "bf16", page_size=256)
    assert (fa2.algorithm, fa2.page_size) == ("splitkv", 256)
    with pytest.raises(ParameterError) as e:
        named_config("fa2", a100, prefill, "bf16", page_size=16)
    assert e.value.param == "page_size" and "multiple of 256" in str(e.value)
    with pytest.raises(ParameterError) as e:
        named_config("sdpa", a100, prefill, "bf16", page_size=256)
    assert e.value.param == "page_size"


@pytest.mark.parametrize("row, col", [
    ("a100,fa2,fwd,bf16,128,0,4096,,,2,16,,,16,,0.001\n", "page_size"),      # not 256k
    ("a100,fa2,bwd,bf16,128,0,4096,,,2,16,,,256,,0.001\n", "page_size"),     # backward
    ("h100,standard,fwd,bf16,128,0,4096,,,2,16,,,256,,0.001\n", "page_size"),
    ('h100,fa3,fwd,bf16,128,0,4096,,,2,16,,,256,"Br=128,Bc=128,page=64",0.001\n', "config"),
])
def test_paged_rows_that_flash_attn_does_not_run_are_refused(tmp_path, row, col):
    f = tmp_path / "p.csv"
    f.write_text(HEAD + row)
    with pytest.raises(ParameterError) as e:
        validate(f)
    assert f"column {col!r}" in str(e.value) and "\n" not in str(e.value)


def test_a_paged_config_row_reads_paged_kv(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text(HEAD + 'h100,fa3,fwd,bf16,128,0,,1,8192,8,64,8,,16,"Br=128,Bc=128,pack=1,splits=8",0.0001\n'
                 + 'h100,fa3,fwd,bf16,128,0,,1,8192,8,64,8,,,"Br=128,Bc=128,pack=1,splits=8",0.0001\n')
    a, b = validate(f)["rows"]
    assert a["configs"][0]["page_size"] == 16 and "page=16" in a["config"]
    assert a["predicted_s"] > b["predicted_s"]
