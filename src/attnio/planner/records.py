"""The planner's records, plain data: a :class:`Candidate` (an algorithm's best tiling and its
closed-form count), the :class:`Backward` pass of a plan, and :class:`PlanRecord` (what
:func:`attnio.plan` decided).  The ranking (:mod:`.planner`) makes them; the report
(:mod:`.report`) and the certificate's second search (:mod:`.factors`) read them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..core.memory import IOCount
from ..core.workload import FastMemory, Shape
from ..runner import Certificate

__all__ = ["Backward", "Candidate", "PlanRecord"]


@dataclass(frozen=True)
class Candidate:
    """An algorithm's best tiling for the sizes, and its closed-form count."""

    algorithm: str
    tiling: Any
    predicted: IOCount
    steps: int
    exact: bool = True
    error: float | None = None
    tried: int = 0

    def to_dict(self) -> dict[str, Any]:
        t = (dataclasses.asdict(self.tiling)
             if dataclasses.is_dataclass(self.tiling) and not isinstance(self.tiling, type)
             else self.tiling)
        return {"algorithm": self.algorithm, "tiling": t, "reads": self.predicted.reads,
                "writes": self.predicted.writes, "total": self.predicted.total,
                "steps": self.steps, "exact": self.exact, "error": self.error,
                "tilings_scored": self.tried}


@dataclass(frozen=True)
class Backward:
    """The backward pass of a plan made with ``backward=True``: the least-I/O backward schedule
    (:attr:`algorithm`), its count and tiling, every backward schedule scored (chosen first) or
    skipped, and the backward certificate (best explicit backward bound and the ratio)."""

    predicted: IOCount
    tiling: Any
    algorithm: str = "flash2_backward"
    candidates: tuple[Candidate, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    certificate: Certificate | None = None

    def to_dict(self) -> dict[str, Any]:
        c = self.certificate
        return {"algorithm": self.algorithm, "reads": self.predicted.reads,
                "writes": self.predicted.writes, "total": self.predicted.total, "tiling": dataclasses.asdict(self.tiling),
                "candidates": [x.to_dict() for x in self.candidates],
                "skipped": [{"algorithm": a, "reason": r} for a, r in self.skipped],
                "bounds": [] if c is None else [b.to_dict() for b in c.bounds],
                "best_bound": None if c is None else c.best_bound.to_dict(),
                "ratio": None if c is None else c.ratio}


@dataclass(frozen=True, repr=False)
class PlanRecord:
    """What :func:`attnio.plan` decided, as data: the workload (:attr:`shape`), the fast memory
    (:attr:`memory`), the scored candidates (the chosen one first), the :attr:`certificate` and
    the one-paragraph :attr:`why` (:class:`attnio.planner.Plan` adds running it, its two
    factors and its report)."""

    shape: Shape
    memory: FastMemory
    candidates: tuple[Candidate, ...]
    skipped: tuple[tuple[str, str], ...]
    certificate: Certificate
    why: str
    approx_eps: float | None = None
    backward: Backward | None = None

    # ------------------------------------------------------------------ the chosen schedule
    @property
    def chosen(self) -> Candidate:
        return self.candidates[0]

    @property
    def runner_up(self) -> Candidate | None:
        return self.candidates[1] if len(self.candidates) > 1 else None

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict[str, Any]:
        sh, mem, cert, ch = self.shape, self.memory, self.certificate, self.chosen
        c = ch.to_dict()
        bwd = self.backward
        return {
            "N": sh.Nq, "Nkv": sh.Nkv, "d": sh.d, "M": mem.M, "causal": sh.causal,
            "heads": sh.heads, "batch": sh.batch, "kv_heads": sh.kv_heads,
            "window": sh.window, "causal_align": sh.causal_align if sh.causal else None,
            "backward": None if bwd is None else bwd.to_dict(),
            "device": mem.device, "dtype_bytes": mem.dtype_bytes,
            "approx_eps": self.approx_eps,
            "algorithm": ch.algorithm, "tiling": c["tiling"],
            "reads": ch.predicted.reads, "writes": ch.predicted.writes,
            "total": ch.predicted.total, "error": ch.error,
            "runner_up": self.runner_up.to_dict() if self.runner_up else None,
            "bounds": [b.to_dict() for b in cert.bounds],
            "best_bound": cert.best_bound.to_dict(), "ratio": cert.ratio,
            "regime": cert.regime, "why": self.why,
            "candidates": [x.to_dict() for x in self.candidates],
            "skipped": [{"algorithm": a, "reason": r} for a, r in self.skipped],
        }
