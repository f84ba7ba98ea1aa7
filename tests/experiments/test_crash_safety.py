"""Crash safety of the results store: a sweep SIGKILLed at random instants (8 in the default run,
in two tests of 4; 20 in the slow one) never leaves a partial row, and resuming gives exactly the
uninterrupted run's rows; corrupted or foreign database files are refused with one line and left
byte-for-byte unchanged."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from sweep_signals import (
    HANG_S,
    alive,
    children,
    pause_under_way,
    resume,
    start_sweep,
    wait_gone,
)

from attnio.cli import main as cli_main
from attnio.experiments.store import ResultsStore, StoreError

GRID = ["--algo", "flash2,standard,square_tiling,flash1", "--N", "256:4096:x2", "--d", "16,64",
        "--M", "256:1048576:x4", "--causal", "both"]
TOTAL = 4 * 5 * 2 * 7 * 2
VOLATILE = ("wall_s", "created_at")
# columns every row of a status must hold (an interrupted write would leave some of them null)
BASE = ("config_hash", "status", "algorithm", "kind", "exact", "Nq", "Nkv", "d", "M", "causal",
        "batch", "heads", "kv_heads", "mode", "version", "created_at")
REQUIRED = {
    "ok": BASE + ("reads", "writes", "total", "peak", "steps", "per_array", "predicted_reads",
                  "predicted_writes", "tiling", "bounds", "bound", "bound_name", "ratio", "floor",
                  "wall_s"),
    "skipped": BASE + ("reason",),
    "error": BASE + ("reason",),
}


def _stable(rows):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def _check_whole_rows(db) -> int:
    if not os.path.exists(db):
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    finally:
        con.close()
    if not tables:  # killed before the schema was created: no row yet (a rerun initialises it)
        return 0
    with ResultsStore(db, readonly=True) as st:
        rows = st.rows()
    for r in rows:
        assert r["status"] in REQUIRED, r
        missing = [c for c in REQUIRED[r["status"]] if r[c] is None]
        assert not missing, f"partial row {r['config_hash']}: {missing} are null"
    assert len({r["config_hash"] for r in rows}) == len(rows)
    return len(rows)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[list[dict], float]:
    """The grid's rows from an uninterrupted ``attnio sweep`` subprocess, and its duration (the
    random kills land inside it, start-up included)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    ref = tmp_path_factory.mktemp("ref") / "ref.sqlite"
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "attnio", "sweep", "--db", str(ref), "--jobs",
                           "1", "--quiet", *GRID], env=env, capture_output=True, timeout=300)
    span = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    with ResultsStore(ref, readonly=True) as st:
        want = _stable(st.rows())
    assert len(want) == TOTAL
    return want, span


# 8 kills in two tests of 4, each with 2 kills once rows are committed (at least 1 of them must
# land mid-sweep) and 2 at any instant; the default run makes the first 4, ``-m slow`` all 8
@pytest.mark.parametrize("first", [0, pytest.param(4, marks=pytest.mark.slow)],
                         ids=["kills1-4", "kills5-8"])
def test_sigkill_at_8_random_points_never_leaves_a_partial_row(tmp_path, uninterrupted, first):
    _kill_and_resume(tmp_path, uninterrupted, range(first, first + 4), min_mid=1)


@pytest.mark.slow
def test_sigkill_at_20_random_points_never_leaves_a_partial_row(tmp_path, uninterrupted):
    _kill_and_resume(tmp_path, uninterrupted, range(20), min_mid=5)


