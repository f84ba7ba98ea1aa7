"""The SQLite results store: keys, transactions, refusal of foreign/old/unwritable databases,
exports that round-trip."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from attnio.cli import main as cli_main
from attnio.core.errors import MissingExtraError, ParameterError
from attnio.experiments.store import (
    COLUMN_NAMES,
    SCHEMA_VERSION,
    ResultsStore,
    StoreError,
    read_export,
)
from attnio.experiments.sweep import FORWARD_ONLY, Grid, parse_values, run_sweep
from conftest import block_parquet_engines, needs


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _row(h, status="ok", **kw):
    r = {"config_hash": h, "status": status, "algorithm": "flash2", "Nq": 8, "Nkv": 8, "d": 4,
         "M": 64, "causal": False, "mode": "count", "total": 100, "reads": 90, "writes": 10}
    r.update(kw)
    return r


def test_insert_keeps_one_row_per_hash_and_replaces_only_errors(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as st:
        assert st.insert([_row("a"), _row("b", status="error", reason="boom")]) == 2
        st.insert([_row("a", total=999)])  # an ok row is never overwritten or duplicated
        st.insert([_row("b", total=7)])    # an error row is retried
        rows = {r["config_hash"]: r for r in st.rows()}
        assert st.count() == 2
        assert rows["a"]["total"] == 100
        assert rows["b"]["status"] == "ok" and rows["b"]["total"] == 7
        assert st.done_hashes() == {"a", "b"}
        assert st.meta()["schema_version"] == str(SCHEMA_VERSION)


def test_insert_of_a_bad_batch_writes_nothing(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as st:
        with pytest.raises(ParameterError, match="config_hash"):
            st.insert([_row("a"), {"status": "ok"}])
        assert st.count() == 0


def test_wal_mode(tmp_path):
    p = tmp_path / "r.sqlite"
    ResultsStore(p).close()
    con = sqlite3.connect(p)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_foreign_file_is_refused_and_not_overwritten(tmp_path):
    p = tmp_path / "notes.sqlite"
    p.write_text("my thesis, do not delete\n")
    before = _digest(p)
    with pytest.raises(StoreError, match="not an SQLite database"):
        ResultsStore(p)
    assert _digest(p) == before


def test_foreign_sqlite_database_is_refused_and_untouched(tmp_path):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE customers (id INTEGER)")
    con.commit()
    con.close()
    before = _digest(p)
    with pytest.raises(StoreError, match="not an attnio results store"):
        ResultsStore(p)
    assert _digest(p) == before


def test_corrupted_database_is_refused_and_untouched(tmp_path):
    p = tmp_path / "r.sqlite"
    with ResultsStore(p) as st:
        st.insert([_row("a")])
    data = bytearray(p.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # keep the magic header, destroy the schema page
    p.write_bytes(bytes(data))
    before = _digest(p)
    with pytest.raises(StoreError):
        ResultsStore(p)
    assert _digest(p) == before


def test_incompatible_schema_version_is_refused_and_untouched(tmp_path):
    p = tmp_path / "old.sqlite"
    ResultsStore(p).close()
    con = sqlite3.connect(p)
    con.execute("UPDATE attnio_meta SET value = '999' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    before = _digest(p)
    with pytest.raises(StoreError, match="schema version 999"):
        ResultsStore(p)
    assert _digest(p) == before


def test_unwritable_paths_are_refused_before_anything_is_created(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        ResultsStore(tmp_path / "missing" / "r.sqlite")
    f = tmp_path / "plainfile"
    f.write_text("x")
    with pytest.raises(StoreError):
        ResultsStore(f / "r.sqlite")
    with pytest.raises(StoreError, match="directory"):
        ResultsStore(tmp_path)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["plainfile"]


def test_readonly_needs_an_existing_database(tmp_path):
    with pytest.raises(StoreError, match="no results database"):
        ResultsStore(tmp_path / "none.sqlite", readonly=True)
    assert not (tmp_path / "none.sqlite").exists()


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    db = tmp_path_factory.mktemp("store") / "r.sqlite"
    g = Grid(N=(64, 128), d=(8,), M=parse_values("M", "16:1024:x4"),
             algorithms=("flash2", "standard", "flash1"), causal=(False, True))
    run_sweep(g, db, jobs=1)
    return db


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_round_trips(swept, tmp_path, fmt):
    out = tmp_path / f"rows.{fmt}"
    with ResultsStore(swept, readonly=True) as st:
        n = st.export(out)
        rows = st.rows()
    assert n == len(rows) > 0
    assert {r["status"] for r in rows} == {"ok", "skipped"}
    back = read_export(out)
    assert back == rows
    # floats survive exactly, JSON columns parse
    assert any(r["wall_s"] is not None for r in back)
    assert all(json.loads(r["tiling"]) for r in back if r["status"] == "ok")


@needs("pandas", "pyarrow")
def test_parquet_export_round_trips(swept, tmp_path):
    out = tmp_path / "rows.parquet"
    with ResultsStore(swept, readonly=True) as st:
        st.export(out)
        assert read_export(out) == st.rows()


def test_parquet_export_without_an_engine_names_the_extra(swept, tmp_path, monkeypatch):
    block_parquet_engines(monkeypatch)
    out = tmp_path / "rows.parquet"
    with ResultsStore(swept, readonly=True) as st:
        with pytest.raises(MissingExtraError, match=r"pip install 'attnio\[parquet\]'"):
            st.export(out)
    assert not out.exists()


def test_export_rejects_unknown_format(swept, tmp_path):
    with ResultsStore(swept, readonly=True) as st, pytest.raises(ParameterError, match="format"):
        st.export(tmp_path / "rows.xlsx")


def test_columns_cover_every_row_key(swept):
    with ResultsStore(swept, readonly=True) as st:
        r = st.rows("ok")[0]
    assert tuple(r) == COLUMN_NAMES
    for c in ("reads", "writes", "total", "peak", "tiling", "bounds", "bound", "ratio",
              "wall_s", "version", "config_hash"):
        assert r[c] is not None, c


def test_module_docstring_examples_run():
    import doctest

    import attnio.experiments.store

    assert doctest.testmod(attnio.experiments.store).failed == 0


def _schema2_db(path, rows):
    """A database as attnio wrote it at schema version 2 (no backward_* columns)."""
    from attnio.experiments.store import ADDED_IN_3, COLUMNS

    cols = [(c, t) for c, t in COLUMNS if c not in ADDED_IN_3]
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE attnio_meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO attnio_meta VALUES ('schema_version', '2')")
    con.execute("CREATE TABLE results (" + ", ".join(
        f"{c} {t}{' PRIMARY KEY' if c == 'config_hash' else ''}" for c, t in cols) + ")")
    for r in rows:
        names = [c for c, _ in cols if c in r]
        con.execute(f"INSERT INTO results ({', '.join(names)}) VALUES "
                    f"({', '.join('?' for _ in names)})",
                    [int(r[c]) if isinstance(r[c], bool) else r[c] for c in names])
    con.commit()
    con.close()


def test_a_schema_2_database_is_read_as_it_is_and_migrated_when_written(tmp_path):
    path = tmp_path / "old.sqlite"
    _schema2_db(path, [_row("a", ratio=2.5, bound=40.0, bound_name="trivial")])
    before = _digest(path)
    with ResultsStore(path, readonly=True) as st:  # read-only: nothing changes
        (r,) = st.rows()
        assert r["ratio"] == 2.5 and r["backward_total"] is None and r["backward_ratio"] is None
    assert _digest(path) == before
    with ResultsStore(path) as st:  # for writing: the columns are added, the rows kept
        assert st.meta()["schema_version"] == str(SCHEMA_VERSION) == "3"
        st.insert([_row("b", backward=True, backward_algorithm="flash2_backward",
                        backward_total=300, backward_bound=100.0,
                        backward_bound_name="backward_trivial", backward_ratio=3.0)])
        rows = {r["config_hash"]: r for r in st.rows()}
        assert rows["a"]["ratio"] == 2.5 and rows["a"]["backward_total"] is None
        assert rows["b"]["backward_ratio"] == 3.0 and rows["b"]["backward"] == 1
    with ResultsStore(path) as st:  # a second open migrates nothing more
        assert len(st.rows()) == 2
    # an old export (schema 2, no backward_* keys) reads back with None there
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema_version": 2, "rows": [_row("a")]}))
    (r,) = read_export(old)
    assert r["backward_total"] is None and r["total"] == 100


def test_a_sweep_with_the_backward_pass_stores_its_certificate(tmp_path):
    db = tmp_path / "r.sqlite"
    grid = Grid(N=parse_values("N", "128"), d=(16,), M=parse_values("M", "100,2048"),
                algorithms=("flash2", "standard"), causal=(False, True), backward=True)
    run_sweep(grid, db, jobs=1, progress=False)
    with ResultsStore(db, readonly=True) as st:
        ok, skipped = st.rows("ok"), st.rows("skipped")
    # standard has no backward pass: it keeps its forward rows, marked forward only (not skipped)
    assert not [r for r in skipped if "backward" in (r["reason"] or "")]
    fwd = [r for r in ok if r["algorithm"] == "standard"]
    assert len(fwd) == 4  # two masks x two M
    for r in fwd:
        assert r["reason"].startswith(FORWARD_ONLY) and r["backward"] == 0
        assert r["backward_total"] is None and r["backward_bound"] is None
        assert r["predicted_reads"] == r["reads"] and r["ratio"] == r["total"] / r["bound"]
    ok = [r for r in ok if r["algorithm"] == "flash2"]
    assert len(ok) == 4
    for r in ok:
        assert r["backward"] == 1 and r["backward_total"] == r["backward_reads"] + \
            r["backward_writes"]
        assert r["backward_ratio"] == r["backward_total"] / r["backward_bound"] >= 1
        assert r["ratio"] == r["total"] / r["bound"] >= 1
        assert r["predicted_reads"] == r["reads"] and r["predicted_writes"] == r["writes"]
    small = [r for r in ok if r["M"] == 100]
    assert small and all(r["backward_algorithm"] == "small_cache_backward" for r in small)


def _swept(tmp_path):
    from attnio.experiments.sweep import Grid, run_sweep

    db = tmp_path / "e.sqlite"
    run_sweep(Grid(N=(256, 512), d=(16,), M=(64, 4096), algorithms=("flash2", "standard"),
                   causal=(False, True)), db, jobs=1)
    return db


def test_exports_keep_integers_integer_and_tilings_and_bounds_as_columns(tmp_path):
    import csv as _csv

    db = _swept(tmp_path)
    with ResultsStore(db, readonly=True) as st:
        st.export(tmp_path / "r.csv")
        rows = st.rows()
    with open(tmp_path / "r.csv", newline="") as f:
        got = list(_csv.DictReader(f))
    ok = [r for r in got if r["status"] == "ok"]
    assert ok and all(r["total"].isdigit() and r["Nq"].isdigit() for r in ok)
    assert all(r["tiling_Br"].isdigit() for r in ok if "flash2" == r["algorithm"])
    assert all(float(r["bound_trivial"]) > 0 for r in ok)
    assert read_export(tmp_path / "r.csv") == rows
    pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    with ResultsStore(db, readonly=True) as st:
        st.export(tmp_path / "r.parquet")
    df = pd.read_parquet(tmp_path / "r.parquet")
    for c in ("Nq", "M", "total", "reads", "tiling_Br"):
        assert str(df[c].dtype) == "Int64", (c, df[c].dtype)
    assert str(df["bound_trivial"].dtype) == "float64"
    assert read_export(tmp_path / "r.parquet") == rows


def test_json_export_holds_tilings_and_bounds_as_objects(tmp_path):
    db = _swept(tmp_path)
    with ResultsStore(db, readonly=True) as st:
        st.export(tmp_path / "r.json")
        rows = st.rows()
    doc = json.loads((tmp_path / "r.json").read_text())
    ok = [r for r in doc["rows"] if r["status"] == "ok"]
    assert all(isinstance(r["tiling"], dict) and isinstance(r["bounds"], dict) for r in ok)
    assert read_export(tmp_path / "r.json") == rows


def test_latex_export_is_a_booktabs_table(tmp_path, capsys):
    db = _swept(tmp_path)
    out = tmp_path / "t.tex"
    assert cli_main(["sweep", "export", "--db", str(db), "--format", "latex", "--out",
                     str(out)]) == 0
    tex = out.read_text()
    with ResultsStore(db, readonly=True) as st:
        n_ok = st.count("ok")
    body = tex.split("\\midrule\n")[1].split("\\bottomrule")[0].strip().splitlines()
    assert "\\toprule" in tex and "\\end{tabular}" in tex and len(body) == n_ok
    assert all(line.endswith("\\\\") and line.count(" & ") == 8 for line in body)
    assert "flash2" in tex and "bottom-right" in tex
    with pytest.raises(ParameterError):
        read_export(out)


# ------------------------------------------------------------------ export: --where, latex options
def test_export_where_keeps_the_matching_rows_only(swept, tmp_path):
    from attnio.experiments.store import read_export

    out = tmp_path / "w.csv"
    with ResultsStore(swept, readonly=True) as st:
        all_rows = st.rows()
        n = st.export(out, where="algorithm=flash1|flash2,causal=false,N=128")
    want = [r for r in all_rows if r["algorithm"] in ("flash1", "flash2") and not r["causal"]
            and r["Nq"] == 128]
    assert n == len(want) > 0
    assert sorted(r["config_hash"] for r in read_export(out)) == \
        sorted(r["config_hash"] for r in want)


def test_latex_pivot_caption_label_and_longtable(swept, tmp_path):
    from attnio.experiments.store import LatexOptions

    with ResultsStore(swept, readonly=True) as st:
        rows = st.rows()
        out = tmp_path / "p.tex"
        st.export(out, where="d=8,M=1024,causal=false",
                  latex=LatexOptions(caption="I/O at M = 1024", label="tab:io",
                                     pivot=("N", "algorithm")))
        text = out.read_text()
        assert "\\begin{table}" in text and "\\caption{I/O at M = 1024}" in text
        assert "\\label{tab:io}" in text and "N & flash1 & flash2 & standard \\\\" in text
        for n in (64, 128):  # each cell is that row's total
            cells = [next(r["total"] for r in rows if r["algorithm"] == a and r["Nq"] == n
                          and r["M"] == 1024 and not r["causal"])
                     for a in ("flash1", "flash2", "standard")]
            line = " & ".join([f"{n:,}".replace(",", "\\,")]
                              + [f"{c:,}".replace(",", "\\,") for c in cells]) + " \\\\"
            assert line in text
        st.export(tmp_path / "l.tex", latex=LatexOptions(longtable=True, caption="all rows"))
        long = (tmp_path / "l.tex").read_text()
        assert "\\begin{longtable}" in long and "\\endhead" in long and "\\caption{all rows}" in long


@pytest.mark.parametrize("argv,fragment", [
    (["--where", "dd=8"], "--where: unknown field 'dd'"),
    (["--where", "d"], "--where: 'd' is not field=value"),
    (["--pivot", "N"], "--pivot must be ROW,COLUMN"),
    (["--pivot", "N,algorithm"], "--pivot: several rows have"),
    (["--pivot", "N,nope"], "--pivot: unknown field 'nope'"),
    (["--value", "ratio"], "--value goes with --pivot"),
    (["--caption", "x", "--format", "csv"], "--caption is for a latex export"),
])
def test_export_option_errors_are_one_line(swept, tmp_path, capsys, argv, fragment):
    from attnio.cli import main

    out = tmp_path / ("x.csv" if "csv" in argv else "x.tex")
    assert main(["sweep", "export", "--db", str(swept), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err
    assert not out.exists()


def test_a_sweep_records_its_provenance_and_the_report_shows_it(swept, tmp_path):
    """The database records where each sweep ran (attnio's version, the git commit, Python,
    platform, host, time: ``first_sweep_*`` once, ``last_sweep_*`` every run); the report names
    it."""
    import attnio
    from attnio.core.provenance import provenance
    from attnio.experiments.report.pages import summary

    with ResultsStore(swept, readonly=True) as st:
        meta = st.meta()
    for key in ("attnio", "git_commit", "python", "platform", "host", "at"):
        assert meta[f"last_sweep_{key}"] and meta[f"first_sweep_{key}"]
    assert meta["last_sweep_attnio"] == attnio.__version__
    assert set(provenance()) == {"attnio", "git_commit", "python", "platform", "host", "at"}
    s = summary([], meta, str(swept))
    assert s["provenance"].startswith(f"swept with attnio {attnio.__version__}")
    assert meta["last_sweep_host"] in s["provenance"]


def test_provenance_keeps_the_first_sweep_and_updates_the_last(tmp_path):
    db = tmp_path / "p.sqlite"
    with ResultsStore(db) as st:
        st.record_provenance({"attnio": "0.1", "at": "t1"})
        st.record_provenance({"attnio": "0.2", "at": "t2"})
        meta = st.meta()
    assert meta["first_sweep_attnio"] == "0.1" and meta["last_sweep_attnio"] == "0.2"
    assert meta["first_sweep_at"] == "t1" and meta["last_sweep_at"] == "t2"
