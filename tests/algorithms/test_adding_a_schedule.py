"""Adding a schedule is one module and one registry line (docs/contributing.md, issue 33).

The toy schedule below is written here, as a new module would be, with nothing but the hooks
docs/contributing.md names (a ``Tiling``, ``candidate_tilings``, ``footprint``, ``min_M``,
``_predict``, ``schedule``, and an ``unsupported`` reason of its own).  Registered (the one line a
new module adds to ``attnio/algorithms/__init__.py``; here the registry entry is made for this
test only), it runs through :func:`attnio.run` (compute and count mode, held to the float64
reference and its own closed form), :func:`attnio.plan` and a sweep, with no other edit: the
Schedule protocol (``mapspace``, ``cost``, ``execute``) and the mapper do the rest.

So do a windowed toy (``supports_window = True``: the command line's ``run`` and ``plan
--window``, a windowed sweep and the planner's series take it) and a backward toy (a backward
schedule with a mapspace of its own: ``plan`` scores it, ``run --backward-algorithm`` runs it).
All three are registered through the real path (``register``, ``register_backward``) and
unregistered after each test.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import attnio
from attnio.algorithms import mapper
from attnio.algorithms.base import Algorithm
from attnio.algorithms.flash2_backward import BackwardTiling, Flash2Backward
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
    """The online softmax: fold the scores S of one key block into (m, l, O) (a row whose
    scores are all hidden, -inf so far, stays as it was)."""
    m_new = np.maximum(m, S.max(axis=1))
    safe = np.where(np.isneginf(m_new), 0.0, m_new)  # a row that has seen nothing yet
    c = np.exp(m - safe)
    S -= safe[:, None]
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
                mem.compute(self._update(shape, qb.start, kb.start), S, m, l, Oi, Vj, writes=4)
                mem.free(S, Kj, Vj)
            mem.compute(_normalise, Oi, l, writes=1)
            mem.store(Oi, O, qb)
            mem.free(Qi, Oi, m, l)

    def _update(self, shape: Shape, r0: int, c0: int) -> Callable[..., None]:
        """The online-softmax update of the score tile at rows r0, keys c0 (unmasked here)."""
        return _update


TOY = ToyRows()


def _band_update(r0: int, c0: int, off: int, W: int | None, S: np.ndarray, m: np.ndarray,
                 l: np.ndarray, O: np.ndarray, V: np.ndarray) -> None:
    """:func:`_update` with the scores a query row does not see (keys outside
    [r + off - W + 1, r + off], docs of :mod:`attnio.core.masks`) left out."""
    rows = np.arange(r0, r0 + S.shape[0])[:, None]
    cols = np.arange(c0, c0 + S.shape[1])[None, :]
    hidden = cols > rows + off
    if W is not None:
        hidden |= cols < rows + off - W + 1
    S[hidden] = -np.inf
    _update(S, m, l, O, V)


class ToyBand(ToyRows):
    """The toy's loop for every mask, a sliding window included (``supports_window``): every
    key block is loaded (the count is the unmasked one), the hidden scores masked out."""

    name = "toy_band"
    summary = "a toy: Br query rows against every key block of Bc, the mask applied to the scores"
    supports_window = True

    def unsupported(self, shape: Shape, M: int | None = None) -> str | None:
        return Algorithm.unsupported(self, shape, M)  # every mask but a block mask

    def _update(self, shape: Shape, r0: int, c0: int) -> Callable[..., None]:
        if not shape.causal:
            return _update
        return functools.partial(_band_update, r0, c0, shape.offset, shape.window)


class ToyBackward(Flash2Backward):
    """A backward schedule of its own mapspace: FlashAttention-2's backward restricted to square
    tiles (Br = Bc); its count, footprint and run are that schedule's hooks."""

    name = "toy_backward"
    summary = "a toy: FlashAttention-2's backward with square tiles only"

    def candidate_tilings(self, shape: Shape, M: int) -> list[BackwardTiling]:
        return [t for t in super().candidate_tilings(shape, M) if t.Br == t.Bc] or [
            BackwardTiling(1, 1)]


TOY = ToyRows()
BAND = ToyBand()
TOY_BACKWARD = ToyBackward()


@pytest.fixture
def registered():
    """The toys registered through the real path (:func:`attnio.algorithms.register` and
    :func:`~attnio.algorithms.register_backward`: the one line a new module adds to the
    registry's list), and unregistered after the test."""
    from attnio import algorithms
    from attnio.planner import planner

    added = [algorithms.register(TOY), algorithms.register(BAND)]
    algorithms.register_backward(TOY_BACKWARD)
    planner._plan.cache_clear()
    try:
        yield TOY, BAND, TOY_BACKWARD
    finally:
        for alg in added:
            del algorithms._REGISTRY[alg.name]
        del algorithms._BACKWARDS[TOY_BACKWARD.name]
        planner._plan.cache_clear()


@pytest.fixture
def toy(registered):
    return registered[0]


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


# ----------------------------------------------------------------------------- a windowed toy
def _cli_json(capsys, argv: list[str]) -> dict:
    from attnio.cli import main

    assert main(argv) == 0
    out: dict = json.loads(capsys.readouterr().out)
    return out


