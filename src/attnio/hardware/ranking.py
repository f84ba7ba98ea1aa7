"""How the oracle's results are ranked, ordered and explained: the tie tolerance, the ranks, the
order among equal times, the resource-by-resource explanation, and :class:`TuneReport` (what
``attnio gpu tune`` prints)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.workload import Shape
from .kernels import KernelConfig
from .model import Score
from .timing import BREAKDOWN

__all__ = ["TIE", "TuneReport", "explain", "ranks"]

#: Relative difference under which two predicted times tie (share a rank).
TIE = 0.01


def need(x: float | None) -> float:
    assert x is not None
    return x


def time_of(s: Score) -> float:
    """The predicted time of a scored (feasible) config."""
    assert s.time_s is not None
    return s.time_s


def preference(c: KernelConfig) -> tuple:
    """The shipped kernels' preferences among equal times: more stages, overlap and warp
    specialization on, P in registers, the larger Bc."""
    return (-c.stages, not c.overlap, not c.ws, c.p != "regs", -c.Bc)


def time_key(time_s: float, c: KernelConfig) -> tuple:
    return (time_s, *preference(c))


def order_key(s: Score) -> tuple:
    """Least time first; among equal times more stages, P in registers and overlap first, as
    real kernels choose.  (Ranks treat times within :data:`TIE` as equal: :func:`ranks`.)"""
    return time_key(time_of(s), s.config)


def explain(named: Score, best: Score) -> str:
    """Why the named kernel's config is slower (or not) than the oracle's, resource by
    resource: the resource whose time differs most, and the limits that shape the choice."""
    if not named.feasible:
        return f"{named.config.short()} is infeasible: {named.why}"
    if named.config == best.config:
        return f"the oracle picks {named.config.label or 'the named kernel'}'s config itself"
    t_named, t_best = time_of(named), time_of(best)
    dt = t_named - t_best
    rel = dt / t_best if t_best else 0.0
    diffs = {r: named.breakdown.get(r, 0.0) - best.breakdown.get(r, 0.0) for r in BREAKDOWN}
    r = max(diffs, key=lambda k: abs(diffs[k]))
    lines = [f"{named.config.short()} ({named.config.label}) is predicted "
             f"{t_named * 1e6:.1f} us, {rel:+.1%} against the oracle's "
             f"{best.config.short()} ({t_best * 1e6:.1f} us)."]
    if abs(rel) < TIE:
        lines.append("Within 1%: the model sees no material difference (they share a rank).")
    words = {"tensor": "tensor-core time", "softmax": "softmax time not hidden behind the GEMMs",
             "step_overhead": "per-step synchronisation", "cta": "per-CTA prologue and epilogue",
             "tail": "the last wave's tail", "launch": "kernel launches",
             "hbm": "HBM bandwidth", "l2": "L2 bandwidth", "smem": "shared-memory bandwidth",
             "sm_port": "each SM's L2 port", "latency": "load latency the stages do not hide"}
    lines.append(
        f"Largest difference: {words[r]}, {named.breakdown.get(r, 0.0) * 1e6:.1f} us vs "
        f"{best.breakdown.get(r, 0.0) * 1e6:.1f} us (named kernel bound by {named.bound_by}, "
        f"oracle by {best.bound_by}; waves {named.waves} vs {best.waves}).")
    if r == "tensor" and named.flops and best.flops and named.flops != best.flops:
        why = ("tile padding at the sequence end and on the causal diagonal"
               if named.shape.causal else "tile padding at the sequence end")
        lines.append(f"Executed tensor FLOPs differ ({named.flops:.3g} vs {best.flops:.3g}): "
                     f"{why}.")
    elif r == "tensor":
        lines.append("Same FLOPs: the wgmma instruction shape (N = Bc) and the resident warps "
                     "set the sustained rate.")
    if r == "hbm":
        lines.append(f"HBM bytes {named.hbm_bytes:,} vs {best.hbm_bytes:,} (compulsory "
                     f"{best.compulsory_bytes:,}).")
    lines.append(f"Limits: named {named.smem_bytes:,}/{named.smem_limit_bytes:,} B shared "
                 f"memory, {named.regs_per_thread}/{named.regs_limit} registers; oracle "
                 f"{best.smem_bytes:,}/{best.smem_limit_bytes:,} B, "
                 f"{best.regs_per_thread}/{best.regs_limit}.")
    return " ".join(lines)


@dataclass
class TuneReport:
    """What :func:`tune_report` found: the best configs (scored), the named kernel's config
    scored and ranked among the feasible ones, and why the two differ.  ``str()`` gives the
    table ``attnio gpu tune`` prints."""

    device: str
    shape: Shape
    algorithm: str
    dtype: str
    best: list[Score]
    named: Score | None
    named_rank: int | None          # 1 = best; configs within TIE share a rank
    feasible: int
    searched: int
    replays: int
    exhausted: bool                 # False: stopped at max_replays (ranks past it by bound)
    why: str | None
    seconds: float
    bounds: list[tuple[float, KernelConfig]] = field(default_factory=list, repr=False)

    def json(self) -> dict[str, Any]:
        """``attnio gpu tune --json``: ``{"top": [...], "named": {..., "rank": k}, "why":
        ...}``; each entry is a score's JSON (``time_s``, the additive ``breakdown_s``) with
        its ``rank`` (configs within :data:`TIE` share one)."""
        top = []
        for r, s in zip(ranks(self.best), self.best):
            top.append({**s.to_dict(), "rank": r})
        named = None
        if self.named is not None:
            named = {**self.named.to_dict(), "rank": self.named_rank}
        return {"top": top, "named": named, "why": self.why, "splits": self.splits(),
                "device": self.device,
                "workload": self.shape.describe(), "algorithm": self.algorithm,
                "dtype": self.dtype, "feasible": self.feasible, "searched": self.searched,
                "exhausted": self.exhausted}

    def splits(self) -> dict[str, Any] | None:
        """The KV split count the model's best config uses next to flash-attn's
        ``num_splits`` heuristic (the named kernel's config), with their times; None when
        neither splits."""
        if not self.best or self.named is None or not self.named.feasible:
            return None
        b, n = self.best[0], self.named
        if b.config.splits == 1 and n.config.splits == 1:
            return None
        return {"model": b.config.splits, "model_time_s": b.time_s,
                "heuristic": n.config.splits, "heuristic_time_s": n.time_s}

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "workload": self.shape.describe(),
                "algorithm": self.algorithm, "dtype": self.dtype,
                "best": [s.to_dict() for s in self.best],
                "named": None if self.named is None else self.named.to_dict(),
                "named_rank": self.named_rank, "feasible": self.feasible,
                "searched": self.searched, "replays": self.replays,
                "exhausted": self.exhausted, "why": self.why, "seconds": self.seconds}

    def __str__(self) -> str:
        head = (f"{self.device}  {self.shape.describe()}  {self.dtype}  family "
                f"{self.algorithm}: {self.feasible:,} feasible of {self.searched:,} configs, "
                f"{self.replays} L2 replays, {self.seconds:.2f} s")
        if not self.exhausted:
            head += (" (replay budget spent: the ranks past it are estimates from the bounds or "
                     "short replays)")
        lines = [head]
        lines += [f"  {r:>2}. {s.line()}" for r, s in zip(ranks(self.best), self.best)]
        if self.named is not None:
            rank = (f"rank {self.named_rank} of {self.feasible:,}" if self.named_rank
                    else "infeasible")
            lines.append(f"  named: {self.named.line()}  [{rank}]")
            sp = self.splits()
            if sp is not None:
                lines.append(f"  KV splits: the model's best {sp['model']} "
                             f"({sp['model_time_s'] * 1e6:.1f} us); flash-attn's num_splits "
                             f"heuristic {sp['heuristic']} ({sp['heuristic_time_s'] * 1e6:.1f} "
                             "us)")
            lines.append(f"  why: {self.why}")
        return "\n".join(lines)

    __repr__ = __str__


def ranks(scores: list[Score]) -> list[int]:
    """Ranks of scored configs: configs whose times are within :data:`TIE` of each other share
    a rank (and so, transitively, does a chain of them); a rank is 1 + the configs in faster
    groups."""
    ts = [time_of(s) for s in scores]
    order = sorted(range(len(ts)), key=lambda i: ts[i])
    out = [0] * len(ts)
    rank, prev = 1, None
    for pos, i in enumerate(order):
        if prev is not None and ts[i] > prev * (1 + TIE):
            rank = pos + 1
        out[i] = rank
        prev = ts[i]
    return out
