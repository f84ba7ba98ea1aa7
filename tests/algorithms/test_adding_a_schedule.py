"""Adding a schedule is one module and one registry line (docs/contributing.md, issue 33).

The toy schedule below is written here, as a new module would be, with nothing but the hooks
docs/contributing.md names (a ``Tiling``, ``candidate_tilings``, ``footprint``, ``min_M``,
``_predict``, ``schedule``, and an ``unsupported`` reason of its own).  Registered (the one line a
new module adds to ``attnio/algorithms/__init__.py``; here the registry entry is made for this
test only), it runs through :func:`attnio.run` (compute and count mode, held to the float64
reference and its own closed form), :func:`attnio.plan` and a sweep, with no other edit: the
Schedule protocol (``mapspace``, ``cost``, ``execute``) and the mapper do the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

import attnio
from attnio.algorithms import mapper
from attnio.algorithms.base import Algorithm
from attnio.core.memory import IOCount, SlowArray, TwoLevelMemory
from attnio.core.workload import Shape, cdiv


@dataclass(frozen=True)
class RowsTiling:
    """Br query rows a block; Bc key/value rows a step."""

    Br: int
    Bc: int


def _fp(d: int, Br: int, Bc: int) -> int:
    return 2 * Br * d + 2 * Bc * d + Br * Bc + 2 * Br  # Q_i, O_i; K_j, V_j; S; m, l


def _update(S: np.ndarray, m: np.ndarray, l: np.ndarray, O: np.ndarray, V: np.ndarray) -> None:
    """The online softmax: fold the scores S of one key block into (m, l, O)."""
    m_new = np.maximum(m, S.max(axis=1))
    c = np.exp(m - m_new)
    S -= m_new[:, None]
    np.exp(S, out=S)
    l *= c
    l += S.sum(axis=1)
    O *= c[:, None]
    O += S @ V
    m[:] = m_new


def _normalise(O: np.ndarray, l: np.ndarray) -> None:
    O /= l[:, None]


class ToyRows(Algorithm[RowsTiling]):
    """Query blocks outside, key/value blocks streamed inside, unmasked attention only."""

    name = "toy_rows"
    summary = "a toy: Br query rows against the keys in blocks of Bc (unmasked only)"
    Tiling = RowsTiling

    def unsupported(self, shape: Shape, M: int | None = None) -> str | None:
        if shape.causal:
            return "no causal mask support"
        return super().unsupported(shape, M)

    def footprint(self, shape: Shape, t: RowsTiling) -> int:
        return _fp(shape.d, min(t.Br, shape.Nq), min(t.Bc, shape.Nkv))

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1, 1)

    def steps(self, shape: Shape, t: RowsTiling) -> int:
        return cdiv(shape.Nq, t.Br) * cdiv(shape.Nkv, t.Bc)

    def candidate_tilings(self, shape: Shape, M: int) -> list[RowsTiling]:
        out = []
        for Br in {min(shape.Nq, 2 ** k) for k in range(int(math.log2(shape.Nq)) + 2)}:
            Bc = min(shape.Nkv, (M - 2 * Br * shape.d - 2 * Br) // (2 * shape.d + Br))
            if Bc >= 1:
                out.append(RowsTiling(Br, Bc))
        return sorted(out, key=lambda t: (t.Br, t.Bc))

    def _predict(self, shape: Shape, t: RowsTiling) -> IOCount:
        d = shape.d  # Q once, K and V once per query block, O written once
        return IOCount(shape.Nq * d + 2 * d * shape.Nkv * cdiv(shape.Nq, t.Br), shape.Nq * d)

    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: RowsTiling, scale: float) -> None:
        d = shape.d
        for qb in mem.blocks(shape.Nq, tiling.Br):
            Qi = mem.load(Q, qb, label="Q_i")
            Oi = mem.alloc((qb.size, d), 0.0, label="O_i")
            m = mem.alloc((qb.size,), -np.inf, label="m_i")
            l = mem.alloc((qb.size,), 0.0, label="l_i")
            for kb in mem.blocks(shape.Nkv, tiling.Bc):
                Kj = mem.load(K, kb, label="K_j")
                Vj = mem.load(V, kb, label="V_j")
                S = mem.alloc((qb.size, kb.size), label="S_ij")
                mem.matmul(S, Qi, Kj, transpose_b=True, alpha=scale)
                mem.compute(_update, S, m, l, Oi, Vj, writes=4)
                mem.free(S, Kj, Vj)
            mem.compute(_normalise, Oi, l, writes=1)
            mem.store(Oi, O, qb)
            mem.free(Qi, Oi, m, l)


TOY = ToyRows()


@pytest.fixture
def toy(monkeypatch):
    """``register(TOY)`` for this test only (a new module adds it to the registry's list)."""
    from attnio.algorithms import _REGISTRY
    from attnio.planner import planner

    monkeypatch.setitem(_REGISTRY, TOY.name, TOY)
    planner._plan.cache_clear()
    yield TOY
    planner._plan.cache_clear()


def test_the_protocol_follows_from_the_hooks(toy):
    shape = Shape.make(50, 8)
    space = toy.mapspace(shape, 600)
    assert space.unsupported is None and space.field_names() == ["Br", "Bc"]
    assert all(f.kind == "int" and f.low == 1 for f in space.fields)
    best = mapper.search(toy, shape, 600)
    assert best is not None and best.tried == len(list(space.tilings()))
    cost = toy.cost(shape, best.tiling)
    assert cost.io == best.predicted and cost.footprint <= 600 and cost.error is None
    assert mapper.can_run(toy, Shape.make(50, 8, causal=True), 600) == "no causal mask support"
    assert mapper.can_run(toy, shape, 10) == f"needs M >= {toy.min_M(shape):,}"


def test_run_holds_it_to_the_reference_and_its_closed_form(toy):
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((37, 8)) for _ in range(3))
    res = attnio.run("toy_rows", Q, K, V, M=500, check=True)
    assert np.abs(res.output - attnio.reference.attention(Q, K, V)).max() < 1e-12
    assert res.io.peak <= 500
    assert res.io.total == toy.cost(res.shape, res.tiling).io.total
    counted = attnio.run("toy_rows", shape=(4096, 64), M=20000)
    assert counted.io.total == toy.predicted_io((4096, 64), 20000).total
    assert counted.io.total >= counted.certificate.best_bound.value
    with pytest.raises(attnio.ParameterError, match="causal"):
        attnio.run("toy_rows", shape=Shape.make(64, 8, causal=True), M=500)


def test_plan_scores_it_beside_the_others(toy):
    p = attnio.plan(1024, 32, 4096)
    mine = [c for c in p.candidates if c.algorithm == "toy_rows"]
    assert len(mine) == 1 and mine[0].predicted == toy.cost(p.shape, mine[0].tiling).io
    causal = attnio.plan(1024, 32, 4096, causal=True)
    assert ("toy_rows", "no causal mask support") in causal.skipped


def test_a_sweep_runs_it_and_skips_what_it_cannot(toy, tmp_path):
    from attnio.experiments.grid import Grid
    from attnio.experiments.store import ResultsStore
    from attnio.experiments.sweep import run_sweep

    db = tmp_path / "toy.sqlite"
    run_sweep(Grid(N=(64, 128), d=(8,), M=(30, 1000), algorithms=("toy_rows",),
                   causal=(False,)), db, jobs=1)
    rows = ResultsStore(db).rows()
    assert {(r["Nq"], r["M"], r["status"]) for r in rows} == {
        (64, 30, "skipped"), (128, 30, "skipped"), (64, 1000, "ok"), (128, 1000, "ok")}
    for r in rows:
        if r["status"] == "ok":
            assert r["reads"] + r["writes"] == r["predicted_reads"] + r["predicted_writes"]
