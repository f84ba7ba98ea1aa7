"""Nothing destroyed, nothing hangs (issue 36's catalogue of commands that destroy or hang, and of
wrong refusals).

Every case is refused as the bad-input catalogue's are (``tests/cli/test_bad_inputs_catalogue.py``):
exit code 2, one line on stderr naming the flag, no traceback; and here also: the file the
command would have destroyed is intact afterwards (same bytes, same kind: a database stays a
database, a device a device, a named pipe a named pipe), and a command that would have blocked
on a named pipe returns (the CLI runs in a subprocess with a timeout).
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import io
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import attnio
from attnio.cli import main
from attnio.core.errors import ParameterError
from attnio.core.paths import check_input_file, check_output_path, written_whole
from attnio.experiments.sweep import Grid, dry_run, parse_values, run_sweep

SRC = str(Path(attnio.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """A small results database (two algorithms, a few N and M)."""
    path = tmp_path_factory.mktemp("db") / "good.sqlite"
    run_sweep(Grid(N=parse_values("N", "64:256:x2"), d=(16,), M=(1024, 4096),
                   algorithms=("flash2", "standard")), path, jobs=1)
    for suffix in ("-wal", "-shm"):
        assert not os.path.exists(f"{path}{suffix}")
    return path


def _digest(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _refused(capsys, argv: list[str], *fragments: str) -> str:
    """Run ``argv`` in this process: exit 2, one stderr line holding every fragment, no
    traceback, nothing on stdout.  Returns the line."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    for f in fragments:
        assert f in err, (f, err)
    assert out == "", out
    return err


