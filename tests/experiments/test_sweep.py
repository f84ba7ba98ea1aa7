"""Sweeps: grid expansion, skip reasons, resumability after SIGKILL, the local pool and a Dask
LocalCluster giving the same rows, and one-line errors for bad input from the CLI."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import signal
import sqlite3
import sys
import time

import pytest
from sweep_signals import HANG_S, pause_under_way, start_sweep

import attnio
from attnio.algorithms import mapper
from attnio.cli import main as cli_main
from attnio.core.errors import ParameterError, UnknownNameError
from attnio.core.workload import Shape
from attnio.experiments.store import ResultsStore
from attnio.experiments.sweep import (
    FORWARD_ONLY,
    PRESETS,
    Config,
    Grid,
    expand,
    grids_from_toml,
    parse_causal,
    parse_values,
    run_config,
    run_sweep,
)
from conftest import block_parquet_engines, need, stored_rows

VOLATILE = ("wall_s", "created_at")  # the only columns that differ between two runs


def _stable(rows):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def _rows(db):
    with ResultsStore(db, readonly=True) as st:
        return st.rows()


SMALL = Grid(N=(64, 128), d=(8, 16), M=parse_values("M", "64:1024:x4"),
             algorithms=("flash2", "standard", "square_tiling", "flash1"), causal=(False, True))


# ----------------------------------------------------------------------------- grids
@pytest.mark.parametrize("spec, want", [
    ("256:2048:x2", (256, 512, 1024, 2048)),
    ("256:1048576:x4", (256, 1024, 4096, 16384, 65536, 262144, 1048576)),
    ("16,64,128", (16, 64, 128)),
    ("10:30:+10", (10, 20, 30)),
    ("64,16:64:x2", (16, 32, 64)),
    ("100:300:x2", (100, 200)),
    (7, (7,)),
    ([4, "8:16:x2"], (4, 8, 16)),
])
def test_parse_values(spec, want):
    assert parse_values("N", spec) == want


@pytest.mark.parametrize("spec, match", [
    ("2048:256:x2", "empty grid"), ("", "no values"), ("0,4", ">= 1"), ("4:8:x1", "factor"),
    ("4:8:y2", "step"), ("a:8", "not an integer"), ("1:2:3:4", "START:STOP"),
])
def test_parse_values_rejects_bad_specs_naming_the_parameter(spec, match):
    with pytest.raises(ParameterError, match=match) as e:
        parse_values("M", spec)
    assert str(e.value).startswith("M:")


def test_parse_causal():
    assert parse_causal("both") == (False, True)
    assert parse_causal("true") == (True,)
    assert parse_causal("false") == (False,)
    with pytest.raises(ParameterError, match="causal"):
        parse_causal("sometimes")


def test_expand_is_the_full_product_deduplicated_with_skip_reasons():
    exp = expand([SMALL, SMALL])  # the same grid twice: no duplicate configuration
    assert len(exp) == 4 * 2 * 2 * 3 * 2
    assert len({c.hash() for c in exp.configs} | {c.hash() for c, _ in exp.skipped}) == len(exp)
    reasons = {(c.algorithm, c.shape.d, c.M, c.shape.causal): why for c, why in exp.skipped}
    # flash2 needs M >= 4d + 4: M = 64 is too small for d = 16 (68) but fine for d = 8 (36)
    assert reasons[("flash2", 16, 64, False)] == "M=64 < min_M=68 of flash2 for d=16"
    assert ("flash2", 8, 64, False) not in reasons
    for c, why in exp.skipped:
        alg = attnio.algorithms.get(c.algorithm)
        assert why and mapper.needs_M(alg, c.shape, c.M) is not None


def test_expand_all_covers_every_registered_algorithm():
    exp = expand(Grid(N=(64,), d=(8,), M=(4096,), algorithms=("all",)))
    names = {c.algorithm for c in exp.configs} | {c.algorithm for c, _ in exp.skipped}
    assert names == set(attnio.algorithms.names())


def test_approximate_algorithms_are_skipped_without_eps():
    approx = [a.name for a in attnio.algorithms.all_algorithms() if not a.exact]
    if not approx:
        pytest.skip("no approximate algorithm registered")
    exp = expand(Grid(N=(64,), d=(8,), M=(65536,), algorithms=tuple(approx)))
    assert not exp.configs and all("--eps" in why for _, why in exp.skipped)
    exp = expand(Grid(N=(64,), d=(8,), M=(65536,), algorithms=tuple(approx), eps=0.01))
    assert exp.configs and all(c.eps == 0.01 for c in exp.configs)
    row = run_config(exp.configs[0])
    assert row["status"] == "ok" and row["total"] >= row["bound"]


def test_unknown_algorithm_suggests_close_names():
    with pytest.raises(UnknownNameError, match="flash2"):
        expand(Grid(N=(64,), algorithms=("flash3",)))


def test_empty_grid_is_an_error():
    with pytest.raises(ParameterError, match="empty grid"):
        expand(Grid(N=()))
    with pytest.raises(ParameterError, match="empty grid"):
        expand([])


def test_toml_grids(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('algo = "flash2"\nN = "64:128:x2"\nd = [8]\nM = 1024\n\n'
                 '[[grid]]\nalgo = ["standard"]\nN = 64\nd = "8,16"\nM = "256:1024:x4"\n'
                 'causal = "both"\n')
    grids = grids_from_toml(str(p))
    assert [g.algorithms for g in grids] == [("flash2",), ("standard",)]
    assert len(expand(grids)) == 2 + 2 * 2 * 2
    p.write_text('N = 64\nsize = 3\n')
    with pytest.raises(ParameterError, match="unknown key"):
        grids_from_toml(str(p))


def test_config_hash_depends_on_what_was_asked_only():
    a = Config("flash2", Shape(64, 64, 8), 256)
    assert a.hash() == Config("flash2", Shape(64, 64, 8), 256, seed=5).hash()  # seed: compute only
    assert a.hash() != Config("flash2", Shape(64, 64, 8, causal=True), 256).hash()
    assert a.hash() != Config("flash2", Shape(64, 64, 8), 256, mode="compute").hash()


# ----------------------------------------------------------------------------- rows
def test_count_row_holds_every_count_and_matches_the_run_api():
    cfg = Config("flash2", Shape(128, 128, 16, causal=True), 1024)
    row = run_config(cfg)
    res = attnio.run("flash2", shape=(128, 128, 16), M=1024, mode="count", causal=True)
    assert row["status"] == "ok"
    assert (row["reads"], row["writes"], row["total"], row["peak"]) == (
        res.io.reads, res.io.writes, res.io.total, res.io.peak)
    assert (row["predicted_reads"], row["predicted_writes"]) == (row["reads"], row["writes"])
    assert row["tiling"] == dataclasses.asdict(res.tiling)
    assert row["bounds"]["trivial"]["explicit"] is True
    assert row["bound"] == max(b["value"] for b in row["bounds"].values() if b["explicit"])
    assert row["ratio"] == pytest.approx(row["total"] / row["bound"])
    assert row["total"] >= row["bound"]
    assert row["version"] == attnio.__version__ and row["config_hash"] == cfg.hash()


def test_compute_row_has_the_error_against_the_reference():
    row = run_config(Config("flash2", Shape(96, 80, 8, causal=True), 512, mode="compute", seed=3))
    assert row["status"] == "ok"
    print("max error", row["max_err"])
    assert row["max_err"] < 1e-12
    count = run_config(Config("flash2", Shape(96, 80, 8, causal=True), 512))
    assert (row["reads"], row["writes"]) == (count["reads"], count["writes"])


@pytest.mark.parametrize("spec", ["matmul", "flash2,matmul", "kind:matmul"])
def test_the_matmul_building_block_is_not_a_sweep_algorithm(spec):
    with pytest.raises(ParameterError, match="matmul is a building block"):
        expand(Grid(N=(64,), d=(8,), M=(256,), algorithms=tuple(spec.split(","))))


# ----------------------------------------------------------------------------- sweeps
@pytest.fixture(scope="module")
def serial_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("serial") / "r.sqlite"
    s = run_sweep(SMALL, db, jobs=1)
    assert s.total == len(expand(SMALL)) and s.errors == 0
    return db


def test_sweep_stores_one_row_per_configuration_and_resumes(serial_db):
    rows = _rows(serial_db)
    exp = expand(SMALL)
    assert sorted(r["config_hash"] for r in rows) == sorted(
        [c.hash() for c in exp.configs] + [c.hash() for c, _ in exp.skipped])
    skipped = [r for r in rows if r["status"] == "skipped"]
    assert skipped and all(r["reason"] for r in skipped)
    again = run_sweep(SMALL, serial_db, jobs=1)
    assert (again.already, again.ran, again.skipped) == (len(exp), 0, 0)
    assert _rows(serial_db) == rows


def test_local_pool_gives_the_same_rows(serial_db, tmp_path):
    s = run_sweep(SMALL, tmp_path / "pool.sqlite", jobs=2)
    assert s.errors == 0
    assert _stable(_rows(tmp_path / "pool.sqlite")) == _stable(_rows(serial_db))


def test_dask_local_cluster_gives_the_same_rows(serial_db, tmp_path):
    distributed = need("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        s = run_sweep(SMALL, tmp_path / "dask.sqlite", scheduler=cluster.scheduler_address)
    assert s.errors == 0
    assert _stable(_rows(tmp_path / "dask.sqlite")) == _stable(_rows(serial_db))


def test_pool_tasks_keep_the_configurations_of_one_certificate_together():
    """The pool's tasks (count mode, several workers): every configuration exactly once, those
    sharing (workload, M) (one certificate, for every algorithm) in the same task although the
    grid has the algorithm outermost, a task at most 64 configurations, and within a block of
    one d the M in order; a compute-mode configuration travels alone."""
    from attnio.experiments.pool import tasks

    grid = Grid(N=parse_values("N", "64:4096:x2"), d=(8, 16, 32),
                M=parse_values("M", "256:65536:x2"), algorithms=("flash1", "flash2", "standard"), causal=(False, True))
    cfgs = list(expand(grid).configs)
    got = list(tasks(iter(cfgs), ordered=True))
    flat = [c for t in got for c in t]
    assert sorted(c.hash() for c in flat) == sorted(c.hash() for c in cfgs)
    home = {}
    for i, t in enumerate(got):
        assert 0 < len(t) <= 64
        for c in t:
            assert home.setdefault((c.shape, c.M), i) == i
    assert len({(c.shape, c.M) for c in cfgs}) < len(cfgs)  # (the test has bundles to keep)
    for t in got:
        for a, b in zip(t, t[1:]):
            if a.shape.d == b.shape.d:
                assert a.M <= b.M
    compute = [dataclasses.replace(c, mode="compute") for c in cfgs[:5]]
    assert [len(t) for t in tasks(iter(compute), ordered=True)] == [1] * 5
    assert [c for t in tasks(iter(cfgs), ordered=False) for c in t] == cfgs


def test_dask_tasks_end_between_workloads():
    """The Dask path's tasks (:func:`attnio.experiments.cluster.take`, whatever the size the
    rows' times ask for): the pool's order, every configuration once, those sharing (workload,
    M) never split across tasks in count mode."""
    import itertools

    from attnio.experiments.cluster import _Peekable, take
    from attnio.experiments.pool import tasks

    grid = Grid(N=(64, 128, 256), d=(8, 16), M=parse_values("M", "256:4096:x4"),
                algorithms=("flash1", "flash2", "standard"), causal=(False, True))
    cfgs = list(expand(grid).configs)
    order = [c for t in tasks(iter(cfgs), ordered=True) for c in t]
    for size in (1, 2, 5):
        stream = _Peekable(itertools.chain.from_iterable(tasks(iter(cfgs), ordered=True)))
        got = []
        while batch := take(stream, size):
            got.append(batch)
        assert [c for b in got for c in b] == order
        home = {}
        for i, b in enumerate(got):
            assert len(b) >= size or b is got[-1]
            for c in b:
                assert home.setdefault((c.shape, c.M), i) == i
    compute = [dataclasses.replace(c, mode="compute") for c in cfgs[:6]]
    stream = _Peekable(iter(compute))
    assert [len(take(stream, 1)) for _ in range(6)] == [1] * 6


# ----------------------------------------------------------------------------- writes as it goes
SLOW = Grid(N=(64, 128), d=(8,), M=(256, 512), algorithms=("flash2", "flash1"))  # 8 rows


@pytest.mark.parametrize("jobs", [1, 2], ids=["serial", "pool"])
def test_a_slow_batch_commits_its_finished_rows_before_it_ends(tmp_path, monkeypatch, jobs):
    """The last row of the grid (one task of the pool: rows travel in tasks of 64) waits until
    the database holds every row before it: it would wait for ever (here: until a hang guard)
    if the rows were written only when the task or the sweep ends.  The workers' clock is a fake
    one that jumps a second per reading, so a worker sends each row as soon as it is done (what
    a real slow row does); the parent's commits keep their real clock.  No time is asserted.
    Linux only (the pool's workers are forked, so the patches reach them)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("forked workers (the patched evaluator travels with the fork)")
    from attnio.experiments import pool, row

    db, seen = tmp_path / "slow.sqlite", tmp_path / "seen"
    total = len(expand(SLOW))
    fake = iter(range(10**9))
    monkeypatch.setattr(pool, "_clock", lambda: float(next(fake)))
    # forked workers inherit the patches (this test process may run other threads: a Dask
    # cluster's, the xdist worker's; the pool's rows need no lock they could hold)
    monkeypatch.setattr(pool, "_may_fork", lambda: True)
    real = row.run_encoded
    calls = []

    def slow(cfg):  # runs in the worker (forked: the patch travels with it) or in this process
        calls.append(cfg)
        if len(calls) == total:
            deadline = time.monotonic() + HANG_S
            while stored_rows(db) < total - 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.write_text(str(stored_rows(db)))
        return real(cfg)

    monkeypatch.setattr(row, "run_encoded", slow)
    s = run_sweep(SLOW, db, jobs=jobs)
    assert (s.ran, s.errors) == (total, 0)
    assert seen.exists(), "the slow evaluator did not run (a spawned worker?)"
    assert int(seen.read_text()) == total - 1  # committed while the last row was still running
    assert stored_rows(db) == total


def test_the_writer_commits_waiting_rows_without_new_ones(tmp_path):
    """Rows buffered because the last commit was recent are committed by :meth:`Writer.tick`
    (the background thread's step) once they have waited ``every_s``, with no row arriving."""
    from attnio.experiments.store import ResultsStore, row_values
    from attnio.experiments.writer import Writer

    t = [0.0]
    row = lambda h: row_values({"config_hash": h, "status": "skipped", "reason": "r"})  # noqa: E731
    with ResultsStore(tmp_path / "w.sqlite") as st:
        w = Writer(st, every_s=1.0, clock=lambda: t[0])
        w.add([row("a")])
        assert (w.written, len(w.buf)) == (0, 1)  # the last commit (the start) is recent
        t[0] = 0.5
        w.tick()
        assert w.written == 0  # not due yet
        t[0] = 1.0
        w.tick()
        assert (w.written, w.commits, st.count()) == (1, 1, 1)
        t[0] = 1.5
        w.add([row("b")])
        w.add([row("c")])
        assert w.written == 1
        t[0] = 2.0
        w.add([row("d")])  # a second since the last commit: all three in one transaction
        assert (w.written, w.commits, st.count()) == (4, 2, 4)


def test_the_eta_comes_from_the_rows_that_ran():
    """Configurations the database holds (or stores as skipped) pass at once and do not make
    the sweep look faster: the rate counts the rows that ran, the ETA applies it to what is
    left."""
    from attnio.experiments.progress import SweepProgress

    t = [100.0]
    bar = SweepProgress(1000, False, clock=lambda: t[0])
    assert bar.eta() is None
    bar.start()
    bar.passed(600)  # a resumed sweep: 600 rows held, in no time
    assert bar.rate() is None and bar.eta() is None
    t[0] = 104.0
    bar.finished(64)  # a batch of 64 in 4 s
    assert bar.rate() == 16.0 and bar.eta() == (1000 - 664) / 16
    t[0] = 108.0
    bar.finished(16)  # 80 rows in 8 s: 10 per second, whatever the batches
    assert bar.done == 680 and bar.rate() == 10.0 and bar.eta() == 32.0


# count mode runs about a thousand configurations a second: a grid large enough that the kill
# lands mid-sweep (as soon as the first rows are committed)
KILL_ARGS = ["--algo", "flash2,flash1", "--N", "256:16384:x2", "--d", "16,64",
             "--M", "256:1048576:x2", "--causal", "both"]
KILL_TOTAL = 2 * 7 * 2 * 13 * 2


def test_sigkill_mid_sweep_then_restart_loses_and_duplicates_nothing(tmp_path):
    """SIGKILL a 2-job sweep (its process group: the workers too) mid-work, restart it, and
    compare with an uninterrupted run.  The restart and the reference run serially in this
    process (a sweep's rows do not depend on its jobs: test_local_pool_gives_the_same_rows)."""
    db = tmp_path / "killed.sqlite"
    total = KILL_TOTAL
    proc = start_sweep(db, ["--quiet", *KILL_ARGS], 2)
    at_stop = pause_under_way(proc, db, total)  # provably mid-work (None: it finished first)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, mid-transaction or not
    proc.wait()
    at_kill = stored_rows(db)
    if at_stop is not None:
        assert proc.returncode == -signal.SIGKILL and 0 < at_kill < total
    else:  # allowed: it had finished before the kill
        assert proc.returncode == 0 and at_kill == total
    assert cli_main(["sweep", "--db", str(db), "--jobs", "1", "--quiet", *KILL_ARGS]) == 0
    ref = tmp_path / "uninterrupted.sqlite"
    assert cli_main(["sweep", "--db", str(ref), "--jobs", "1", "--quiet", *KILL_ARGS]) == 0
    rows, want = _rows(db), _rows(ref)
    assert len(rows) == len(want) == total
    assert len({r["config_hash"] for r in rows}) == total
    assert _stable(rows) == _stable(want)


# ----------------------------------------------------------------------------- CLI errors
def _cli(capsys, *argv):
    code = cli_main(list(argv))
    err = capsys.readouterr().err
    return code, err


def test_cli_sweep_runs_and_exports(tmp_path, capsys):
    db, out = tmp_path / "r.sqlite", tmp_path / "r.json"
    code = cli_main(["sweep", "--db", str(db), "--N", "64:128:x2", "--d", "8", "--M", "256",
                     "--algo", "flash2", "--quiet", "--jobs", "1"])
    assert code == 0 and len(_rows(db)) == 2
    assert cli_main(["sweep", "export", "--db", str(db), "--out", str(out)]) == 0
    assert "wrote 2 rows" in capsys.readouterr().out
    assert cli_main(["sweep", "--db", str(db), "--dry-run", "--preset", "smoke"]) == 0


@pytest.mark.parametrize("argv, match", [
    (["--N", "64", "--algo", "flash3"], "unknown algorithm 'flash3'"),
    (["--N", "128:64:x2"], "empty grid"),
    (["--N", "64", "--d", ""], "empty grid"),
    (["--N", "64", "--M", "0"], "M: values must be integers >= 1"),
    (["--preset", "nope"], "preset"),
])
def test_cli_bad_grid_is_one_line_exit_2_nothing_written(tmp_path, capsys, argv, match):
    db = tmp_path / "r.sqlite"
    code, err = _cli(capsys, "sweep", "--db", str(db), "--quiet", *argv)
    assert code == 2 and match in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_cli_unwritable_db_path_is_one_line_exit_2(tmp_path, capsys):
    db = tmp_path / "no" / "such" / "dir" / "r.sqlite"
    code, err = _cli(capsys, "sweep", "--db", str(db), "--N", "64", "--quiet")
    assert code == 2 and "does not exist" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["old-version", "foreign-text", "foreign-sqlite"])
