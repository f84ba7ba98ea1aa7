"""The bad-input catalogue of the experiments verbs (``sweep``, ``sweep export``, ``report``):
damaged, empty, foreign, locked or missing databases, bad TOML grids and flags, grids too large to
run, and Ctrl-C.

Every case runs the command line in this process (``attnio.cli.main``) and asserts: exit code 2,
exactly one line on stderr naming the file or the flag, no traceback, and nothing written (the
files in the directory are byte-for-byte what they were, and no new file appears).  How fast a
refusal is, and its peak memory, are measured by ``benchmarks/bench_sweep_refusals.py``, not
asserted here.  Ctrl-C and SIGTERM run a real ``attnio sweep`` subprocess, signalled while it is
provably mid-work (:mod:`sweep_signals`): it exits 130 with one line, and the sweep resumes to
exactly the rows of an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_signals import HANG_S, pause_under_way, resume, start_sweep

from attnio.cli import main as cli_main
from attnio.experiments.store import ResultsStore
from attnio.experiments.sweep import Grid, parse_values, run_sweep
from conftest import stored_rows

SMALL = ["--algo", "flash2", "--N", "64", "--d", "8", "--M", "256", "--quiet", "--jobs", "1"]


@pytest.fixture(scope="module")
def good_db(tmp_path_factory) -> Path:
    """A results database of a few hundred rows (about 0.5 MB), checkpointed into one file."""
    db = tmp_path_factory.mktemp("good") / "results.sqlite"
    run_sweep(Grid(N=parse_values("N", "256:4096:x2"), d=(16, 32, 64),
                   M=parse_values("M", "256:1048576:x4"), algorithms=("flash2", "standard"),
                   causal=(False, True)), db, jobs=1)
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{db}{suffix}"):
            os.remove(f"{db}{suffix}")
    assert os.path.getsize(db) > 160_000
    return db


def _snapshot(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(d))] = "dir"
    return out


def _refused(capsys, argv: list[str], where: Path, names: tuple[str, ...]) -> str:
    """Run ``argv``; assert exit 2, one stderr line naming one of ``names``, no traceback,
    nothing written under ``where``.  Returns the line."""
    before = _snapshot(where)
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert any(n in err for n in names), (names, err)
    assert _snapshot(where) == before, "something was written"
    return err


# ----------------------------------------------------------------------------- damaged databases
def _damaged(good: Path, tmp: Path, kind: str) -> Path:
    db = tmp / "damaged.sqlite"
    data = bytearray(good.read_bytes())
    if kind == "random-40KB-at-80KB":  # the reproduction
        import random

        rnd = random.Random(80)
        data[80_000:120_000] = bytes(rnd.randrange(256) for _ in range(40_000))
    elif kind == "zeros-40KB-at-80KB":
        data[80_000:120_000] = bytes(40_000)
    elif kind == "truncated-half":
        data = data[: len(data) // 2]
    elif kind == "truncated-100B":
        data = data[:100]
    elif kind == "zeroed-header":
        data[:16] = bytes(16)
    elif kind == "empty":
        data = bytearray()
    elif kind == "text":
        data = bytearray(b"precious notes, not a database\n" * 100)
    db.write_bytes(bytes(data))
    return db


VERBS = {
    "report": lambda db, tmp: ["report", "--db", str(db), "--out", str(tmp / "out")],
    "sweep": lambda db, tmp: ["sweep", "--db", str(db), *SMALL],
    "export": lambda db, tmp: ["sweep", "export", "--db", str(db), "--out", str(tmp / "x.csv")],
    "dry-run": lambda db, tmp: ["sweep", "--db", str(db), "--dry-run", "--algo", "flash2",
                                "--N", "256", "--d", "16", "--M", "256"],
}

DAMAGE = [(kind, verb) for kind in ("random-40KB-at-80KB", "zeros-40KB-at-80KB",
                                    "truncated-half")
          for verb in VERBS]
DAMAGE += [(kind, verb) for kind in ("truncated-100B", "zeroed-header", "text")
           for verb in VERBS]
DAMAGE += [("empty", "report"), ("empty", "export")]  # an empty file is a new db for sweep


@pytest.mark.parametrize("kind,verb", DAMAGE)
def test_damaged_database_is_one_line_naming_the_file(good_db, tmp_path, capsys, kind, verb):
    db = _damaged(good_db, tmp_path, kind)
    err = _refused(capsys, VERBS[verb](db, tmp_path), tmp_path, ("damaged.sqlite",))
    if kind.endswith("KB"):
        assert "damaged" in err and "new --db" in err
    if kind == "empty":
        assert "empty (0 bytes)" in err and "attnio sweep --db" in err


# ----------------------------------------------------------------------------- other databases
def _old_version(tmp: Path) -> Path:
    db = tmp / "old.sqlite"
    ResultsStore(db).close()
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE attnio_meta SET value = '1' WHERE key = 'schema_version'")
    con.close()  # the last connection: the WAL is folded in and removed
    return db


def _foreign_sqlite(tmp: Path) -> Path:
    db = tmp / "foreign.sqlite"
    con = sqlite3.connect(db)
    with con:
        con.execute("CREATE TABLE notes (x)")
    con.close()
    return db


def _empty_sqlite(tmp: Path) -> Path:
    db = tmp / "blank.sqlite"
    con = sqlite3.connect(db)
    with con:  # a valid SQLite file with no table
        con.execute("CREATE TABLE t (x)")
        con.execute("DROP TABLE t")
    con.close()
    return db


def _missing(tmp: Path) -> Path:
    return tmp / "missing.sqlite"


def _directory(tmp: Path) -> Path:
    (tmp / "a-dir.sqlite").mkdir()
    return tmp / "a-dir.sqlite"


OTHER = [("old-version", v, _old_version, "old.sqlite") for v in ("report", "sweep", "export")]
OTHER += [("foreign-sqlite", v, _foreign_sqlite, "foreign.sqlite")
          for v in ("report", "sweep", "export", "dry-run")]
OTHER += [("sqlite-without-tables", v, _empty_sqlite, "blank.sqlite") for v in ("report",
                                                                                "export")]
OTHER += [("missing", v, _missing, "missing.sqlite") for v in ("report", "export")]
OTHER += [("directory", v, _directory, "a-dir.sqlite") for v in ("report", "sweep", "export")]


@pytest.mark.parametrize("kind,verb,make,name", OTHER, ids=[f"{k}-{v}" for k, v, _, _ in OTHER])
def test_unusable_database_is_one_line_naming_the_file(tmp_path, capsys, kind, verb, make, name):
    db = make(tmp_path)
    _refused(capsys, VERBS[verb](db, tmp_path), tmp_path, (name,))


def test_sweep_into_a_missing_directory_is_one_line(tmp_path, capsys):
    db = tmp_path / "no" / "such" / "r.sqlite"
    _refused(capsys, VERBS["sweep"](db, tmp_path), tmp_path, ("does not exist",))


# ----------------------------------------------------------------------------- a locked database
@pytest.fixture
def locked_db(good_db, tmp_path):
    """A copy of the good database with another process holding its write lock."""
    db = tmp_path / "locked.sqlite"
    shutil.copy(good_db, db)
    code = ("import sqlite3, sys, time\n"
            "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "con.execute('BEGIN EXCLUSIVE')\n"
            "con.execute(\"UPDATE attnio_meta SET value = value WHERE key = 'created_by'\")\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "locked"
    yield db
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("argv", [SMALL, ["--algo", "flash2", "--N", "4096", "--d", "16",
                                          "--M", "4096", "--quiet", "--jobs", "2"]],
                         ids=["jobs1", "jobs2"])
def test_locked_database_is_one_line_not_a_silent_wait(locked_db, tmp_path, capsys, argv):
    digest = hashlib.sha256(locked_db.read_bytes()).hexdigest()
    code = cli_main(["sweep", "--db", str(locked_db), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "locked.sqlite" in err and "locked by another process" in err and "--db" in err
    assert hashlib.sha256(locked_db.read_bytes()).hexdigest() == digest


def test_locked_database_can_still_be_read(locked_db, tmp_path, capsys):
    assert cli_main(["sweep", "export", "--db", str(locked_db), "--out",
                     str(tmp_path / "x.csv")]) == 0
    assert "wrote" in capsys.readouterr().out


# ----------------------------------------------------------------------------- TOML grids
TOML = [
    ('eps = "abc"\nalgo = "approx_poly"', "eps"),
    ('eps = "abc"', "eps"),
    ("eps = [1]", "eps"),
    ("eps = 2.0\nalgo = \"approx_poly\"", "eps"),
    ("eps = inf", "eps"),
    ('entry_bound = "y"', "entry_bound"),
    ("entry_bound = -1", "entry_bound"),
    ('seed = "x"', "seed"),
    ("seed = 1.5", "seed"),
    ("mode = 3", "mode"),
    ('mode = "fast"', "mode"),
    ('verify = "yes"', "verify"),
    ("causal = 3", "causal"),
    ('causal = "sometimes"', "causal"),
    ('window = "abc"', "window"),
    ("window = 0", "window"),
    ('heads = "x"', "heads"),
    ("heads = 0", "heads"),
    ('kv_heads = "two"', "kv_heads"),
    ("batch = -1", "batch"),
    ('d = "1.5"', "d"),
    ('M = "0"', "M"),
    ("algo = 5", "algo"),
    ('algo = "flash3"', "flash3"),
    ("colour = 1", "unknown key"),
    ("N = [", "not valid TOML"),
    # issue 24: lists of lists, tables that are not tables, values that pair with nothing
    ("N = [[64, 128]]", "N"),
    ("window = [[16]]\ncausal = true", "window"),
    ("causal = [[true]]", "causal"),
    ("grid = [[[1]]]", "grid"),
    ("grid = 5", "grid"),
    ("heads = 4\nkv_heads = 3", "kv_heads"),
    ("window = 16", "window"),
    ('N = "2251799813685248"', "N"),
]


@pytest.mark.parametrize("body,name", TOML, ids=[b.split("\n")[0] for b, _ in TOML])
def test_bad_toml_grid_is_one_line_naming_the_key(tmp_path, capsys, body, name):
    keys = {line.split("=")[0].strip() for line in body.splitlines()}
    base = {"N": '"64"', "d": '"8"', "M": '"256"', "algo": '"flash2"'}
    lines = [f"{k} = {v}" for k, v in base.items() if k not in keys] + body.splitlines()
    grid = tmp_path / "grid.toml"
    grid.write_text("\n".join(lines) + "\n")
    db = tmp_path / "r.sqlite"
    err = _refused(capsys, ["sweep", "--db", str(db), "--config", str(grid), "--quiet", "--jobs",
                            "1"], tmp_path, (name,))
    assert "grid.toml" in err or "not valid TOML" not in err  # the file is named
    assert not db.exists()


@pytest.mark.parametrize("make,what", [
    (lambda tmp: "/dev/zero", "a character device, not a regular file"),  # never read
    (lambda tmp: _write(tmp / "big.toml", b"# " + b"x" * (2 << 20) + b"\n"), "larger than"),
    (lambda tmp: _write(tmp / "latin1.toml", "N = 64\n# caf\xe9\n".encode("latin-1")),
     "not UTF-8"),
    (lambda tmp: _write(tmp / "zeros.toml", bytes(4096)), "not"),
    (lambda tmp: str(tmp), "a directory, not a regular file"),
], ids=["dev-zero", "2MB", "latin-1", "nul-bytes", "a-directory"])
def test_unreadable_config_file_is_one_line_naming_the_flag_and_file(tmp_path, capsys, make,
                                                                      what):
    path = make(tmp_path)
    err = _refused(capsys, ["sweep", "--db", str(tmp_path / "r.sqlite"), "--config", str(path),
                            "--quiet"], tmp_path, ("--config",))
    assert what in err and os.path.basename(str(path)) in err, err


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("target", ["nowhere/r.sqlite", "loop.sqlite"], ids=["dangling", "loop"])
def test_db_symlink_that_leads_nowhere_is_one_line(tmp_path, capsys, target):
    link = tmp_path / "loop.sqlite"
    os.symlink(target, link)
    err = _refused(capsys, VERBS["sweep"](link, tmp_path), tmp_path, ("loop.sqlite",))
    assert "symbolic link" in err and "--db" in err


def test_db_symlink_to_a_database_is_followed(good_db, tmp_path, capsys):
    db = tmp_path / "real.sqlite"
    shutil.copy(good_db, db)
    os.symlink(db, tmp_path / "link.sqlite")
    assert cli_main(["sweep", "export", "--db", str(tmp_path / "link.sqlite"), "--out",
                     str(tmp_path / "x.csv")]) == 0
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("errno_,text", [(28, "No space left on device"),
                                         (30, "Read-only file system")], ids=["ENOSPC", "EROFS"])
def test_disk_errors_name_the_flag_and_the_file(good_db, tmp_path, capsys, monkeypatch, errno_,
                                                text):
    """A full disk or a read-only file system while a sweep writes (--db) or an export writes
    (--out): one line naming the flag and the file, and no half-written export left."""
    db = tmp_path / "r.sqlite"
    shutil.copy(good_db, db)

    def fail(*args, **kwargs):
        raise OSError(errno_, text)

    monkeypatch.setattr(ResultsStore, "insert_values", fail)
    code = cli_main(["sweep", "--db", str(db), "--quiet", "--jobs", "1", "--algo", "flash2",
                     "--N", "64", "--d", "8", "--M", "4096"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and text in err, err
    assert "--db" in err and "r.sqlite" in err

    def partial(self, path, fmt=None, **options):  # (where=, latex=: the export options)
        Path(path).write_text("config_hash,status\nab")
        raise OSError(errno_, text)

    monkeypatch.setattr(ResultsStore, "export", partial)
    out = tmp_path / "x.csv"
    code = cli_main(["sweep", "export", "--db", str(db), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and text in err, err
    assert "--out" in err and "x.csv" in err and not out.exists()


def test_missing_toml_file_is_one_line(tmp_path, capsys):
    _refused(capsys, ["sweep", "--db", str(tmp_path / "r.sqlite"), "--config",
                      str(tmp_path / "nope.toml")], tmp_path, ("nope.toml",))


# ----------------------------------------------------------------------------- grids and flags
HUGE = ["--N", "1:99999:+1", "--d", "1:99999:+1", "--M", "1:99999:+1"]


@pytest.mark.parametrize("extra", [["--dry-run"], [], ["--dry-run", "--algo", "flash2"],
                                   ["--algo", "flash2", "--jobs", "2"],
                                   ["--dry-run", "--max-configs", "100000000"]],
                         ids=["dry-run", "run", "dry-run-one-algo", "run-jobs2", "raised-limit"])
def test_a_grid_of_10_to_the_15_is_refused_arithmetically(tmp_path, capsys, extra):
    err = _refused(capsys, ["sweep", "--db", str(tmp_path / "r.sqlite"), *HUGE, *extra],
                   tmp_path, ("max-configs", "max_configs"))
    # (algorithms registered) x 99,999^3: about 10^15 to 10^16 as the registry grows
    assert "configurations" in err and any(f"e+{k}" in err for k in (14, 15, 16))


def test_max_configs_lets_a_grid_through_and_dry_run_counts_without_expanding(tmp_path, capsys):
    assert cli_main(["sweep", "--db", str(tmp_path / "r.sqlite"), "--dry-run", "--N",
                     "64:128:x2", "--d", "8", "--M", "256", "--algo", "flash2",
                     "--max-configs", "2"]) == 0
    assert "2 configurations" in capsys.readouterr().out
    _refused(capsys, ["sweep", "--db", str(tmp_path / "r.sqlite"), "--dry-run", "--N",
                      "64:256:x2", "--d", "8", "--M", "256", "--algo", "flash2",
                      "--max-configs", "2"], tmp_path, ("max_configs",))


FLAGS = [
    (["--jobs", "0"], "jobs"),
    (["--jobs", "-3"], "jobs"),
    (["--jobs", "two"], "--jobs"),
    (["--max-configs", "abc"], "--max-configs"),
    (["--scheduler", "localhost:8786"], "scheduler"),
    (["--N", "0"], "N"),
    (["--N", "64", "--M", "1.5"], "M"),
    (["--N", "64", "--causal", "diagonal"], "causal"),
    (["--N", "64", "--window", "-4"], "window"),
    (["--N", "64", "--eps", "0"], "eps"),
    (["--preset", "paper", "--N", "64"], "--preset"),
    # issue 24: a worker per job, sizes beyond the library's limits, values that pair with nothing
    (["--jobs", "100000"], "--jobs"),
    (["--jobs", "257"], "--jobs"),
    (["--N", "2251799813685248"], "--N"),
    (["--N", "64:2251799813685248:x2"], "--N"),
    (["--Nq", "64", "--Nkv", "2251799813685248"], "--Nkv"),
    (["--N", "64", "--M", "2305843009213693952"], "--M"),
    (["--N", "64", "--batch", "2251799813685248"], "--batch"),
    (["--N", "64", "--heads", "4", "--kv-heads", "3"], "--kv-heads"),
    (["--N", "64", "--heads", "4", "--kv-heads", "8"], "--kv-heads"),
    (["--N", "64", "--window", "16"], "--window"),
    (["--N", "64", "--causal", "none", "--window", "none,16"], "--window"),
    (["--N", "64", "--window", "16", "--dry-run"], "--window"),
    (["--N", "0"], "--N"),
]


@pytest.mark.parametrize("argv,name", FLAGS, ids=[" ".join(a) for a, _ in FLAGS])
def test_bad_sweep_flag_is_one_line_naming_it(tmp_path, capsys, argv, name):
    base = [] if any(a in ("--N", "--preset") for a in argv) else ["--N", "64"]
    _refused(capsys, ["sweep", "--db", str(tmp_path / "r.sqlite"), "--quiet", *base, *argv],
             tmp_path, (name,))


def test_export_to_a_directory_is_one_line(good_db, tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    shutil.copy(good_db, db)
    (tmp_path / "out.csv").mkdir()
    _refused(capsys, ["sweep", "export", "--db", str(db), "--out", str(tmp_path / "out.csv")],
             tmp_path, ("out",))


def test_report_out_is_a_file_is_one_line(good_db, tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    shutil.copy(good_db, db)
    (tmp_path / "report").write_text("a file\n")
    _refused(capsys, ["report", "--db", str(db), "--out", str(tmp_path / "report")], tmp_path,
             ("out",))


# ----------------------------------------------------------------------------- dry-run and the db
def test_dry_run_accounts_for_what_the_database_holds(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    grid = ["--algo", "flash2", "--N", "64:256:x2", "--d", "8", "--M", "16,256"]
    assert cli_main(["sweep", "--db", str(db), "--dry-run", *grid]) == 0
    out = capsys.readouterr().out
    assert "6 configurations: none in" in out and "3 to run, 3 to store as skipped" in out
    assert not db.exists()
    assert cli_main(["sweep", "--db", str(db), "--quiet", "--jobs", "1", "--algo", "flash2",
                     "--N", "64", "--d", "8", "--M", "16,256"]) == 0
    capsys.readouterr()
    before = _snapshot(tmp_path)
    assert cli_main(["sweep", "--db", str(db), "--dry-run", *grid]) == 0
    out = capsys.readouterr().out
    assert "6 configurations: 2 already in" in out and "2 to run, 2 to store as skipped" in out
    assert _snapshot(tmp_path) == before


# ----------------------------------------------------------------------------- Ctrl-C
CTRL_C_GRID = ["--algo", "flash2,flash1,standard", "--N", "256:16384:x2", "--d", "16,64",
               "--M", "256:1048576:x2", "--causal", "both"]


CTRL_C_TOTAL = 3 * 7 * 2 * 13 * 2


def ctrl_c_trial(db: Path, jobs: int, *, double: bool = False, sig: int = signal.SIGINT,
                 grid: list[str] = CTRL_C_GRID) -> tuple[int, list[str], int]:
    """Start ``attnio sweep``, stop it once this run has committed rows and while it is provably
    mid-work, then press Ctrl-C (SIGINT to its process group, as a terminal does; ``sig``:
    another signal) and let it continue; ``double``: a second one soon after.  Returns (exit
    code, stderr lines, rows committed when the signal was sent)."""
    for _ in range(3):  # a sweep that finished before it could be stopped: try a fresh one
        if db.exists():
            for p in db.parent.glob(db.name + "*"):
                p.unlink()
        proc = start_sweep(db, grid, jobs)
        at = pause_under_way(proc, db, CTRL_C_TOTAL)
        if at is not None:
            break
        proc.communicate(timeout=HANG_S)
    else:
        pytest.fail("the sweep finished three times before it could be stopped mid-work")
    os.killpg(proc.pid, sig)
    resume(proc)
    if double:
        time.sleep(0.05)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # it had already exited: allowed
            pass
    _, err = proc.communicate(timeout=HANG_S)
    return proc.returncode, err.splitlines(), at


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The grid's rows from one uninterrupted serial run (a sweep's rows do not depend on its
    jobs: test_sweep.py::test_local_pool_gives_the_same_rows), in this process."""
    db = tmp_path_factory.mktemp("ref") / "ref.sqlite"
    assert cli_main(["sweep", "--db", str(db), "--quiet", "--jobs", "1", *CTRL_C_GRID]) == 0
    with ResultsStore(db, readonly=True) as st:
        rows = [{k: v for k, v in r.items() if k not in ("wall_s", "created_at")}
                for r in st.rows()]
    assert len(rows) == CTRL_C_TOTAL
    return rows