def _kill_and_resume(tmp_path, uninterrupted, trials: range, *, min_mid: int) -> None:
    """Kill a sweep at random instants (its process group: workers too), once per trial, check
    after each kill that only whole rows exist, resume, and compare every completed database
    with the uninterrupted run's rows; at least ``min_mid`` kills must land mid-sweep.  Even
    trials kill once this run has committed rows; odd ones at any instant; every fifth runs a
    pool of 2 jobs."""
    want, span = uninterrupted
    rng = random.Random(20 + trials.start)
    t_start = time.monotonic()
    db, generation, mid, finished, comparisons = None, 0, 0, 0, 0
    for trial in trials:
        waits = trial % 2 == 0  # else: a kill at any instant of the run, start-up included
        if db is None or waits:  # a kill mid-work: on a fresh database (the whole grid ahead)
            if db is not None:
                _complete(db, want)
                comparisons += 1
            generation += 1
            db = tmp_path / f"killed{generation}.sqlite"
        jobs = "2" if trial % 5 == 4 else "1"  # most trials serial (fast), some with a pool
        before = _check_whole_rows(db)
        proc = start_sweep(db, ["--quiet", *GRID], int(jobs))
        if waits:  # stopped once this run has committed rows, provably mid-work
            under_way = pause_under_way(proc, db, TOTAL, before) is not None
        else:
            time.sleep(rng.uniform(0.05, 1.1) * span)
            under_way = False
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, wherever they are
        proc.wait()
        now = _check_whole_rows(db)
        assert now >= before
        if proc.returncode == 0:  # it finished before the kill (allowed): compare, start afresh
            finished += 1
        else:
            assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
            mid += under_way and 0 < now < TOTAL
        if now == TOTAL:
            with ResultsStore(db, readonly=True) as st:
                assert _stable(st.rows()) == want
            comparisons += 1
            db = None
    if db is not None:  # the final resume completes the last database
        _complete(db, want)
        comparisons += 1
    print(f"{len(trials)}/{len(trials)} kills left only whole rows; {mid} landed mid-sweep, "
          f"{finished} after completion; {comparisons} resumed databases equal the uninterrupted run "
          f"({time.monotonic() - t_start:.1f} s)")
    assert mid >= min_mid, "too few kills landed mid-sweep to test anything"


def _complete(db, want) -> None:
    """Resume a killed sweep to its end (in this process): exactly the uninterrupted run's rows."""
    assert cli_main(["sweep", "--db", str(db), "--jobs", "1", "--quiet", *GRID]) == 0
    assert _check_whole_rows(db) == TOTAL
    with ResultsStore(db, readonly=True) as st:
        assert _stable(st.rows()) == want


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_no_worker_outlives_a_killed_sweep(tmp_path, sig):
    """Kill only the parent sweep (not its process group) mid-work: its workers end too (a
    closed pipe or the parent-death signal), whatever killed it; SIGTERM is handled as Ctrl-C
    (exit 130, one line), SIGKILL cannot be; either way the sweep resumes to whole rows."""
    db = tmp_path / "r.sqlite"
    for _ in range(3):
        proc = start_sweep(db, ["--quiet", *GRID], 2)
        if pause_under_way(proc, db, TOTAL) is not None:
            break
        proc.communicate(timeout=HANG_S)
        for p in tmp_path.glob("r.sqlite*"):
            p.unlink()
    else:
        pytest.fail("the sweep finished three times before it could be stopped mid-work")
    workers = children(proc.pid)
    assert len(workers) == 2, workers
    os.kill(proc.pid, sig)  # the parent only: nothing tells the workers but its death
    resume(proc)
    try:
        assert wait_gone(workers) == [], "a worker outlived its sweep"
        _, err = proc.communicate(timeout=HANG_S)
    finally:  # a failure leaves no stray process behind
        for w in workers:
            if alive(w):
                os.kill(w, signal.SIGKILL)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        lines = err.splitlines()
        assert proc.returncode == 130 and len(lines) == 1 and "interrupted" in lines[0], lines
    assert 0 < _check_whole_rows(db) < TOTAL


def _digest(p) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("damage", ["truncated", "garbage-pages", "zeroed-header", "foreign"])
def test_damaged_or_foreign_db_is_refused_and_never_overwritten(tmp_path, capsys, damage):
    db = tmp_path / "r.sqlite"
    assert cli_main(["sweep", "--db", str(db), "--N", "64", "--d", "8", "--M", "256,1024",
                     "--algo", "flash2", "--quiet", "--jobs", "1"]) == 0
    with sqlite3.connect(db) as con:  # fold the WAL into the main file before damaging it
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("-wal", "-shm"):
        if os.path.exists(str(db) + suffix):
            os.remove(str(db) + suffix)
    data = bytearray(db.read_bytes())
    if damage == "truncated":
        data = data[:100]
    elif damage == "garbage-pages":
        data[100:] = os.urandom(len(data) - 100)
    elif damage == "zeroed-header":
        data[:16] = bytes(16)
    else:
        data = bytearray(b"%PDF-1.4 not a database\n" * 50)
    db.write_bytes(bytes(data))
    before, names = _digest(db), sorted(p.name for p in tmp_path.iterdir())
    code = cli_main(["sweep", "--db", str(db), "--N", "64", "--d", "8", "--M", "256",
                     "--algo", "flash2", "--quiet", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "r.sqlite" in err, err
    with pytest.raises(StoreError):
        ResultsStore(db)
    with pytest.raises(StoreError):
        ResultsStore(db, readonly=True)
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == names