def test_cli_incompatible_or_foreign_db_is_refused_untouched(tmp_path, capsys, kind):
    db = tmp_path / "r.sqlite"
    if kind == "old-version":
        ResultsStore(db).close()
        con = sqlite3.connect(db)
        con.execute("UPDATE attnio_meta SET value = '0' WHERE key = 'schema_version'")
        con.commit()
        con.close()
    elif kind == "foreign-text":
        db.write_text("precious\n")
    else:
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE t (x)")
        con.commit()
        con.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    names = sorted(p.name for p in tmp_path.iterdir())
    code, err = _cli(capsys, "sweep", "--db", str(db), "--N", "64", "--algo", "flash2", "--quiet")
    assert code == 2 and err.count("\n") == 1, err
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    code, err = _cli(capsys, "sweep", "export", "--db", str(db), "--out", str(tmp_path / "x.csv"))
    assert code == 2 and not (tmp_path / "x.csv").exists()


def test_cli_parquet_without_engine_names_the_extra(tmp_path, capsys, monkeypatch):
    block_parquet_engines(monkeypatch)
    db = tmp_path / "r.sqlite"
    run_sweep(Grid(N=(64,), d=(8,), M=(256,), algorithms=("flash2",)), db, jobs=1)
    code, err = _cli(capsys, "sweep", "export", "--db", str(db), "--format", "parquet",
                     "--out", str(tmp_path / "r.parquet"))
    assert code == 2 and err.count("\n") == 1, err
    assert "pip install 'attnio[parquet]'" in err
    assert not (tmp_path / "r.parquet").exists()


