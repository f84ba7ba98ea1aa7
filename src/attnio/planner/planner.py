"""``attnio.plan``: the least-I/O algorithm and tiling for given sizes, and its distance to the bound.

Like opt_einsum's ``contract_path``: sizes in, a readable report out.  Every registered attention
algorithm is scored with its closed form on each of its candidate tilings that fits in M
(:meth:`Algorithm.search <attnio.algorithms.base.Algorithm.search>`, the same loop that picks a
default tiling); nothing is simulated.  The least predicted I/O wins, ties broken toward fewer
steps and then registry order.  The choice is made by predicted I/O alone, never by a rule on M.

>>> import attnio
>>> p = plan(4096, 64, 65536)
>>> p.chosen.algorithm, p.certificate.regime
('q_split', 'large cache (M >= d^2)')
>>> r = p.run()  # count mode: the chosen algorithm and tiling on the planned sizes and M
>>> p.chosen.predicted.total == r.io.total
True
>>> r2 = attnio.run(p.chosen.algorithm, shape=p.shape, M=p.memory.M, tiling=p.chosen.tiling)
>>> r2.io.total == r.io.total
True
>>> p.certificate.ratio < 10
True
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import algorithms as _alg
from .. import bounds as _bounds
from .. import runner as _runner
from ..algorithms import base as _alg_base
from ..algorithms.base import Algorithm
from ..core.blockmask import BlockMask
from ..core.checks import check_bool, check_int, check_real
from ..core.errors import CapacityError, ParameterError
from ..core.memory import IOCount
from ..core.resources import fmt_count
from ..core.workload import MAX_M, FastMemory, Shape
from ..hardware import devices as _devices
from ..runner import BackwardPass, Certificate, Result, certificate

__all__ = ["Backward", "Candidate", "Certificate", "CertificateFactors", "FastMemory", "Plan",
           "backward_plan", "certificate_factors", "plan", "plan_shape"]

_ERROR_FIELDS = ("guaranteed_error", "error", "error_bound", "eps")


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


#: :func:`attnio.run`'s arguments that a plan fixes (:meth:`Plan.run` refuses them).
_PLAN_FIXED = frozenset({"M", "shape", "tiling", "causal", "window", "backward"})


@dataclass(frozen=True, repr=False)
class Plan:
    """What :func:`plan` returns; ``repr`` prints the report.

    Made of the workload (:attr:`shape`), the fast memory (:attr:`memory`), the scored candidates
    (the chosen one first), the :attr:`certificate` and the one-paragraph :attr:`why`.
    """

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

    # ------------------------------------------------------------------ running it
    def run(self, Q: Any = None, K: Any = None, V: Any = None, **options: Any) -> Result:
        """Run the plan it describes, as opt_einsum hands its path to ``contract``.

        Calls :func:`attnio.run` with the chosen algorithm and tiling, the planned fast memory
        and workload (mask included) and, for a plan made with ``backward=True``, the chosen
        backward schedule and its tiling.  Without ``Q, K, V`` it runs in count mode on the
        plan's shape; with them, their sizes must be the plan's (a ParameterError naming
        ``shape`` otherwise) and the output is computed.

        Parameters
        ----------
        Q, K, V : array-like, optional
            The inputs, as :func:`attnio.run` takes them (2-D ``(N, d)`` or 4-D
            ``(batch, heads, N, d)``); omit all three to count only.
        **options
            Any other argument of :func:`attnio.run` that the plan does not fix (``mode``,
            ``scale``, ``grad_output``, ``inputs``, ``check``, ``limits``, ``progress``,
            ``allow_nonfinite``, ``bulk``).

        Returns
        -------
        Result
            The run's counts (equal to the plan's predicted ones), and its output in compute
            mode.

        >>> p = plan(256, 16, 1024)
        >>> p.run().io.total == p.chosen.predicted.total
        True
        """
        fixed = sorted(set(options) & _PLAN_FIXED)
        if fixed:
            raise ParameterError(f"{fixed[0]}= is fixed by the plan: make another plan to change "
                                 "it", param=fixed[0])
        ch, bwd = self.chosen, self.backward
        if bwd is not None:
            options.update(backward=BackwardPass(bwd.algorithm, bwd.tiling))
        return _runner.run(ch.algorithm, Q, K, V, M=self.memory.M, shape=self.shape,
                           tiling=ch.tiling, **options)

    # ------------------------------------------------------------------ the certificate in two
    def factors(self, *, cheap: int = 64, budget_s: float | None = None,
                loop_search: bool | None = None,
                progress: Callable[[int, int], None] | None = None) -> CertificateFactors:
        """The certificate split in two factors (:func:`certificate_factors`): the planner's
        count over the best schedule found by any means (``schedule_factor``: slack in the
        planner) and that over the best bound (``bound_factor``: slack in the bound, or in every
        schedule known); their product is :attr:`certificate`'s ratio.  A search, not free
        (tens of milliseconds to about a second; ``budget_s`` caps it): :func:`plan` does not
        run it.

        >>> f = plan(4096, 64, 65536).factors(cheap=8)
        >>> round(f.schedule_factor * f.bound_factor, 9) == round(plan(4096, 64, 65536).certificate.ratio, 9)
        True
        """
        return certificate_factors(self, cheap=cheap, budget_s=budget_s,
                                   loop_search=loop_search, progress=progress)

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

    def __repr__(self) -> str:
        sh, memory, cert, ch = self.shape, self.memory, self.certificate, self.chosen
        size = f"N={sh.Nq}" if sh.Nq == sh.Nkv else f"Nq={sh.Nq} Nkv={sh.Nkv}"
        mem = f"M={memory.M:,} words"
        if memory.dtype_bytes:
            mem += f" ({memory.M * memory.dtype_bytes:,} bytes at {memory.dtype_bytes} B/word)"
        if memory.device:
            mem += f", device {memory.device}"
        extra = (f" causal={sh.causal_align}" if sh.causal else "")
        extra += f" window={sh.window}" if sh.window else ""
        extra += f" batch={sh.batch}" if sh.batch > 1 else ""
        extra += f" heads={sh.heads}" if sh.heads > 1 else ""
        extra += f" kv_heads={sh.kv_heads}" if sh.kv_heads not in (None, sh.heads) else ""
        lines = [
            f"  Plan for attention {size} d={sh.d}{extra}, {mem}",
            f"         Algorithm:  {ch.algorithm}",
            f"            Tiling:  {ch.tiling}",
        ]
        if memory.device and _devices.get(memory.device).kind == "gpu":
            lines.append("                     (the two-level optimum for M = one CTA's shared "
                         "memory; for a GPU's real tile, registers and L2: attnio gpu tune "
                         f"--device {memory.device})")
        lines += [
            f"   Predicted reads:  {ch.predicted.reads:,}",
            f"  Predicted writes:  {ch.predicted.writes:,}",
            f"   Predicted total:  {ch.predicted.total:,} words",
        ]
        bwd = self.backward
        if bwd is not None:
            lines.append(f"          Backward:  {bwd.algorithm} {bwd.tiling}")
            bp = bwd.predicted
            lines.append(f"    Backward total:  {bp.total:,} words (reads {bp.reads:,}, writes "
                         f"{bp.writes:,}); the forward above includes the logsumexp")
            if bwd.certificate is not None:
                bb = bwd.certificate.best_bound
                lines.append(f"    Backward bound:  {fmt_count(bb.value)} ({bb.name}, explicit)")
                br = bwd.certificate.ratio
                br_text = f"{br:.3f}" if br is not None else "n/a"
                lines.append(f"    Backward ratio:  {br_text} (backward total/bound)")
            for c in bwd.candidates[1:]:
                pct = 100.0 * (c.predicted.total / bp.total - 1) if bp.total else 0.0
                lines.append(f"   Backward runner-up:  {c.algorithm} {c.predicted.total:,} "
                             f"(+{pct:.1f}%)")
            for name, reason in bwd.skipped:
                lines.append(f"   Backward skipped:  {name} ({reason})")
        if memory.dtype_bytes:
            lines.append(f"  Predicted traffic:  {ch.predicted.total * memory.dtype_bytes:,} bytes")
        if ch.error is not None:
            lines.append(f"  Guaranteed error:  {ch.error:.3g} (approximate)")
        b = cert.best_bound
        scope = ("" if self.chosen.exact else
                 "; for exact algorithms only" if cert.ratio is None else
                 "; for feature-space algorithms that hold W = phi(K)^T V in fast memory")
        lines.append(f"  Best lower bound:  {fmt_count(b.value)} ({b.name}, explicit{scope})")
        ratio = f"{cert.ratio:.3f}" if cert.ratio is not None else "n/a (approximate algorithm)"
        lines.append(f"  Ratio total/bound:  {ratio}")
        lines.append(f"            Regime:  {cert.regime}")
        if self.runner_up:
            r = self.runner_up
            pct = 100.0 * (r.predicted.total / ch.predicted.total - 1) if ch.predicted.total else 0
            lines.append(f"         Runner-up:  {r.algorithm} {r.predicted.total:,} (+{pct:.1f}%)")
        w = max([len(c.algorithm) for c in self.candidates] + [9])
        lines += ["-" * 88,
                  f"{'algorithm':<{w}}  {'reads':>20}  {'writes':>18}  {'total':>20}  {'x best':>7}",
                  "-" * 88]
        for c in self.candidates:
            x = c.predicted.total / ch.predicted.total if ch.predicted.total else 1.0
            err = "" if c.exact else f"  (approximate, error <= {c.error:.3g})"
            lines.append(f"{c.algorithm:<{w}}  {c.predicted.reads:>20,}  {c.predicted.writes:>18,}"
                         f"  {c.predicted.total:>20,}  {x:>7.3f}{err}")
        for name, reason in self.skipped:
            lines.append(f"{name:<{w}}  (skipped: {reason})")
        lines += ["-" * 88, f"{'bound':<28} {'value':>20}  {'explicit':>8}  theorem", "-" * 88]
        for bd in cert.bounds:
            lines.append(f"{bd.name:<28} {fmt_count(bd.value):>20}  {'yes' if bd.explicit else 'no':>8}"
                         f"  {bd.theorem}")
        lines += ["", "why: " + self.why]
        return "\n".join(lines)

    __str__ = __repr__


def _error_of(tiling: Any) -> float | None:
    for f in _ERROR_FIELDS:
        v = getattr(tiling, f, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _score(alg: Algorithm, shape: Shape, M: int, approx_eps: float | None,
           entry_bound: float | None, backward: bool) -> Candidate | str:
    """An algorithm's best candidate (with the logsumexp when ``backward``), or the reason it
    cannot run."""
    if shape.window is not None and not alg.supports_window:
        return "no sliding-window support"
    if shape.block_mask is not None and not alg.supports_block_mask:
        return "no block-sparse support"
    if backward and not alg.supports_backward:
        return "no backward pass"
    need = alg.min_M(shape)
    if M < need:
        return f"needs M >= {need:,}"
    tilings = alg.planner_tilings(shape, M, eps=approx_eps, entry_bound=entry_bound)
    found = alg.search(shape, M, tilings)
    if found is None:
        return "no candidate tiling fits in M"
    error = None if alg.exact else _error_of(found.tiling)
    io = found.predicted
    if backward:  # the forward also writes the logsumexp the backward reads
        io = alg.predict_with_lse(shape, found.tiling)
    return Candidate(alg.name, found.tiling, io, found.steps, alg.exact, error, found.tried)


_C = TypeVar("_C")


def _ranked(scored: list[tuple[tuple[int, int, int], _C]], skipped: list[tuple[str, str]],
            what: str, shape: Shape, M: int) -> tuple[_C, ...]:
    """The scored candidates, least I/O first (ties: fewer steps, then registration order); a
    ParameterError naming M, with why each ``what`` was skipped, when none fits."""
    if not scored:
        raise ParameterError(f"M={M}: no {what} fits in M words for {shape.describe()} "
                             f"({'; '.join(f'{a}: {r}' for a, r in skipped)})", param="M")
    scored.sort(key=lambda kc: kc[0])
    return tuple(c for _, c in scored)


def backward_plan(shape: Shape, M: int, algorithm: str | None = None) -> Backward:
    """Every registered backward schedule scored by closed form (its least-I/O tiling that fits
    in M), the least-I/O one chosen (ties: fewer steps, then registry order), with the backward
    certificate of :func:`attnio.bounds.backward_applicable_to`.  ``algorithm`` names the one
    schedule to score (a ParameterError naming ``backward_algorithm`` when it cannot run)."""
    scored, skipped = [], []
    schedules = _alg.all_backwards() if algorithm is None else [_alg.get_backward(algorithm)]
    for i, bwd in enumerate(schedules):
        why = bwd.unsupported(shape)
        if why is None and M < bwd.min_M(shape):
            why = f"needs M >= {bwd.min_M(shape):,}"
        found = None if why else bwd.search(shape, M)
        if found is None:
            skipped.append((bwd.name, why or "no candidate tiling fits in M"))
            continue
        t, io = found
        steps = bwd.steps(shape, t)
        scored.append(((io.total, steps, i), Candidate(bwd.name, t, io, steps)))
    if not scored and algorithm is not None:
        raise ParameterError(f"backward_algorithm={schedules[0].name!r} cannot run "
                             f"{shape.describe()} with M={M}: {skipped[0][1]}",
                             param="backward_algorithm")
    cands = _ranked(scored, skipped, "backward schedule", shape, M)
    chosen = cands[0]
    cert = certificate(shape, M, chosen.predicted.total, backward=True)
    return Backward(chosen.predicted, chosen.tiling, chosen.algorithm, cands, tuple(skipped),
                    cert)


def _why(chosen: Candidate, runner: Candidate | None, n: int, d: int, M: int,
         best_bound: _bounds.Bound, ratio: float | None, theta: float | None) -> str:
    dd = d * d
    if M >= dd:
        reg = (f"M = {M:,} >= d² = {dd:,}: the large-cache regime, where Saha & Ye prove "
               "Θ(N²d²/M) (FlashAttention's order) for standard matmul")
    else:
        reg = (f"M = {M:,} < d² = {dd:,}: the small-cache regime, where Saha & Ye prove Θ(N²d/√M) "
               "(square tiling's order) for standard matmul")
    s = (f"{chosen.algorithm} moves the fewest words ({chosen.predicted.total:,}) of the {n} "
         f"algorithm(s) scored, each on its candidate tilings by closed form (chosen by predicted "
         f"I/O, no rule on M)")
    if runner:
        pct = 100.0 * (runner.predicted.total / chosen.predicted.total - 1)
        s += f"; runner-up {runner.algorithm} moves {pct:.1f}% more"
    s += f". {reg}. "
    if ratio is not None:
        s += (f"The best explicit lower bound ({best_bound.name}) is {fmt_count(best_bound.value)}, so "
              f"this plan is within {ratio:.2f}x of optimal")
        if theta is not None:
            s += f" (and {theta:.2f}x the Θ-form with constant 1)"
        s += "."
    else:
        s += (f"The chosen algorithm is approximate (guaranteed error {chosen.error}); exact "
              "lower bounds do not apply to it.")
    return s


@functools.lru_cache(maxsize=1024)
def _plan(shape: Shape, memory: FastMemory, approx_eps: float | None,
          entry_bound: float | None, backward: bool, registry: tuple[str, ...],
          backward_algorithm: str | None = None) -> Plan:
    # ``registry`` (the registered names) is part of the cache key: registering an algorithm
    # after a call must not return a stale plan
    M = memory.M
    algs = _alg.all_algorithms()
    if approx_eps is None:  # approximate algorithms only when an error target is given
        algs = [a for a in algs if a.exact]
    bwd_best = backward_plan(shape, M, backward_algorithm) if backward else None
    scored: list[tuple[tuple[int, int, int], Candidate]] = []
    skipped: list[tuple[str, str]] = []
    for i, alg in enumerate(algs):
        try:
            res = _score(alg, shape, M, approx_eps, entry_bound, backward)
        except (ParameterError, CapacityError) as e:
            # an algorithm that does not support these sizes, this mask or this error target;
            # anything else (a ZeroDivisionError in a closed form, numpy's ValueError) is a bug
            # and surfaces
            res = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if isinstance(res, str):
            skipped.append((alg.name, res))
            continue
        scored.append(((res.predicted.total, res.steps, i), res))
    cands = _ranked(scored, skipped, "registered algorithm", shape, M)
    chosen = cands[0]
    runner = cands[1] if len(cands) > 1 else None
    total = chosen.predicted.total
    cert = certificate(shape, M, total, exact=chosen.exact,
                       features=getattr(chosen.tiling, "r", None))
    theta_b = next((b for b in cert.bounds if b.name == "standard_matmul"), None)
    theta = (total / theta_b.value if chosen.exact and theta_b is not None and theta_b.value > 0
             else None)
    why = _why(chosen, runner, len(cands), shape.d, M, cert.best_bound, cert.ratio, theta)
    if bwd_best is not None:
        bcert = bwd_best.certificate
        assert bcert is not None  # backward_plan always certifies
        bbest = bcert.best_bound
        why += (f" With the backward pass: the forward writes the logsumexp too, and the backward "
                f"schedule {bwd_best.algorithm} moves {bwd_best.predicted.total:,} more words (tiling "
                f"{bwd_best.tiling}), the least of {len(bwd_best.candidates)} backward "
                f"schedule(s) scored; the best explicit backward bound "
                f"({bbest.name}) is {bbest.value:,.0f}")
        if bcert.ratio is not None:
            why += f", so the backward is within {bcert.ratio:.2f}x of optimal"
        why += "; the bounds above are the forward's."
    return Plan(shape, memory, cands, tuple(skipped), cert, why, approx_eps, bwd_best)


@dataclass(frozen=True)
class CertificateFactors:
    """The certificate total/bound split in two (issue 25): the planner's count over the best
    schedule found by any means on that shape (:attr:`schedule_factor`: slack in the planner's
    search), and that over the best explicit bound (:attr:`bound_factor`: slack in the bound or in
    every schedule known).  Their product is the plan's ratio; :attr:`how` says how "any means"
    searched, :attr:`complete` whether the search ran to its end (False: stopped at its time
    budget, the factors then from what was searched)."""

    total: int  #: the planner's predicted count
    best_found: int  #: the least count of any schedule found (<= total)
    best_found_by: str  #: the algorithm that found it ("loop search": attnio.pebble.loops)
    best_found_tiling: Any
    bound: float  #: the best explicit lower bound
    searched: int  #: tilings scored beyond the planner's own candidates
    loop_orders: int = 0  #: schedules of the loop-order search run on the referee (tiny shapes)
    how: str = ""  #: how "any means" searched, in words
    complete: bool = True  #: False when the time budget stopped the search

    @property
    def schedule_factor(self) -> float:
        return self.total / self.best_found if self.best_found else 1.0

    @property
    def bound_factor(self) -> float | None:
        return self.best_found / self.bound if self.bound > 0 else None

    def to_dict(self) -> dict[str, Any]:
        t = self.best_found_tiling
        t = (dataclasses.asdict(t) if dataclasses.is_dataclass(t) and not isinstance(t, type)
             else str(t))
        return {"schedule_factor": self.schedule_factor, "bound_factor": self.bound_factor,
                "total": self.total, "best_found": self.best_found,
                "best_found_by": self.best_found_by, "best_found_tiling": t,
                "bound": self.bound, "tilings_searched": self.searched,
                "loop_orders_searched": self.loop_orders, "how": self.how,
                "complete": self.complete}

    def lines(self) -> list[str]:
        """The two factors in words (``attnio plan`` prints them under the ratio)."""
        bf = self.bound_factor
        where = ("the planner's pick is the best schedule found" if self.best_found == self.total
                 else f"{self.best_found_by} {self.best_found_tiling} moves {self.best_found:,}")
        return [f"    Schedule slack:  {self.schedule_factor:.2f}x (planner total / best schedule "
                f"found by any means: {where})",
                "       Bound slack:  " + ("n/a" if bf is None else f"{bf:.2f}x") +
                " (best schedule found / best lower bound)",
                f"     Searched with:  {self.how}"]

    def __str__(self) -> str:
        bf = self.bound_factor
        return (f"planner {self.total:,} / best found {self.best_found:,} ({self.best_found_by} "
                f"{self.best_found_tiling}) = {self.schedule_factor:.3f}; best found / bound "
                f"{fmt_count(self.bound)} = " + ("n/a" if bf is None else f"{bf:.3f}"))


#: The tile fields the dense search of :func:`certificate_factors` knows how to range over: the
#: query rows, the key rows, the query heads sharing a K/V tile, and a score chunk (whose width
#: moves no word: 1, the least footprint).
_DENSE_FIELDS = frozenset({"Br", "Bc", "group", "Bs"})

#: The loop-order search (:mod:`attnio.pebble.loops`) joins "any means" on its tiny shapes when
#: it has at most this many schedules (``loop_search=None``; about 1 s), always with ``True``.
LOOP_SEARCH_AUTO = 800


def _dense(n: int, cheap: int) -> list[int]:
    """Every size 1..n when n <= ``cheap``, else the sizes of the fewest blocks (⌈n/t⌉ for
    t <= ``cheap``) and a geometric grid of ratio 2^(1/4)."""
    if n <= cheap:
        return list(range(1, n + 1))
    out = {-(-n // t) for t in range(1, cheap + 1)}
    k = 0
    while (v := round(2 ** (k / 4))) <= n:
        out.add(v)
        k += 1
    return sorted(out)


def _dense_groups(alg: Algorithm, shape: Shape, M: int, fields: set[str]) -> list[int]:
    """The query-head groups of the dense search: the divisors of the group whose least tiling
    (every other side 1) fits in M.  The dense algorithms' footprints grow with every side and
    with the group (tests/test_plan_factors.py checks it): the largest group g* whose least
    tiling fits is found by bisection, and the divisors up to it
    (:func:`~attnio.algorithms.base.divisors_upto`, O(min(g*, √group)) steps) are the groups
    with a tiling that fits."""
    def fits(G: int) -> bool:
        return alg.footprint(shape, alg.Tiling(**{f: G if f == "group" else 1
                                                   for f in fields})) <= M

    lo, hi = 0, shape.group  # fits(lo) (or lo = 0), and no group above hi fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return _alg_base.divisors_upto(shape.group, lo)


def _loop_search_fits(shape: Shape, M: int) -> int:
    """How many schedules the loop-order search has for this shape (0: not a shape it covers:
    one head, no mask, Nq, Nkv <= 8, d <= 3)."""
    from ..pebble import loops

    lim = loops.LIMITS
    if (shape.causal or shape.window is not None or shape.block_mask is not None
            or shape.batch * shape.heads != 1 or max(shape.Nq, shape.Nkv) > lim["N"]
            or shape.d > lim["d"] or M > lim["M"]):
        return 0
    return sum(1 for _ in loops.enumerate_schedules(shape.Nq, shape.Nkv, shape.d))


def certificate_factors(p: Plan, *, cheap: int = 64, budget_s: float | None = None,
                        loop_search: bool | None = None,
                        progress: Callable[[int, int], None] | None = None) -> CertificateFactors:
    """The plan's certificate as two factors (docs/bounds.md §13): the planner's count over the
    best schedule found by any means, and that over the best explicit bound.

    "Any means": the least count of the planner's candidates, and a denser search over every
    registered exact algorithm whose tiling is made of query rows ``Br``, key rows ``Bc``, a
    query-head ``group`` and a score chunk ``Bs`` — every size when the axis has at most
    ``cheap`` rows (exhaustive), the fewest-blocks sizes and a 2^(1/4) grid otherwise — scored by
    closed form (every count equals the simulator's); on tiny shapes (one head, no mask,
    Nq, Nkv <= 8, d <= 3) also the exhaustive loop-order search of :mod:`attnio.pebble.loops`
    (every schedule run on the referee): with ``loop_search=None`` when it has at most
    :data:`LOOP_SEARCH_AUTO` schedules, with True always, with False never.  ``budget_s`` stops
    the search after that many seconds (``complete=False``); ``progress(done, total)`` is told
    after each algorithm.  Not cached; the planner does not call it (its cold time is
    unchanged).  None of this applies to an approximate plan (the schedule factor is then 1)."""
    shape, M = p.shape, p.memory.M
    best = (p.chosen.predicted.total, p.chosen.algorithm, p.chosen.tiling)
    searched, n_loops, complete = 0, 0, True
    t0 = time.perf_counter()
    algs_run: list[str] = []
    n_loop = 0
    if p.chosen.exact:
        n_loop = _loop_search_fits(shape, M)
        if loop_search is False or (loop_search is None and n_loop > LOOP_SEARCH_AUTO):
            n_loop = 0
        algs = [a for a in _alg.all_algorithms(exact=True)
                if "Br" in (f := {x.name for x in dataclasses.fields(a.Tiling)})
                and f <= _DENSE_FIELDS]
        total_work = len(algs) + (1 if n_loop else 0)
        for k, alg in enumerate(algs):
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                complete = False
                break
            fields = {f.name for f in dataclasses.fields(alg.Tiling)}
            if (shape.window is not None and not alg.supports_window) or (
                    shape.block_mask is not None and not alg.supports_block_mask):
                continue
            if M < alg.min_M(shape):
                continue
            brs = _dense(shape.Nq, cheap)
            bcs = _dense(shape.Nkv, cheap) if "Bc" in fields else [None]
            tilings = []
            for G in (_dense_groups(alg, shape, M, fields) if "group" in fields else [None]):
                for Br in brs:
                    for Bc in bcs:
                        kw: dict[str, int] = {"Br": Br}
                        if Bc is not None:
                            kw["Bc"] = Bc
                        if G is not None:
                            kw["group"] = G
                        if "Bs" in fields:
                            kw["Bs"] = 1
                        tilings.append(alg.Tiling(**kw))
            found = alg.search(shape, M, tilings)
            algs_run.append(alg.name)
            if progress is not None:
                progress(k + 1, total_work)
            if found is None:
                continue
            searched += found.tried
            if found.predicted.total < best[0]:
                best = (found.predicted.total, alg.name, found.tiling)
        if n_loop and complete:
            from ..pebble import loops

            res = loops.search(shape.Nq, shape.Nkv, shape.d, M)
            n_loops = n_loop
            if res and res[0].io < best[0]:
                best = (res[0].io, "loop search", res[0].schedule.short())
            if progress is not None:
                progress(total_work, total_work)
    if not p.chosen.exact:
        how = "nothing (an approximate plan: exact schedules and bounds do not compare to it)"
    else:
        how = (f"the planner's {len(p.candidates)} candidates; {searched:,} tilings of "
               f"{', '.join(algs_run) or 'no algorithm'} by closed form (every size on axes of "
               f"<= {cheap} rows, the fewest-blocks sizes and a 2^(1/4) grid beyond)")
        if n_loops:
            how += (f"; {n_loops:,} loop orders tried on the simulator (attnio.pebble.loops, "
                    "exhaustive on this tiny shape)")
        if not complete:
            how += f"; stopped at the {budget_s:g} s budget"
    return CertificateFactors(p.chosen.predicted.total, best[0], best[1], best[2],
                              p.certificate.best_bound.value, searched, n_loops, how, complete)


def fast_memory(M: int | None = None, *, M_bytes: int | None = None,
                dtype_bytes: int | str | None = None, device: str | None = None) -> FastMemory:
    """The fast memory from exactly one of ``M`` (words), ``M_bytes`` (with ``dtype_bytes``) or
    ``device`` (a preset of :mod:`attnio.hardware.devices`, words of ``dtype_bytes``, default 2)."""
    given = [n for n, v in (("M", M), ("M_bytes", M_bytes), ("device", device)) if v is not None]
    if len(given) != 1:
        raise ParameterError("give exactly one of M (words), M_bytes (with dtype_bytes) or device, "
                             f"got {', '.join(given) or 'none'}", param="M")
    db = None if dtype_bytes is None else _devices.dtype_bytes(dtype_bytes)
    if device is not None:
        dev = _devices.get(device)
        db = db or 2
        return FastMemory(dev.words(db), db, dev.name)
    if M_bytes is not None:
        if db is None:
            raise ParameterError("M_bytes needs dtype_bytes (bytes per word, e.g. 2 for fp16)",
                                 param="dtype_bytes")
        return FastMemory(_devices.words_for(M_bytes, db), db, None)
    return FastMemory(check_int("M", M, minimum=1, maximum=MAX_M), db, None)


def plan_shape(shape: Shape, memory: FastMemory | int, *, approx_eps: float | None = None,
               entry_bound: float | None = None, backward: bool = False,
               backward_algorithm: str | None = None) -> Plan:
    """:func:`plan` for a :class:`~attnio.core.workload.Shape` (the workload, mask included)."""
    if not isinstance(memory, FastMemory):
        memory = FastMemory(check_int("M", memory, minimum=1, maximum=MAX_M))
    check_bool("backward", backward)
    if backward_algorithm is not None:
        if not backward:
            raise ParameterError("backward_algorithm applies to the backward pass: pass "
                                 "backward=True too", param="backward_algorithm")
        backward_algorithm = _alg.get_backward(backward_algorithm).name
    if approx_eps is not None:
        approx_eps = check_real("approx_eps", approx_eps, lo=0, hi=1, lo_open=True, hi_open=True)
    if entry_bound is not None:
        entry_bound = check_real("entry_bound", entry_bound, lo=0, lo_open=True)
        if approx_eps is None:
            raise ParameterError("entry_bound applies to approximate attention: give approx_eps "
                                 "too", param="entry_bound")
    return _plan(shape, memory, approx_eps, entry_bound, backward, tuple(_alg.names()),
                 backward_algorithm)


def plan(N: int, d: int, M: int | None = None, *, Nkv: int | None = None, causal: object = False,
         heads: int = 1, dtype_bytes: int | str | None = None, device: str | None = None,
         M_bytes: int | None = None, approx_eps: float | None = None,
         entry_bound: float | None = None, batch: int = 1, kv_heads: int | None = None,
         window: int | None = None, backward: bool = False,
         block_mask: BlockMask | None = None, backward_algorithm: str | None = None) -> Plan:
    """The least-I/O registered algorithm and tiling for attention of these sizes.

    Every registered algorithm is scored by closed form on its candidate tilings (nothing is
    simulated).  Pure and cached: the same arguments return the same :class:`Plan` object;
    :meth:`Plan.run` runs it.

    Parameters
    ----------
    N : int
        Query sequence length (and key/value length unless ``Nkv`` is given).
    d : int
        Head dimension.
    M : int, optional
        Fast memory in words; give exactly one of ``M``, ``M_bytes`` or ``device``.
    Nkv : int, optional
        Key/value sequence length (default ``N``).
    causal : bool or str
        False, True / ``"bottom_right"`` or ``"top_left"``.
    heads : int
        Query heads per batch element.
    dtype_bytes : int or str, optional
        Bytes per word (``2`` or ``"fp16"``, ...): with ``M_bytes``, or the word of ``device``
        (default 2).
    device : str, optional
        A preset of :mod:`attnio.hardware.devices`: M is one CTA's shared memory in words.
    M_bytes : int, optional
        Fast memory in bytes (with ``dtype_bytes``).
    approx_eps : float, optional
        An error target in (0, 1): approximate algorithms (``exact=False``) are scored too and
        the plan reports their guaranteed error; without it only exact algorithms are.
    entry_bound : float, optional
        A bound B on the entries of Q and K (with ``approx_eps``).
    batch : int
        Batch size.
    kv_heads : int, optional
        Key/value heads (grouped-query attention; default as many as ``heads``).
    window : int, optional
        A sliding window of W keys per query (with a causal mask).
    backward : bool
        Plan forward + backward: forwards that write the logsumexp, and every registered
        backward schedule, the least-I/O one reported with the backward certificate.
    block_mask : BlockMask, optional
        A block-sparse layout (:class:`~attnio.core.blockmask.BlockMask`).
    backward_algorithm : str, optional
        Score only this backward schedule (with ``backward=True``).

    Returns
    -------
    Plan
        The chosen algorithm and tiling with their predicted count, the runner-up, every scored
        candidate and skipped algorithm, the certificate (bounds, best explicit bound, ratio,
        regime) and a one-paragraph explanation.

    Raises
    ------
    ParameterError
        A parameter outside its range (naming it), or no algorithm fits in M.
    """
    shape = Shape.make(N, d, Nkv=Nkv, batch=batch, heads=heads, kv_heads=kv_heads,
                       causal=causal, window=window, block_mask=block_mask)
    memory = fast_memory(M, M_bytes=M_bytes, dtype_bytes=dtype_bytes, device=device)
    return plan_shape(shape, memory, approx_eps=approx_eps, entry_bound=entry_bound,
                      backward=backward, backward_algorithm=backward_algorithm)