def _cli(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI in a subprocess (a command that blocks on a named pipe must not hang the suite:
    the timeout fails the test instead)."""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "ATTNIO_PROGRESS": "0"}
    return subprocess.run([sys.executable, "-m", "attnio", *argv], capture_output=True,
                          text=True, timeout=timeout, env=env)


def _refused_in_subprocess(argv: list[str], *fragments: str) -> str:
    r = _cli(argv)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in r.stderr, (f, r.stderr)
    return r.stderr


class _Blocked(BaseException):
    """Raised by the watchdog's alarm: a BaseException, so no ``except Exception`` in the CLI
    turns a hang into an ordinary refusal."""


def _refused_without_blocking(capsys, argv: list[str], *fragments: str,
                              timeout: int = 60) -> str:
    """:func:`_refused` under a watchdog: an ``open`` that blocks on a named pipe is interrupted
    by SIGALRM after ``timeout`` seconds and fails the test (in this process: a subprocess per
    case cost half a second of interpreter start each; one case still runs in a subprocess)."""
    def _alarm(signum, frame):
        raise _Blocked(f"{argv} blocked for {timeout} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        return _refused(capsys, argv, *fragments)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------- the output is the input
def test_export_over_the_database_is_refused_and_the_database_intact(db, tmp_path, capsys):
    before = _digest(db)
    _refused(capsys, ["sweep", "export", "--db", str(db), "--out", str(db), "--format", "csv"],
             "--out", "is the same file as --db", "good.sqlite")
    assert _digest(db) == before


@pytest.mark.parametrize("via", ["out-link", "db-link", "both-links", "dotted-path"])
def test_export_over_the_database_through_a_link_is_refused(db, tmp_path, capsys, via):
    real = tmp_path / "r.sqlite"
    real.write_bytes(Path(db).read_bytes())
    link = tmp_path / "link.sqlite"
    os.symlink(real, link)
    dbarg, out = {"out-link": (real, link), "db-link": (link, real),
                  "both-links": (link, link),
                  "dotted-path": (real, tmp_path / "." / "sub" / ".." / "r.sqlite")}[via]
    (tmp_path / "sub").mkdir()
    before = _digest(real)
    _refused(capsys, ["sweep", "export", "--db", str(dbarg), "--out", str(out), "--format",
                      "csv"], "--out", "is the same file as --db")
    assert _digest(real) == before and os.path.islink(link)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.sqlite", "r.sqlite", "sub"]


def test_export_still_replaces_a_regular_file_whole_and_keeps_a_link_a_link(db, tmp_path,
                                                                              capsys):
    target = tmp_path / "old.csv"
    target.write_text("an old export\n")
    link = tmp_path / "latest.csv"
    os.symlink(target, link)
    assert main(["sweep", "export", "--db", str(db), "--out", str(link)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert os.path.islink(link) and target.read_text().startswith("config_hash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.csv", "old.csv"]


def test_sweep_db_that_is_the_config_is_refused(tmp_path, capsys):
    cfg = tmp_path / "grid.toml"
    cfg.write_text('[[grid]]\nN = 64\nd = 16\nM = 1024\nalgo = "flash2"\n')
    before = _digest(cfg)
    _refused(capsys, ["sweep", "--config", str(cfg), "--db", str(cfg), "--quiet"],
             "--db", "is the same file as --config")
    assert _digest(cfg) == before


def test_report_out_that_is_the_database_is_refused(db, tmp_path, capsys):
    before = _digest(db)
    _refused(capsys, ["report", "--db", str(db), "--out", str(db), "--quiet"],
             "--out", "is the same file as --db")
    assert _digest(db) == before


def test_report_db_inside_out_with_a_name_the_report_writes_is_refused(db, tmp_path, capsys):
    out = tmp_path / "rep"
    out.mkdir()
    inside = out / "best.csv"
    inside.write_bytes(Path(db).read_bytes())
    before = _digest(inside)
    _refused(capsys, ["report", "--db", str(inside), "--out", str(out), "--quiet"],
             "--db", "inside --out", "best.csv")
    assert _digest(inside) == before and os.listdir(out) == ["best.csv"]


def test_trace_out_and_din_the_same_file_is_refused(tmp_path, capsys):
    p = tmp_path / "t.din"
    _refused(capsys, ["trace", "flash2", "--out", str(p), "--din", str(p)],
             "--din", "is the same file as --out")
    assert not p.exists()


# ----------------------------------------------------------------------------- devices and named pipes
def test_trace_din_on_a_device_is_refused_and_the_device_stays_one(capsys):
    _refused(capsys, ["trace", "flash2", "--din", os.devnull], "--din /dev/null",
             "a character device, not a regular file")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize("flag", ["--din", "--out"])
def test_trace_output_on_a_fifo_is_refused_without_blocking(tmp_path, capsys, flag):
    fifo = tmp_path / ("pipe.din" if flag == "--out" else "pipe")
    os.mkfifo(fifo)
    _refused_without_blocking(capsys, ["trace", "flash2", flag, str(fifo)], flag,
                              "a named pipe (FIFO), not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_sweep_db_dev_null_is_refused_and_leaves_no_journal(capsys):
    journal = os.devnull + "-journal"
    existed = os.path.exists(journal)
    _refused(capsys, ["sweep", "--db", os.devnull, "--N", "64", "--d", "16", "--M", "1024",
                      "--algo", "flash2", "--quiet", "--jobs", "1"],
             "--db /dev/null is a character device, not a regular file")
    assert existed or not os.path.exists(journal)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_the_store_refuses_a_device_or_a_fifo(tmp_path):
    from attnio.experiments.store import ResultsStore, StoreError

    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    for path, kind in ((os.devnull, "a character device"), (fifo, "a named pipe")):
        for readonly in (False, True):
            with pytest.raises(StoreError, match=kind):
                ResultsStore(path, readonly=readonly)


@pytest.mark.parametrize("argv", [
    ["sweep", "--db", "{fifo}", "--N", "64", "--d", "16", "--M", "1024", "--quiet"],
    ["sweep", "--db", "{fifo}", "--N", "64", "--d", "16", "--M", "1024", "--dry-run"],
    ["sweep", "--db", "{tmp}/r.sqlite", "--config", "{fifo}", "--quiet"],
    ["sweep", "export", "--db", "{fifo}", "--out", "{tmp}/x.csv"],
    ["sweep", "export", "--db", "{db}", "--out", "{fifo}"],
    ["report", "--db", "{fifo}", "--out", "{tmp}/rep"],
    ["report", "--db", "{db}", "--out", "{fifo}"],
    ["run", "flash2", "--N", "64", "--d", "16", "--M", "1024", "--block-mask", "{fifo}",
     "--count-only"],
    ["run", "flash2", "--N", "64", "--d", "16", "--M", "1024", "--inputs", "{fifo}"],
    ["gpu", "validate", "--measurements", "{fifo}"],
    ["gpu", "calibrate", "--measurements", "{fifo}", "--out", "{tmp}/fit.json"],
], ids=["sweep-db", "dry-run-db", "sweep-config", "export-db", "export-out", "report-db",
        "report-out", "run-block-mask", "run-inputs", "gpu-validate", "gpu-calibrate"])
def test_a_named_pipe_never_blocks(db, tmp_path, capsys, argv):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = [a.format(fifo=fifo, tmp=tmp_path, db=db) for a in argv]
    flag = argv[argv.index(str(fifo)) - 1]
    _refused_without_blocking(capsys, argv, flag, "pipe")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_named_pipe_never_blocks_a_fresh_process(tmp_path):
    """The same refusal end to end: ``python -m attnio`` in a subprocess with a timeout."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused_in_subprocess(["sweep", "--db", str(fifo), "--N", "64", "--d", "16", "--M", "1024",
                            "--quiet"], "--db", "pipe")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.parametrize("argv,flag", [
    (["sweep", "export", "--db", "{db}", "--out", "{tmp}"], "--out"),
    (["trace", "flash2", "--out", "{tmp}"], "--out"),
    (["report", "--db", "{db}", "--out", os.devnull], "--out"),
    (["report", "--db", "{tmp}", "--out", "{tmp}/rep"], "--db"),
    (["sweep", "export", "--db", "{db}", "--out", os.devnull], "--out"),
    (["gpu", "validate", "--measurements", os.devnull], "--measurements"),
    (["gpu", "validate", "--measurements", "{tmp}"], "--measurements"),
], ids=["export-dir", "trace-dir", "report-out-device", "report-db-dir", "export-device",
        "gpu-validate-device", "gpu-validate-dir"])