def test_a_windowed_schedule_runs_with_no_other_edit(registered):
    shape = Shape.make(48, 8, causal=True, window=9)
    assert mapper.can_run(BAND, shape, 2000) is None
    assert mapper.can_run(TOY, shape, 2000) == "no causal mask support"  # its own reason first
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal((48, 8)) for _ in range(3))
    res = attnio.run("toy_band", Q, K, V, M=2000, causal=True, window=9, check=True)
    ref = attnio.reference.attention(Q, K, V, causal=True, window=9)
    assert np.abs(res.output - ref).max() < 1e-12 and res.max_abs_err < 1e-12
    assert res.io.total == BAND.cost(res.shape, res.tiling).io.total
    assert res.io.total >= res.certificate.best_bound.value


def test_the_cli_runs_and_plans_a_windowed_schedule(registered, capsys):
    from attnio.cli import main

    flags = ["--N", "48", "--d", "8", "--M", "2000", "--causal", "--window", "9", "--json"]
    run = _cli_json(capsys, ["run", "toy_band", *flags, "--count-only"])
    shape = Shape.make(48, 8, causal=True, window=9)
    assert run["algorithm"] == "toy_band" and run["window"] == 9
    assert run["total"] == BAND.cost(shape, BAND.Tiling(**run["tiling"])).io.total
    assert run["total"] >= run["bound"]
    # a schedule without a window refuses it naming the flag, and lists the toy among those that
    # run one (the registry, asked through the mapper); toy_rows gives its own reason
    assert main(["run", "square_tiling", *flags[:-1], "--count-only"]) == 2
    err = capsys.readouterr().err
    assert "--window" in err and "toy_band" in err and "toy_rows" not in err
    assert main(["run", "toy_rows", *flags[:-1], "--count-only"]) == 2
    assert "no causal mask support" in capsys.readouterr().err
    plan = _cli_json(capsys, ["plan", *flags])
    mine = [c for c in plan["candidates"] if c["algorithm"] == "toy_band"]
    assert len(mine) == 1
    assert mine[0]["total"] == BAND.cost(shape, BAND.Tiling(**mine[0]["tiling"])).io.total
    assert {"algorithm": "toy_rows", "reason": "no causal mask support"} in plan["skipped"]


def test_a_windowed_sweep_and_the_plan_series_take_it(registered, tmp_path):
    from attnio.experiments.grid import Grid
    from attnio.experiments.store import ResultsStore
    from attnio.experiments.sweep import run_sweep

    db = tmp_path / "band.sqlite"
    run_sweep(Grid(N=(48,), d=(8,), M=(30, 2000), algorithms=("toy_band", "toy_rows", "plan"),
                   causal=(True,), window=(9,)), db, jobs=1)
    rows = {(r["algorithm"], r["M"]): r for r in ResultsStore(db).rows()}
    assert rows[("toy_band", 2000)]["status"] == "ok"
    band = rows[("toy_band", 2000)]
    assert band["reads"] + band["writes"] == band["predicted_reads"] + band["predicted_writes"]
    assert rows[("toy_band", 30)]["reason"] == f"M=30 < min_M={BAND.min_M(Shape.make(48, 8))} " \
                                               "of toy_band for d=8"
    assert rows[("toy_rows", 2000)]["status"] == "skipped"
    assert "no causal mask support" in rows[("toy_rows", 2000)]["reason"]
    # the plan series: the planner's choice among the registered schedules, the toy scored too
    planned = attnio.plan(48, 8, 2000, causal=True, window=9)
    assert "toy_band" in [c.algorithm for c in planned.candidates]
    row = rows[("plan", 2000)]
    assert row["status"] == "ok"
    assert json.loads(row["tiling"])["schedule"] == planned.chosen.algorithm
    assert row["reads"] + row["writes"] == planned.chosen.predicted.total


# ----------------------------------------------------------------------------- a backward toy
def test_a_backward_schedule_runs_with_no_other_edit(registered, capsys):
    from attnio.runner import BackwardPass

    shape = Shape.make(40, 8, causal=True, window=7)
    p = attnio.plan(40, 8, 3000, causal=True, window=7, backward=True)
    mine = [c for c in p.backward.candidates if c.algorithm == "toy_backward"]
    assert len(mine) == 1 and mine[0].tiling.Br == mine[0].tiling.Bc
    assert mine[0].predicted == TOY_BACKWARD.cost(shape, mine[0].tiling).io
    rng = np.random.default_rng(2)
    Q, K, V, dO = (rng.standard_normal((40, 8)) for _ in range(4))
    res = attnio.run("flash2", Q, K, V, M=3000, causal=True, window=7, grad_output=dO,
                     backward=BackwardPass(algorithm="toy_backward"), check=True)
    assert res.max_abs_grad_err is not None and res.max_abs_grad_err < 1e-10
    assert res.backward_io.total == TOY_BACKWARD.cost(shape, res.backward_tiling).io.total
    run = _cli_json(capsys, ["run", "flash2", "--N", "40", "--d", "8", "--M", "3000", "--causal",
                             "--window", "7", "--backward", "--backward-algorithm",
                             "toy_backward", "--count-only", "--json"])
    b = run["backward"]
    assert b["algorithm"] == "toy_backward" and b["tiling"]["Br"] == b["tiling"]["Bc"]
    assert b["total"] == TOY_BACKWARD.cost(shape, BackwardTiling(**b["tiling"])).io.total


def test_the_toys_are_gone_after_the_test():
    assert not {"toy_rows", "toy_band"} & set(attnio.algorithms.names())
    assert "toy_backward" not in attnio.algorithms.backward_names()
