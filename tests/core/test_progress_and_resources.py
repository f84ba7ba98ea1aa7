"""Progress on long work, and the estimates that refuse work before it allocates (issue 18)."""

from __future__ import annotations

import doctest
import io
import time

import numpy as np
import pytest

import attnio
import attnio.cachesim.validation
import attnio.cli.common
from attnio.core import progress as progress_mod
from attnio.core import resources
from attnio.core.memory import TwoLevelMemory
from attnio.core.progress import Progress
from attnio.core.resources import Cost, ResourceError, check_cost, fmt_count, parse_bytes


@pytest.mark.parametrize("module", [progress_mod, resources, attnio.cli.common],
                         ids=lambda m: m.__name__)
def test_docstring_examples_hold(module):
    assert doctest.testmod(module).failed == 0


# ---------------------------------------------------------------------- the display
def test_progress_off_draws_nothing():
    stream = io.StringIO()
    with Progress("work", total=10, enabled=False, delay=0, stream=stream) as p:
        for i in range(10):
            p(i + 1)
    assert not p.shown and stream.getvalue() == "" and p.done == 10


def test_progress_on_a_terminal_draws_and_erases_its_bar():
    stream = io.StringIO()
    with Progress("work", total=4, enabled=True, delay=0, stream=stream) as p:
        p(2)
        p.describe("phase two", total=8)
        p(8)
    assert p.shown and stream.getvalue()  # drawn (rich redraws it, then erases it on close)


def test_quick_work_shows_no_bar_before_the_delay():
    stream = io.StringIO()
    with Progress("quick", total=3, enabled=True, delay=30, stream=stream) as p:
        p(3)
    assert not p.shown and stream.getvalue() == ""


def test_progress_is_off_when_stderr_is_not_a_terminal(monkeypatch):
    assert not Progress("x", stream=io.StringIO()).enabled
    monkeypatch.setenv("ATTNIO_PROGRESS", "0")

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert not Progress("x", stream=Tty()).enabled


def test_a_clock_bar_counts_seconds_by_itself():
    stream = io.StringIO()
    with Progress("solving", total=5, enabled=True, delay=0, stream=stream, clock=True) as p:
        time.sleep(0.6)
    assert p.shown and 0.25 <= p.done <= 5


# ---------------------------------------------------------------------- reports from the loops
def test_the_simulator_reports_its_tile_steps_and_counts_stay_the_same():
    seen = []
    shape = attnio.Shape(256, 256, 16, causal=True)
    plain = attnio.run("flash2", shape=shape, M=512, mode="count", bulk=False)
    res = attnio.run("flash2", shape=shape, M=512, mode="count", bulk=False,
                     progress=lambda done, total: seen.append((done, total)))
    assert (res.io.reads, res.io.writes) == (plain.io.reads, plain.io.writes)
    assert len(seen) >= 10
    dones = [d for d, _ in seen]
    assert dones == sorted(dones) and dones[-1] <= res.io.steps
    assert all(t == seen[0][1] > 0 for _, t in seen)


def test_compute_mode_and_backward_report_progress():
    rng = np.random.default_rng(0)
    Q, K, V, dO = (rng.standard_normal((64, 8)) for _ in range(4))
    seen = []
    attnio.run("flash2", Q, K, V, M=200, backward=True, grad_output=dO,
               progress=lambda d, t: seen.append(d))
    assert len(seen) > 2


def test_memory_without_progress_never_calls_back():
    mem = TwoLevelMemory(100, mode="count", bulk=False)
    assert sum(1 for _ in mem.blocks(10_000, 1)) == 10_000  # no callback: nothing to call


def test_replays_report_their_events():
    tr = attnio.trace("flash2", 32, 8, 300)
    for policy in ("lru", "fifo", "opt"):
        seen = []
        attnio.replay(tr, 300, policy, chunk=1000, progress=lambda d, t: seen.append((d, t)))
        if policy != "opt":  # OPT reports every 65,536 events: this trace is shorter
            assert seen[-1] == (len(tr), len(tr)) and len(seen) > 2


def test_verify_reports_recording_then_replays():
    seen = []
    attnio.cachesim.validation.verify("flash2", 32, 8, 300,
                                      options=attnio.cachesim.VerifyOptions(("lru",)),
                                      progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1]


# ---------------------------------------------------------------------- estimates and refusals
def test_estimates_grow_with_the_work():
    small = attnio.runner.estimate("flash2", (1024, 64), 16384)
    big = attnio.runner.estimate("flash2", (8192, 64), 16384)
    assert 0 < small.bytes < big.bytes and 0 < small.seconds < big.seconds
    assert attnio.runner.estimate("flash2", (10**9, 128), 65536, mode="count").bytes == 0


def test_the_estimate_bounds_what_a_run_allocates():
    import tracemalloc

    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((512, 32)) for _ in range(3))
    est = attnio.runner.estimate("standard", (512, 32), 4096)
    # the certificate's bound tables are cached per (d, M) on first use (a few hundred kB, kept
    # for the process, not per run): built first, so that the trace measures the run itself
    attnio.run("standard", shape=(512, 32), M=4096, mode="count")
    tracemalloc.start()
    attnio.run("standard", Q, K, V, M=4096)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak <= est.bytes, (peak, est.bytes)


def test_check_cost_refuses_memory_then_time():
    with pytest.raises(ResourceError, match=r"max_memory \(1 kB\)") as e:
        check_cost(Cost(10**6, 1.0), subject="x", instead="y", max_memory=1000)
    assert e.value.param == "max_memory"
    with pytest.raises(ResourceError, match=r"budget_s \(2 s\)") as e:
        check_cost(Cost(10, 5.0), subject="x", instead="y", budget_s=2)
    assert e.value.param == "budget_s"
    check_cost(Cost(10, 5.0), subject="x", instead="y", budget_s=2, force=True)


@pytest.mark.parametrize("text,n", [("8G", 8 * 10**9), ("512MB", 512 * 10**6), ("2GiB", 2 << 30),
                                    ("1000", 1000), (" 1.5 k", 1500)])
def test_sizes_parse(text, n):
    assert parse_bytes(text) == n


def test_counts_print_without_float_noise():
    assert fmt_count(10**30) == "1" + ",000" * 10
    assert fmt_count(1.2345678901234567e30) == "1.23e+30"
    assert fmt_count(123456.0) == "123,456"