def test_presets_expand():
    for name, grids in PRESETS.items():
        exp = expand(grids)
        assert exp.configs, name


def test_module_docstring_examples_run():
    import doctest

    import attnio.experiments.sweep

    assert doctest.testmod(attnio.experiments.sweep).failed == 0


# ----------------------------------------------------------------------------- issue 24: grids
def test_causal_both_with_windows_and_backward_store_no_meaningless_skip(tmp_path, capsys):
    """The researcher's grid: no "window needs a causal mask" row, and in a --backward sweep
    the forward-only algorithms keep their forward rows, marked (not skipped)."""
    db = tmp_path / "r.sqlite"
    assert cli_main(["sweep", "--db", str(db), "--N", "256", "--d", "16", "--M", "4096",
                     "--causal", "both", "--window", "none,64,128", "--backward",
                     "--algo", "flash2,square_tiling,flash_decoding", "--quiet",
                     "--jobs", "1"]) == 0
    with ResultsStore(db, readonly=True) as st:
        rows = st.rows()
    reasons = {r["reason"] for r in rows if r["status"] == "skipped"}
    assert not [w for w in reasons if "causal mask" in w or "backward" in w], reasons
    assert all(r["causal"] or r["window"] is None for r in rows)
    assert len(rows) == 3 * (1 + 3)  # three algorithms x (unmasked + causal with each window)
    fwd_only = [r for r in rows if r["algorithm"] in ("square_tiling", "flash_decoding")
                and r["status"] == "ok"]
    assert fwd_only and all(r["reason"].startswith(FORWARD_ONLY) and r["backward"] == 0
                            and r["total"] > 0 and r["backward_total"] is None
                            for r in fwd_only)
    flash2 = [r for r in rows if r["algorithm"] == "flash2"]
    assert len(flash2) == 4 and all(r["backward_total"] for r in flash2)


