"""The Schedule protocol on every registered schedule, and the mapper as the one place that
searches and decides "can it run" (issue 33)."""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

from attnio import algorithms as _alg
from attnio.algorithms import mapper
from attnio.algorithms.protocol import NO_BACKWARD, NO_WINDOW, Cost, Mapspace
from attnio.core.workload import Shape

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "attnio"
SCHEDULES = [*_alg.all_algorithms(), *_alg.all_backwards()]
WORKLOADS = [(Shape.make(64, 8), 2000), (Shape.make(50, 16, causal=True), 300),
             (Shape.make(40, 8, Nkv=70, heads=4, kv_heads=2, causal="top_left"), 5000),
             (Shape.make(64, 8, causal=True, window=9), 600)]


@pytest.mark.parametrize("s", SCHEDULES, ids=lambda s: s.name)
def test_every_schedule_declares_every_field_of_its_tiling(s):
    declared = [f.name for f in s.schema()]
    assert declared == [f.name for f in dataclasses.fields(s.Tiling)]
    for f in s.schema():
        assert f.kind in {"int", "float", "str", "bool"}, (s.name, f)
        if f.kind == "int":
            assert f.low is not None and f.low >= 1


@pytest.mark.parametrize("s", SCHEDULES, ids=lambda s: s.name)
def test_mapspace_cost_and_the_mapper_agree(s):
    options = {} if s.exact else {"eps": 1e-3, "entry_bound": 1.0}
    for shape, M in WORKLOADS:
        space = s.mapspace(shape, M, **options)
        assert isinstance(space, Mapspace) and space.schedule == s.name
        assert space.unsupported == mapper.can_run(s, shape, M)
        found = mapper.search(s, shape, M, **options)
        if space.unsupported is not None:
            assert found is None and list(space.tilings()) == []
            continue
        assert found is not None
        cost = s.cost(shape, found.tiling)
        assert isinstance(cost, Cost)
        assert (cost.io, cost.steps) == (found.predicted, found.steps)
        assert cost.footprint <= M
        assert (cost.error is None) == s.exact


def test_can_run_names_the_mask_the_pass_and_the_least_M():
    square, flash2 = _alg.get("square_tiling"), _alg.get("flash2")
    windowed = Shape.make(64, 8, causal=True, window=9)
    assert mapper.can_run(square, windowed, 10**6) == NO_WINDOW
    assert mapper.can_run(square, windowed) == NO_WINDOW  # no M: the workload alone
    assert mapper.can_run(_alg.get("standard"), Shape.make(64, 8), 10**6,
                          backward=True) == NO_BACKWARD
    shape = Shape.make(64, 8)
    assert mapper.can_run(flash2, shape, flash2.min_M(shape) - 1) == \
        f"needs M >= {flash2.min_M(shape):,}"
    assert mapper.can_run(flash2, shape, flash2.min_M(shape)) is None


def test_the_default_tiling_is_the_mappers_choice():
    for alg in _alg.all_algorithms(exact=True):
        for shape, M in WORKLOADS:
            if mapper.can_run(alg, shape, M) is not None:
                continue
            found = mapper.search(alg, shape, M)
            assert found is not None
            t = alg.coerce_tiling(shape, M, None)
            assert alg.cost(shape, t).io.total == found.predicted.total, alg.name


#: ``getattr`` on a tiling outside the algorithms package: the fields a caller may read are the
#: schema's (``mapspace(...).fields``) and the Cost's, never probed.
_TILING_GETATTR = re.compile(r"getattr\(\s*(t|tl|bt|tiling|\w+\.tiling|\w+\.est_tiling)\s*,")


def test_no_caller_probes_a_tiling_field_with_getattr():
    hits = []
    for path in SRC.rglob("*.py"):
        if path.parent.name in {"algorithms", "blocks"}:
            continue  # a schedule (or the blocked matmul) reads its own tiling
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if _TILING_GETATTR.search(line):
                hits.append(f"{path.relative_to(SRC)}:{i}: {line.strip()}")
    assert hits == []


#: "Can it run", decided by hand: a comparison with a ``min_M(...)`` (either side), or a read of a
#: ``supports_*`` flag (an attribute or a ``getattr`` of one); the mapper's ``can_run``,
#: ``needs_M``, ``check_M`` and ``supports`` answer instead.
_BY_HAND = re.compile(r"[<>]=?\s*[\w.]*min_M\(|min_M\([^()]*\)\s*[<>]"
                      r"|\.supports_\w+|getattr\([^,]+,\s*[\"']supports_")
#: Where the answer lives: the base classes' ``unsupported`` (the flags and ``min_M``, what
#: ``can_run`` asks a schedule) and the mapper; and the blocked matmul, no attention schedule.
_DECIDES = {"algorithms/base.py", "algorithms/mapper.py", "blocks/matmul.py"}


def test_only_the_mapper_decides_whether_a_schedule_can_run():
    hits = []
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).as_posix() in _DECIDES:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if _BY_HAND.search(line.split("#")[0]):
                hits.append(f"{path.relative_to(SRC)}:{i}: {line.strip()}")
    assert hits == []


def test_the_guard_catches_a_decision_by_hand():
    for line in ("if M < alg.min_M(shape):", "ok = alg.min_M(s) <= M",
                 "x = cfg.backward and alg.supports_backward", "getattr(a, 'supports_window', 0)"):
        assert _BY_HAND.search(line), line
    for line in ("def min_M(self, shape):", "supports_window = True", "need = a.min_M(shape)",
                 "mapper.can_run(a, shape, M)"):
        assert not _BY_HAND.search(line), line


def test_no_private_name_crosses_schedule_modules():
    """A schedule imports shared helpers from common.py or _kernels.py, never a private name of
    another schedule's module."""
    pat = re.compile(r"^from \.(\w+) import (.+)$")
    hits = []
    for path in (SRC / "algorithms").glob("*.py"):
        for line in path.read_text().splitlines():
            m = pat.match(line)
            if m and m.group(1) not in {"_kernels", "_square_kernels"}:
                names = [n.strip().split(" as ")[0] for n in m.group(2).strip("()").split(",")]
                hits += [f"{path.name}: {line}" for n in names if n.startswith("_")]
    assert hits == []


def test_an_error_target_out_of_reach_is_a_can_run_reason():
    """An approximate schedule's options (its error target) are part of "can it run": the
    planner skips it with the mapper's reason, no exception caught."""
    import attnio

    approx = _alg.get("approx_poly")
    shape = Shape.make(64, 8)
    far = mapper.can_run(approx, shape, 5000, eps=1e-12, entry_bound=50.0)
    assert far is not None and far.startswith("UnreachableError: no degree")
    assert mapper.can_run(approx, shape, 5000, eps=0.1, entry_bound=1.0) is None
    assert mapper.search(approx, shape, 5000, eps=1e-12, entry_bound=50.0) is None
    assert ("approx_poly", far) in attnio.plan(64, 8, 5000, approx_eps=1e-12,
                                               entry_bound=50.0).skipped
    counted = mapper.can_run(approx, shape, 5000, eps=0.1, entry_bound=None)
    assert counted is not None and counted.startswith("ParameterError: ") and "entry bound" in counted
