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
    assert rows["paged"]["page_size"] == 256 and "page_size=256 not modelled" in \
        rows["paged"]["config"]
    assert rows["paged"]["predicted_s"] == rows["decode"]["predicted_s"]
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