def test_sweep_help_shows_the_toml_grid_form(capsys):
    assert cli_main(["sweep", "--help"]) == 0
    out = capsys.readouterr().out
    assert "[[grid]]" in out and 'window = "none,512,4096"' in out and "--config" in out


def test_help_toml_example_is_a_valid_grid_file(tmp_path):
    from attnio.cli.sweep import EPILOG

    body = "\n".join(line[2:] for line in EPILOG.splitlines()
                     if line.startswith("  ") and not line.startswith("  attnio"))
    (tmp_path / "g.toml").write_text(body)
    grids = grids_from_toml(tmp_path / "g.toml")
    assert len(grids) == 2 and expand(grids).configs


def test_a_bug_in_a_closed_form_is_an_error_row_not_a_skip(monkeypatch):
    """Issue 22: a ValueError (or ZeroDivisionError) from an algorithm is a bug: the row is an
    error (the sweep exits 1), never a quiet 'skipped'; a ParameterError is a skip."""
    alg = attnio.algorithms.get("flash2")
    cfg = Config("flash2", Shape(64, 64, 8), 4096)

    def broken(*args, **kwargs):
        raise ValueError("numpy said no")

    monkeypatch.setattr(type(alg), "_total", broken)
    row = run_config(cfg)
    assert row["status"] == "error" and "ValueError: numpy said no" in row["reason"]

    def refused(*args, **kwargs):
        raise ParameterError("M too small for this shape", param="M")

    monkeypatch.setattr(type(alg), "_total", refused)
    row = run_config(cfg)
    assert row["status"] == "skipped" and "M too small" in row["reason"]


