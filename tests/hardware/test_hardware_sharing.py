"""CTAs share their SM in the last wave (per-SM processor sharing, ``timing.shared_makespan``):
the fast form equals an exact event simulation, full waves are unchanged, a CTA alone in a
partial last wave runs at the one-CTA time, and the model stays continuous in its parameters."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from attnio.core.workload import Shape
from attnio.hardware import devices
from attnio.hardware.model import prepared
from attnio.hardware.predict import prepare_row, row_time
from attnio.hardware.timing import (
    BOUNDS,
    _cta_durations,
    _occupancy,
    evaluate,
    greedy_makespan,
    load_params,
    shared_makespan,
)


def _simulate(dur, sms, k, at):
    """Exact (rational) event simulation: slot ``s`` on SM ``s mod sms``; free slots are filled
    in launch order, lowest slot first; a CTA with ``j`` on its SM advances ``1/D_j`` a second."""
    n, slots = len(dur), sms * k
    D = {j: [Fraction(float(x)) for x in
             (np.minimum(dur, np.maximum(at(j, np.arange(n)), dur * j / k)) if j < k else dur)]
         for j in range(1, k + 1)}
    cta, left, nxt, now = [-1] * slots, [Fraction(0)] * slots, 0, Fraction(0)

    def fill():
        nonlocal nxt
        for s in range(slots):
            if cta[s] < 0 and nxt < n:
                cta[s], left[s], nxt = nxt, Fraction(1), nxt + 1

    fill()
    while any(c >= 0 for c in cta):
        occ = [sum(cta[j * sms + m] >= 0 for j in range(k)) for m in range(sms)]
        ttf = {s: left[s] * D[occ[s % sms]][cta[s]] for s in range(slots) if cta[s] >= 0}
        dt = min(ttf.values())
        now += dt
        for s, t in ttf.items():
            if t == dt:
                cta[s], left[s] = -1, Fraction(0)
            else:
                left[s] -= dt / D[occ[s % sms]][cta[s]]
        fill()
    return float(now)


def test_last_wave_sharing_equals_an_exact_event_simulation():
    rng = np.random.default_rng(7)
    checked = 0
    for trial in range(120):
        sms, k = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        n = int(rng.integers(1, 30))
        dur = rng.integers(1, 64, n) / 64.0
        if trial % 2:
            dur[:] = dur[0]            # equal CTAs: whole waves, then the shared last one
        f = rng.integers(0, 5, n) / 4.0

        def at(j, idx, dur=dur, f=f, k=k):
            return dur[idx] * (j / k) + (1 - j / k) * dur[idx] * f[idx]

        t = shared_makespan(dur, sms, k, at)
        if k == 1 or n <= sms * k or dur.min() == dur.max():
            assert t == pytest.approx(_simulate(dur, sms, k, at), rel=1e-12)
            checked += 1
        else:   # several waves of unequal CTAs: every CTA at its k-share (the docstring)
            assert t == greedy_makespan(dur, sms * k)
        for mode in ("lower", "upper"):
            b = shared_makespan(dur, sms, k, at, mode)
            assert (b <= t * (1 + 1e-12)) if mode == "lower" else (t <= b * (1 + 1e-12))
        assert t <= greedy_makespan(dur, sms * k) * (1 + 1e-12)   # sharing never slows
    assert checked > 60


def test_full_waves_and_one_cta_per_sm_are_unchanged():
    dur = np.full(3 * 2 * 5, 2.0)

    def at(j, idx):
        return np.full(len(idx), 1.5)   # alone: faster

    assert shared_makespan(dur, 5, 2, at) == 3 * 2.0         # every wave full
    assert shared_makespan(dur[:3 * 10 - 5], 5, 2, at) == 2 * 2.0 + 1.5   # last wave: one per SM
    assert shared_makespan(dur[:7], 7, 1, at) == 2.0          # k = 1: nothing to share


def test_a_cta_alone_in_the_last_wave_runs_at_the_one_cta_time():
    # A100, FA2 128x64 w4, d = 128, N = 8192, batch 2, 16 heads: 2,048 CTAs on 108 SMs x 2
    # slots, 9 full waves and 104 CTAs, one per SM (docs/hardware.md, section 9a)
    shape = Shape(8192, 8192, 128, batch=2, heads=16)
    pr = prepared("a100", shape, "Br=128,Bc=64,warps=4")
    assert pr is not None
    p = load_params(devices.get("a100"))
    main = pr.phases[0]
    assert (main.n, main.k, pr.sm_count) == (2048, 2, 108)
    shared = _cta_durations(main, pr, p)[0][0]
    alone = _cta_durations(_occupancy(main, 1, np.array([0])), pr, p)[0][0]
    assert shared / 2 < alone < shared
    assert len(pr.phases) == 1
    assert evaluate(pr, p)[0] == pytest.approx(p.launch_us * 1e-6 + 9 * shared + alone,
                                               rel=1e-12)


def test_the_time_is_continuous_in_the_parameters():
    # causal FA2 with two CTAs per SM over many waves: the tail that would jump with the
    # pairing of CTAs on SMs (docs/hardware.md, section 9a) keeps the k-slot dispatch
    row = prepare_row("h100-sxm", Shape(2048, 2048, 64, batch=8, heads=32, causal=True),
                      "fa2", "fwd")
    assert row.flash[0].phases[0].k == 2
    p = load_params(devices.get("h100-sxm"))
    t0 = row_time(row, p)
    for name in ("mma_sync_eff", "softmax_ops", "fa2_exposed", "cta_cycles"):
        lo, hi = BOUNDS[name][:2]
        d = [row_time(row, replace(p, **{name: getattr(p, name) + h * (hi - lo)})) / t0 - 1
             for h in (1e-5, 1e-6)]
        # a step ten times smaller moves the time ten times less (no jump of 0.2-0.8%)
        assert abs(d[0]) < 1e-3 and abs(d[0] - 10 * d[1]) <= 0.01 * abs(d[0]) + 1e-12, (name, d)