def test_a_directory_or_device_where_a_file_is_expected(db, tmp_path, capsys, argv, flag):
    argv = [a.format(tmp=tmp_path, db=db) for a in argv]
    _refused(capsys, argv, flag, "not a ")
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- tracebacks
@pytest.mark.parametrize("depth,fragment", [(40_000, "characters long, more than 10,000"),
                                            (2_000, "nested too deeply")])
def test_tiling_nested_deep_is_one_line(capsys, depth, fragment):
    _refused(capsys, ["run", "flash2", "--tiling", "[" * depth + "]" * depth],
             "--tiling", fragment)


def test_config_nested_deep_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "deep.toml"
    cfg.write_text("N = " + "[" * 30_000 + "]" * 30_000 + "\n")
    _refused(capsys, ["sweep", "--config", str(cfg), "--db", str(tmp_path / "r.sqlite"),
                      "--quiet"], "--config", "nested too deeply")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.toml"]


def test_report_on_a_full_disk_is_one_line_and_leaves_nothing(db, tmp_path, capsys,
                                                             monkeypatch):
    """Every write of the report raises ENOSPC (a full disk): one line naming --out and the
    cause, and neither the report folder nor its temporary folder is left."""
    pytest.importorskip("matplotlib")
    real_open = builtins.open
    out = tmp_path / "rep"

    class Full(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_open(file, mode="r", *args, **kwargs):
        if ("w" in mode or "a" in mode) and str(tmp_path) in os.fspath(file):
            real_open(file, mode, *args, **kwargs).close()  # the file exists, then is full
            raw = io.BufferedWriter(Full())
            return raw if "b" in mode else io.TextIOWrapper(raw)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full_open)
    _refused(capsys, ["report", "--db", str(db), "--out", str(out), "--quiet", "--formats",
                      "png"], "--out", "no space left on the device", "nothing was left behind")
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- wrong refusals
def test_block_sparse_count_blames_the_size_not_a_tiling_never_given(capsys):
    err = _refused(capsys, ["run", "flash2", "--N", "1048576", "--d", "64", "--M", "65536",
                            "--count-only", "--density", "0.1", "--force"],
                   "attnio run: error: --N: ", "least-I/O tiling", "more than 2**28")
    assert "--tiling Flash2Tiling" not in err
    # a tiling the user gives is blamed as before
    _refused(capsys, ["run", "flash2", "--N", "1048576", "--d", "64", "--M", "65536",
                      "--count-only", "--density", "0.1", "--force", "--tiling",
                      '{"Br": 2, "Bc": 2}'], "attnio run: error: --tiling Flash2Tiling")