def test_an_approximate_row_is_held_to_the_approximate_bound_not_the_exact_ones():
    # one unmasked head: approx_w_stationary over the row's feature count r binds approx_poly;
    # with a causal mask no approximate bound is proved, so the ratio is None (exact bounds do
    # not bind approximate attention), while an exact algorithm keeps its exact certificate
    row = run_config(Config("approx_poly", Shape(256, 256, 4), 4096, eps=1e-2, entry_bound=0.5))
    assert row["status"] == "ok", row["reason"]
    assert set(row["bounds"]) == {"approx_w_stationary"}
    assert row["bound_name"] == "approx_w_stationary"
    assert row["ratio"] == row["total"] / row["bound"] and row["ratio"] >= 1
    causal = run_config(Config("approx_poly", Shape(256, 256, 4, causal=True), 4096, eps=1e-2,
                               entry_bound=0.5))
    if causal["status"] == "ok":
        assert causal["ratio"] is None and "approx_w_stationary" not in causal["bounds"]
    exact = run_config(Config("flash2", Shape(256, 256, 4), 4096))
    assert exact["bound_name"] != "approx_w_stationary" and exact["ratio"] >= 1


def test_a_local_dask_cluster_serves_its_dashboard_and_says_where():
    """``--dask`` starts a local cluster whose dashboard answers HTTP 200 while the sweep runs
    (bokeh, from the dask extra, serves it); the sweep prints its URL on stderr."""
    need("distributed")
    need("bokeh")
    import urllib.request

    from attnio.experiments.cluster import dask_client

    seen: list[str] = []
    with dask_client(None, 1, True, seen.append) as client:
        assert client is not None and len(seen) == 1
        assert seen[0].startswith("http://127.0.0.1:")
        with urllib.request.urlopen(seen[0], timeout=30) as r:  # the address a user opens
            assert r.status == 200


