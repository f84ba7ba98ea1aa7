"""Signalling a running ``attnio sweep`` only once its work is provably under way.

A test that sends Ctrl-C, SIGTERM or SIGKILL to a sweep "once rows are written" races the sweep:
on a busy machine the sweep can finish between the test seeing the first row and the signal.
:func:`pause_under_way` closes that race: it waits until this run has committed a row, stops the
whole process group (SIGSTOP), waits until the sweep process is stopped, and only then reads how
many rows are committed.  Fewer than the grid's total means the sweep is stopped mid-work, so a
signal sent now (then SIGCONT) lands while it runs: the outcome the contract gives a signal during
a sweep is the only one a test must accept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import stored_rows

#: A guard against a hung sweep (never an assertion about speed).
HANG_S = 120.0


def start_sweep(db: Path, args: list[str], jobs: int) -> subprocess.Popen:
    """``attnio sweep --db DB --jobs JOBS ARGS`` in its own session (its own process group)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-m", "attnio", "sweep", "--db", str(db), "--jobs",
                             str(jobs), *args], env=env, start_new_session=True,
                            preexec_fn=_terminal_signals,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _terminal_signals() -> None:
    """In the child, before exec: SIGINT and SIGTERM at their defaults and unblocked, as a
    terminal starts a foreground job.  An ignored disposition and the signal mask survive exec,
    and Python does not turn an ignored SIGINT into KeyboardInterrupt.  Something run earlier in
    the same xdist worker can leave SIGINT ignored (the source is not identified; with SIGINT set
    to SIG_IGN before each test these tests failed exactly as in the busy-machine runs: exit 0,
    no line), and the sweep then rightly ignored Ctrl-C and finished — the tests passed or failed
    with the order the modules ran in."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _stopped_or_gone(pid: int) -> None:
    """Wait until process ``pid`` (our child) is stopped or has exited, without reaping it."""
    os.waitid(os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)


def pause_under_way(proc: subprocess.Popen, db: Path, total: int, before: int = 0) -> int | None:
    """Stop the sweep's process group once it has committed more than ``before`` rows; return
    the committed rows if the sweep is provably mid-work (stopped with fewer than ``total``),
    else None (it finished first, or died: the group is continued and left to end)."""
    deadline = time.monotonic() + HANG_S
    while stored_rows(db) <= before and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    try:
        os.killpg(proc.pid, signal.SIGSTOP)
    except ProcessLookupError:
        return None
    _stopped_or_gone(proc.pid)
    rows = stored_rows(db)
    if before < rows < total and proc.poll() is None:
        return rows
    resume(proc)
    return None


def resume(proc: subprocess.Popen) -> None:
    """SIGCONT to the process group (it may be gone)."""
    try:
        os.killpg(proc.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc; the sweep's workers)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting to be reaped has finished)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: list[int]) -> list[int]:
    """Wait (at most :data:`HANG_S`) until none of ``pids`` runs; the ones still running."""
    deadline = time.monotonic() + HANG_S
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if alive(p)]