def test_gpu_score_with_huge_heads_blames_the_heads(capsys):
    err = _refused(capsys, ["gpu", "score", "--device", "h100", "--N", "64", "--d", "64",
                            "--heads", str(2**39), "--kv-heads", "1"], "--heads")
    assert "--config" not in err


def test_gpu_packing_refusal_blames_the_heads_unless_the_config_was_given(capsys):
    base = ["--device", "h100", "--N", "64", "--d", "64", "--heads", "512", "--kv-heads", "1"]
    err = _refused(capsys, ["gpu", "score", *base], "--heads/--kv-heads", "give fewer --heads")
    assert "--config" not in err
    _refused(capsys, ["gpu", "score", *base, "--config", "Br=128,Bc=128,pack=1"],
             "--config pack: Br=128")


def test_gpu_tune_with_huge_heads_does_not_ask_for_a_smaller_N(capsys):
    err = _refused(capsys, ["gpu", "tune", "--device", "h100", "--N", "64", "--d", "64",
                            "--heads", str(2**39), "--kv-heads", "1"], "--heads", "CTAs")
    assert "smaller --N" not in err and "out of memory" not in err


@pytest.mark.parametrize("mode", ["compute", "count"])
def test_sweep_negative_seed_is_refused_up_front(tmp_path, capsys, mode):
    db = tmp_path / "r.sqlite"
    _refused(capsys, ["sweep", "--seed", "-1", "--mode", mode, "--N", "64", "--d", "16",
                      "--M", "1024", "--algo", "flash2", "--db", str(db), "--quiet"],
             "--seed must be an integer >= 0, got -1")
    assert not db.exists()