def test_a_grid_takes_a_list_of_error_targets(tmp_path):
    """eps as several targets: one row per target for each approximate algorithm, one for each
    exact one; the size counted arithmetically equals the expansion; a rerun holds them all; a
    TOML list and a CLI comma list give the same grid."""
    from attnio.experiments.grid import expand, plans
    from attnio.experiments.sweep import grid_from_mapping

    g = Grid(N=(256, 512), d=(8,), M=(65536,), algorithms=("approx_poly", "flash2"),
             eps=(1e-1, 1e-2, 1e-3), entry_bound=0.5)
    ex = expand(g)
    assert len(ex.configs) == plans(g)[0].size() == 2 * 3 + 2
    assert sorted({c.eps for c in ex.configs if c.algorithm == "approx_poly"}) == \
        [1e-3, 1e-2, 1e-1]
    db = tmp_path / "e.sqlite"
    assert run_sweep(g, db, jobs=1).ran == 8
    assert run_sweep(g, db, jobs=1).ran == 0  # every target held
    from_toml = grid_from_mapping({"N": [256, 512], "d": 8, "M": 65536,
                                   "algo": "approx_poly,flash2", "eps": [0.1, 0.01, 0.001],
                                   "entry_bound": 0.5}, where="test")
    from_flags = grid_from_mapping({"N": "256,512", "d": "8", "M": "65536",
                                    "algo": "approx_poly,flash2", "eps": "1e-1,1e-2,1e-3",
                                    "entry_bound": 0.5}, where="flags")
    assert [c.key() for c in expand(from_toml).configs] == \
        [c.key() for c in expand(from_flags).configs] == [c.key() for c in ex.configs]
