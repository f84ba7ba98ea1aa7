"""Bounds closed under more memory (docs/bounds.md §12.1): a schedule for M runs unchanged with
M' >= M words, so the maximum of a bound over M' >= M is a bound at M.  The segment theorems are
evaluated that way; these tests check that the value returned is at least the theorem's value at
every larger M' of the fixed grid the scan walks (so it is non-increasing along that grid), that
issue 25's counterexample to monotonicity is gone, and that a large-N call does not scan."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnio import bounds as B
from attnio.bounds import backward as BK
from attnio.bounds import forward as F
from attnio.bounds import segments as SG

THEOREMS = [F._A, F._B, BK._D, BK._E]


def test_pv_segment_no_longer_drops_when_memory_shrinks():
    # issue 25: N = 256, d = 32 gave 3.62·Nd at M = 0.9·Nd and 4.31·Nd at M = 1.2·Nd
    N, d = 256, 32
    at_09 = B.pv_segment(N=N, d=d, M=int(0.9 * N * d)).value
    assert at_09 > F._A.search(N * N, d, int(0.9 * N * d))[0]  # the closure found more
    assert at_09 >= 3.9 * N * d
    assert "evaluated at M'" in B.pv_segment(N=N, d=d, M=int(0.9 * N * d)).assumptions[-1]


def _scanned(theorem, P, d, M):
    """The grid points the scan evaluates (it stops after three zeros in a row)."""
    out, zeros = [], 0
    for g in SG.more_memory_grid(M):
        v = theorem.search(P, d, g, False)[0]
        out.append((g, v))
        zeros = zeros + 1 if v == 0 else 0
        if zeros >= 3:
            break
    return out


@pytest.mark.parametrize("theorem", THEOREMS, ids=lambda t: t.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(P=st.integers(1, 200_000), d=st.integers(1, 64), M=st.integers(4, 60_000))
def test_closed_value_dominates_the_theorem_at_every_larger_memory_scanned(theorem, P, d, M):
    v, K, _, M2 = theorem.closed(P, d, M)
    assert M2 >= M
    assert v >= theorem.search(P, d, M)[0]
    if v >= SG.MORE_MEMORY_SEGMENTS * K > 0:
        return  # many segments: no scan (the test below)
    for g, vg in _scanned(theorem, P, d, M):
        assert v >= vg, (theorem.name, P, d, M, g, v, vg)


def test_many_segments_do_not_scan():
    v, K, _, M2 = F._A.closed(10**18, 128, 65536)
    assert M2 == 65536 and v >= SG.MORE_MEMORY_SEGMENTS * K
