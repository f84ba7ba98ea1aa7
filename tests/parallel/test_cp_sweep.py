"""Context-parallel sweeps into the results database (attnio.experiments.cp): rows equal the
closed forms and the planner, a rerun computes nothing, an interrupted sweep leaves whole rows
and resumes, the figure's slopes are fitted (the 2-D grid's about -1/2), bad input one line."""

from __future__ import annotations

import json

import pytest

import attnio.parallel as cp
from attnio.core.workload import Shape
from attnio.experiments import cp as cps
from attnio.parallel.planner import plan


def test_rows_equal_the_planner_and_a_rerun_computes_nothing(tmp_path):
    db = str(tmp_path / "r.sqlite")
    s = Shape(1 << 12, 1 << 12, 64, heads=8, kv_heads=2, causal=True)
    summ = cps.cp_sweep(db, s, (1, 2, 4, 8, 16), ("ring", "ulysses", "usp", "grid"))
    assert (summ.total, summ.ran, summ.errors) == (20, 20, 0)
    rows = cps.cp_rows(db)
    assert len(rows) == 20
    for r in rows:
        if r["status"] == "ok":
            p = plan(s, r["P"], r["scheme"])
            assert (r["words_per_device"], r["total_words"], r["params"]) == (
                p.words_per_device, p.total_words, p.params)
            assert r["bound"] == cp.bound(s, r["P"]).value <= r["words_per_device"]
            assert r["footprint"] == max(cp.footprint(r["scheme"], s, r["P"], r["params"]))
        else:
            assert r["status"] == "skipped" and r["reason"].split(":")[0] in ("heads", "P",
                                                                               "kv_heads")
    assert {(r["scheme"], r["P"]) for r in rows if r["status"] == "skipped"} >= {
        ("ulysses", 16), ("usp", 2), ("grid", 1)}
    assert cps.cp_sweep(db, s, (1, 2, 4, 8, 16), ("ring", "ulysses", "usp", "grid")).ran == 0
    b = cps.cp_sweep(db, s, (8,), ("ring",), backward=True)  # another pass: another row
    assert b.ran == 1 and len(cps.cp_rows(db)) == 21


def test_an_interrupted_sweep_leaves_whole_rows_and_resumes(tmp_path, monkeypatch):
    db = str(tmp_path / "r.sqlite")
    s = Shape(1 << 12, 1 << 12, 64, heads=4)
    real, calls = cps.cp_row, []

    def flaky(*a, **k):
        calls.append(a)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(cps, "cp_row", flaky)
    with pytest.raises(KeyboardInterrupt):
        cps.cp_sweep(db, s, (2, 4, 8), ("ring", "grid"), batch=2)
    assert len(cps.cp_rows(db)) == 2  # the first batch, whole
    monkeypatch.setattr(cps, "cp_row", real)
    summ = cps.cp_sweep(db, s, (2, 4, 8), ("ring", "grid"))
    assert (summ.already, summ.ran) == (2, 4) and len(cps.cp_rows(db)) == 6


def _slope_rows(tmp_path):
    db = str(tmp_path / "r.sqlite")
    s = Shape(1 << 20, 1 << 20, 128)
    cps.cp_sweep(db, s, [1 << k for k in range(11)], ("ring", "grid"))
    return cps.cp_rows(db)


def test_grid_slope_about_minus_half(tmp_path):
    slopes = cps.fit_slopes(_slope_rows(tmp_path))["N=1048576 d=128 heads=1"]
    assert -0.55 < slopes["grid"] < -0.42 and abs(slopes["ring"]) < 0.05
    assert -0.55 < slopes["bound"] < -0.4


@pytest.mark.slow  # matplotlib's import is most of it
def test_the_figure(tmp_path):
    pytest.importorskip("matplotlib")
    rows = _slope_rows(tmp_path)
    out = tmp_path / "f.png"
    assert cps.cp_figure(rows, str(out)) == cps.fit_slopes(rows)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _cli(capsys, *argv):
    from attnio.cli.app import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_cp_sweep_json(tmp_path, capsys):
    db = str(tmp_path / "r.sqlite")
    rc, out, _ = _cli(capsys, "cp", "sweep", "--db", db, "--N", "4096", "--d", "64", "--heads",
                      "4", "--P", "2:8:x2", "--schemes", "ring,ulysses", "--json")
    assert rc == 0 and json.loads(out)["ran"] == 6


@pytest.mark.parametrize("argv, flag", [
    (["sweep", "--N", "64", "--d", "8", "--P", "0:4"], "--P"),
    (["sweep", "--N", "64", "--d", "8", "--P", "2", "--schemes", "ring,nope"], "--schemes"),
    (["figure", "--out", "x.png", "--fit", "8"], "--fit"),
])
def test_cli_cp_sweep_bad_input(tmp_path, capsys, argv, flag):
    rc, out, err = _cli(capsys, "cp", *argv, "--db", str(tmp_path / "r.sqlite"))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err, err


def test_cli_cp_figure_without_rows(tmp_path, capsys):
    db = str(tmp_path / "r.sqlite")
    from attnio.experiments.store import ResultsStore

    ResultsStore(db).close()
    rc, out, err = _cli(capsys, "cp", "figure", "--db", db, "--out", str(tmp_path / "f.png"))
    assert rc == 2 and "cp sweep" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a sweep, a report and matplotlib
def test_the_report_has_the_cp_section(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    db = str(tmp_path / "r.sqlite")
    cps.cp_sweep(db, Shape(1 << 16, 1 << 16, 64), [1 << k for k in range(0, 11, 2)],
                 ("ring", "grid"))
    assert _cli(capsys, "sweep", "--db", db, "--N", "256", "--d", "16", "--M", "1024",
                "--algo", "flash2", "--quiet")[0] == 0
    from attnio.experiments.report import ReportOptions, build_report

    rep = build_report(db, str(tmp_path / "rep"),
                       options=ReportOptions(("png",), html_page=False))
    assert "cp_words_vs_P.png" in rep.figures
    text = (tmp_path / "rep" / "REPORT.md").read_text()
    assert "## Context parallelism" in text and "| grid |" in text
    fits = json.loads((tmp_path / "rep" / "cp_fits.json").read_text())
    assert -0.6 < fits["slopes"]["N=65536 d=64 heads=1"]["grid"] < -0.4