def test_sweep_exit_1_says_why_on_stderr(tmp_path, capsys, monkeypatch):
    """A configuration that fails (a bug: an error row) exits 1 with a line on stderr, also
    with --quiet."""
    from attnio.experiments import row

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(row, "_measure", broken)
    db = tmp_path / "r.sqlite"
    code = main(["sweep", "--N", "64", "--d", "16", "--M", "1024", "--algo", "flash2",
                 "--db", str(db), "--quiet", "--jobs", "1"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "1 configuration(s) failed" in err and "r.sqlite" in err


@pytest.mark.parametrize("tiling,fragment", [
    ("0", "--tiling must be an integer >= 1, got 0"),
    ("foo", "--tiling for square_tiling must be 'auto', 'paper', an int side B"),
    ('{"x": 1}', "--tiling for square_tiling has unknown field(s) ['x']"),
    ('{"B": 4, "Br": 4}', "--tiling: give either B (every side) or the six sides"),
    ('{"Br": 4}', "--tiling for square_tiling is missing"),
    ('{"stable": 3}', "--tiling's stable must be True or False"),
], ids=["zero", "name", "unknown-field", "B-and-sides", "missing", "stable"])
def test_square_tiling_errors_name_the_flag(capsys, tiling, fragment):
    _refused(capsys, ["run", "square_tiling", "--tiling", tiling], fragment)


def test_pebble_time_limit_beyond_a_day_is_refused(capsys):
    _refused(capsys, ["pebble", "--time-limit", "1e300"],
             "--time-limit must be a real number in (0, 86400]")
    from attnio.pebble.comparison import Instance, compare

    with pytest.raises(ParameterError, match=r"time_limit must be .* \(0, 86,400\]") as e:
        compare(Instance("attention", (2, 2, 1)), 4, time_limit=1e300)
    assert e.value.param == "time_limit"


@pytest.mark.parametrize("alg,tiling,fragment", [
    ("flash2", '{"Br": %d, "Bc": 1}' % 2**62, "--tiling's Br must be an integer in [1, 2**50], "
                                               "got 2**62"),
    ("flash2", '{"Br": %d, "Bc": 1}' % 2**70, "--tiling's Br must be an integer in [1, 2**50], "
                                               "got 2**70"),
    ("square_tiling", str(2**62), "--tiling must be an integer in [1, 2**50], got 2**62"),
    ("square_tiling", '{"B": %d}' % 2**70, "--tiling's B must be an integer in [1, 2**50]"),
    ("q_split", '{"Br": %d}' % 2**62, "--tiling's Br must be an integer in [1, 2**50]"),
], ids=["flash2-2^62", "flash2-2^70", "square-2^62", "square-B-2^70", "q_split-2^62"])
def test_tiles_beyond_any_size_are_refused_not_echoed(capsys, alg, tiling, fragment):
    err = _refused(capsys, ["run", alg, "--tiling", tiling], fragment)
    assert "Tiling(" not in err  # the tiling is not echoed back in a later refusal


def test_tiles_beyond_any_size_are_refused_in_the_api():
    with pytest.raises(ParameterError) as e:
        attnio.run("flash2", shape=(64, 16), M=1024, mode="count",
                   tiling={"Br": 2**70, "Bc": 1})
    assert e.value.param == "tiling.Br"
    with pytest.raises(ParameterError, match=r"tiling.bm must be an integer in \[1, 2\*\*50\]"):
        from attnio.blocks.matmul import ALGORITHM as MATMUL

        MATMUL.coerce_tiling((8, 8, 8), 64, {"bm": 2**62, "bn": 1, "bk": 1})


# ----------------------------------------------------------------------------- the checks themselves
def test_check_output_path_and_check_input_file(tmp_path):
    f = tmp_path / "a.csv"
    f.write_text("x\n")
    link = tmp_path / "l.csv"
    os.symlink(f, link)
    hard = tmp_path / "h.csv"
    os.link(f, hard)
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    for out in (f, link, hard):
        with pytest.raises(ParameterError, match="is the same file as --db") as e:
            check_output_path(out, "--out", inputs=[("--db", f)])
        assert e.value.param == "out"
    check_output_path(tmp_path / "new.csv", "--out", inputs=[("--db", f)])  # nothing there yet
    check_output_path(f, "--out", inputs=[("--db", tmp_path / "other")])    # a regular file
    for path, kind in ((fifo, "a named pipe"), (tmp_path, "a directory"),
                       (os.devnull, "a character device")):
        with pytest.raises(ParameterError, match=kind):
            check_output_path(path, "--out")
        with pytest.raises(ParameterError, match=kind):
            check_input_file(path, "--db")
    with pytest.raises(ParameterError, match="not a directory"):
        check_output_path(f, "--out", directory=True)
    check_output_path(tmp_path, "--out", directory=True)
    with pytest.raises(ParameterError, match="does not exist"):
        check_output_path(tmp_path / "no" / "x.csv", "--out")
    dangling = tmp_path / "d.csv"
    os.symlink(tmp_path / "nowhere", dangling)
    with pytest.raises(ParameterError, match="symbolic link"):
        check_output_path(dangling, "--out")
    assert check_input_file(tmp_path / "missing", "--db", required=False) is None
    with pytest.raises(ParameterError, match="no such file"):
        check_input_file(tmp_path / "missing", "--db")


def test_written_whole_replaces_only_when_whole(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("old\n")
    with pytest.raises(ParameterError, match="--out .*No space left"):
        with written_whole("--out", f) as tmp:
            Path(tmp).write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert f.read_text() == "old\n" and os.listdir(tmp_path) == ["a.txt"]
    with written_whole("--out", f) as tmp:
        Path(tmp).write_text("new\n")
    assert f.read_text() == "new\n" and os.listdir(tmp_path) == ["a.txt"]


# ----------------------------------------------------------------------------- dry-run by reason
def test_dry_run_counts_every_skip_by_reason(tmp_path, capsys):
    grids = [Grid(N=parse_values("N", "256:4096:x2"), d=(16, 64), M=(256, 1024),
                  algorithms=("flash1", "flash2", "approx_poly"))]
    plan = dry_run(grids, None)
    assert plan.skipped > 10 and sum(plan.reasons.values()) == plan.skipped
    assert main(["sweep", "--dry-run", "--db", str(tmp_path / "r.sqlite"), "--N", "256:4096:x2",
                 "--d", "16,64", "--M", "256,1024", "--algo", "flash1,flash2,approx_poly"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "skipped, by reason" in out[1]
    counted = [line.split(None, 1) for line in out[2:]]
    assert sum(int(n.replace(",", "")) for n, _ in counted) == plan.skipped
    assert {why for _, why in counted} == {f"{a}: {w}" for a, w in plan.reasons}
    assert not any(line.startswith("  skip ") for line in out)