def _resumed_rows(db: Path) -> list[dict]:
    """Resume the interrupted sweep to its end (serially: a pool's start-up is not what these
    tests are about, the interrupted run's own ``--jobs`` is) and return its rows."""
    assert cli_main(["sweep", "--db", str(db), "--quiet", "--jobs", "1", *CTRL_C_GRID]) == 0
    with ResultsStore(db, readonly=True) as st:
        return [{k: v for k, v in r.items() if k not in ("wall_s", "created_at")}
                for r in st.rows()]


#: each signal with each job count at least once in the default run; the other two pairings (a
#: subprocess sweep each, ~2 s) with ``-m slow``
@pytest.mark.parametrize("jobs,double,sig", [
    pytest.param(1, False, signal.SIGINT, id="jobs1"),
    pytest.param(2, False, signal.SIGINT, id="jobs2", marks=pytest.mark.slow),
    pytest.param(2, True, signal.SIGINT, id="jobs2-double"),
    pytest.param(1, False, signal.SIGTERM, id="sigterm-jobs1", marks=pytest.mark.slow),
    pytest.param(2, False, signal.SIGTERM, id="sigterm-jobs2")])
def test_ctrl_c_or_sigterm_mid_sweep_exits_130_with_one_line_and_resumes_losslessly(
        tmp_path, uninterrupted, jobs, double, sig):
    db = tmp_path / "r.sqlite"
    code, lines, at = ctrl_c_trial(db, jobs, double=double, sig=sig)
    assert code == 130, lines
    assert len(lines) == 1 and "interrupted" in lines[0] and "resume" in lines[0], lines
    assert at <= stored_rows(db) < len(uninterrupted)
    assert _resumed_rows(db) == uninterrupted  # nothing lost, nothing duplicated


@pytest.mark.slow
def test_ctrl_c_20_of_20_trials(tmp_path, uninterrupted):
    """20 trials (1 and 2 jobs, some with a second Ctrl-C), each exiting 130 with one line,
    each resumed to exactly the uninterrupted rows (``benchmarks/bench_speed.py --ctrl-c 20``
    records the times to exit)."""
    for trial in range(20):
        db = tmp_path / f"r{trial}.sqlite"
        code, lines, _ = ctrl_c_trial(db, 1 + trial % 2, double=trial % 4 == 3)
        assert code == 130 and len(lines) == 1, (trial, code, lines)
        assert _resumed_rows(db) == uninterrupted, trial
