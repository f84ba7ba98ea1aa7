"""``attnio.plan``: the least-I/O algorithm and tiling for given sizes, and its distance to the bound.

Like opt_einsum's ``contract_path``: sizes in, a readable report out.  Every registered attention
algorithm is scored with its closed form on each of its candidate tilings that fits in M
(:func:`attnio.algorithms.mapper.search`, the same loop that picks a default tiling); nothing is
simulated.  The least predicted I/O wins, ties broken toward fewer
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

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .. import algorithms as _alg
from .. import runner as _runner
from ..algorithms import mapper
from ..algorithms.base import Algorithm
from ..core.blockmask import BlockMask
from ..core.checks import check_bool, check_choice, check_int, check_real
from ..core.errors import ParameterError
from ..core.lazy import lazy_names
from ..core.workload import MAX_M, FastMemory, Shape
from ..runner import BackwardPass, Certificate, Result, certificate
from .records import Backward, Candidate, PlanRecord

if TYPE_CHECKING:  # (the factors and the report's wording load on first use, not at import)
    from .factors import CertificateFactors, certificate_factors

__all__ = ["FACTOR_SEARCHES", "Backward", "Candidate", "Certificate", "CertificateFactors",
           "FactoredPlan", "FastMemory", "Plan", "backward_plan", "certificate_factors", "plan",
           "plan_shape", "plan_with_factors"]

__getattr__ = lazy_names(__name__.rpartition(".")[0], {
    "CertificateFactors": ("factors", "CertificateFactors"),
    "certificate_factors": ("factors", "certificate_factors")}, globals())

#: :func:`attnio.run`'s arguments that a plan fixes (:meth:`Plan.run` refuses them).
_PLAN_FIXED = frozenset({"M", "shape", "tiling", "causal", "window", "backward"})


@dataclass(frozen=True, repr=False)
class Plan(PlanRecord):
    """What :func:`plan` returns; ``repr`` prints the report.

    Made of the workload (:attr:`shape`), the fast memory (:attr:`memory`), the scored candidates
    (the chosen one first), the :attr:`certificate` and the one-paragraph :attr:`why`.
    """

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
        from .factors import certificate_factors

        return certificate_factors(self, cheap=cheap, budget_s=budget_s,
                                   loop_search=loop_search, progress=progress)

    def report(self, factors: CertificateFactors | None = None) -> str:
        """The report (:func:`attnio.planner.report.render`); with ``factors`` (:meth:`factors`)
        the certificate's two factors under its ratio."""
        from . import report as _report

        return _report.render(self, factors)

    def __repr__(self) -> str:
        """The report (like opt_einsum's ``PathInfo``): :func:`attnio.planner.report.render`."""
        from . import report as _report

        return _report.render(self)

    __str__ = __repr__


def _score(alg: Algorithm, shape: Shape, M: int, approx_eps: float | None,
           entry_bound: float | None, backward: bool) -> Candidate | str:
    """An algorithm's best candidate (with the logsumexp when ``backward``), or the reason it
    cannot run (the mapper's :func:`~attnio.algorithms.mapper.can_run`)."""
    options: dict[str, Any] = {} if alg.exact else {"eps": approx_eps, "entry_bound": entry_bound}
    why = mapper.can_run(alg, shape, M, backward=backward, **options)
    if why is not None:
        return why
    if (other := alg.covered_by(shape)) is not None:
        return f"the same count as {other} here"
    found = mapper.search(alg, shape, M, **options) if options else mapper.best_of(alg, shape, M)
    if found is None:
        return "no candidate tiling fits in M"
    io, error = found.predicted, None
    if backward or not alg.exact:  # the forward also writes the logsumexp the backward reads
        cost = alg.cost(shape, found.tiling, lse=backward)
        io, error = cost.io, cost.error
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
    schedules = _alg.all_backwards() if algorithm is None else [_alg.get_backward(algorithm)]
    found, skipped = mapper.best_backward(schedules, shape, M)
    scored = [(key, Candidate(bwd.name, c.tiling, c.predicted, c.steps)) for key, bwd, c in found]
    if not scored and algorithm is not None:
        raise ParameterError(f"backward_algorithm={schedules[0].name!r} cannot run "
                             f"{shape.describe()} with M={M}: {skipped[0][1]}",
                             param="backward_algorithm")
    cands = _ranked(scored, skipped, "backward schedule", shape, M)
    chosen = cands[0]
    cert = certificate(shape, M, chosen.predicted.total, backward=True)
    return Backward(chosen.predicted, chosen.tiling, chosen.algorithm, cands, tuple(skipped),
                    cert)


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
        res = _score(alg, shape, M, approx_eps, entry_bound, backward)  # or why it cannot run
        if isinstance(res, str):
            skipped.append((alg.name, res))
            continue
        scored.append(((res.predicted.total, res.steps, i), res))
    cands = _ranked(scored, skipped, "registered algorithm", shape, M)
    chosen = cands[0]
    runner = cands[1] if len(cands) > 1 else None
    total = chosen.predicted.total
    # (an exact schedule has no feature dimension: its Cost's features are None)
    features = (None if chosen.exact
                else _alg.get(chosen.algorithm).cost(shape, chosen.tiling).features)
    cert = certificate(shape, M, total, exact=chosen.exact, features=features)
    from . import report as _report

    why = _report.why(chosen, runner, len(cands), shape.d, M, cert, bwd_best)
    return Plan(shape, memory, cands, tuple(skipped), cert, why, approx_eps, bwd_best)


def fast_memory(M: int | None = None, *, M_bytes: int | None = None,
                dtype_bytes: int | str | None = None, device: str | None = None) -> FastMemory:
    """The fast memory from exactly one of ``M`` (words), ``M_bytes`` (with ``dtype_bytes``) or
    ``device`` (a preset of :mod:`attnio.hardware.devices`, words of ``dtype_bytes``, default 2).

    The one place that turns these into words: ``attnio plan`` and every verb of the command line
    (``--M``, ``--M-bytes --dtype``, ``--device``) call it.  Its errors name the parameters by
    template (:meth:`ParameterError.worded`), so that the command line shows its flags."""
    given = [n for n, v in (("M", M), ("M_bytes", M_bytes), ("device", device)) if v is not None]
    if len(given) != 1:
        got = ", ".join("{" + n + "}" for n in given) or "none"
        raise ParameterError.worded(
            "give exactly one of {M} (words), {M_bytes} (with {dtype_bytes}) or {device}, got "
            + got, param="M")
    from ..hardware import devices as _devices  # (on first use: not at import attnio)

    db = None if dtype_bytes is None else _devices.dtype_bytes(dtype_bytes)
    if device is not None:
        dev = _devices.get(device)
        db = db or 2
        return FastMemory(dev.words(db), db, dev.name)
    if M_bytes is not None:
        if db is None:
            raise ParameterError.worded(
                "{M_bytes} needs {dtype_bytes} (bytes per word, e.g. 2 for fp16)", param="M_bytes")
        words = _devices.words_for(M_bytes, db)
        if words > MAX_M:
            raise ParameterError.worded(
                "{M_bytes} " f"{M_bytes} is {words:.3g} words of {db} bytes, more than the "
                "largest fast memory, 2**60 words", param="M_bytes")
        return FastMemory(words, db, None)
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


#: The searches :func:`plan_with_factors` runs for its ``factors`` argument: (cheap, budget_s,
#: loop_search) of :func:`certificate_factors`.  ``"quick"`` (the default of ``attnio plan``):
#: every tile size on axes of at most 16 rows, stopped after 1 s; ``"full"`` (``--factors``): 64
#: rows, no time cap, the loop-order search on tiny shapes.
FACTOR_SEARCHES: dict[str, tuple[int, float | None, bool | None]] = {
    "quick": (16, 1.0, None), "full": (64, None, True)}


@dataclass(frozen=True)
class FactoredPlan:
    """A plan with its certificate's two factors (``attnio plan`` prints it): :attr:`factors` is
    None when not asked for, or when the plan has no ratio to split (an approximate pick, or a
    bound of zero)."""

    plan: Plan
    factors: CertificateFactors | None

    def to_dict(self) -> dict[str, Any]:
        """The plan's :meth:`~attnio.planner.Plan.to_dict` with ``"factors"`` added."""
        out = self.plan.to_dict()
        out["factors"] = None if self.factors is None else self.factors.to_dict()
        return out

    def report(self) -> str:
        """The plan's report with the factors under its ratio (:meth:`Plan.report`)."""
        return self.plan.report(self.factors)


def plan_with_factors(shape: Shape, memory: FastMemory | int, *, approx_eps: float | None = None,
                      entry_bound: float | None = None, backward: bool = False,
                      backward_algorithm: str | None = None, factors: str | None = "quick",
                      progress: Callable[[int, int], None] | None = None) -> FactoredPlan:
    """:func:`~attnio.planner.plan_shape` (the same arguments), then the certificate split in
    two by :meth:`Plan.factors <attnio.planner.Plan.factors>` with the search ``factors`` names
    (:data:`FACTOR_SEARCHES`: ``"quick"``, ``"full"``; None: not split).  The split runs only
    for an exact pick with a ratio; ``progress`` reports its search.

    >>> fp = plan_with_factors(Shape.make(1024, 64), fast_memory(4096), factors="quick")
    >>> fp.factors is not None and fp.report() == fp.plan.report(fp.factors)
    True
    """
    if factors is not None:
        check_choice("factors", factors, FACTOR_SEARCHES)
    p = plan_shape(shape, memory, approx_eps=approx_eps, entry_bound=entry_bound,
                   backward=backward, backward_algorithm=backward_algorithm)
    if factors is None or not p.chosen.exact or p.certificate.ratio is None:
        return FactoredPlan(p, None)
    cheap, budget_s, loop_search = FACTOR_SEARCHES[factors]
    return FactoredPlan(p, p.factors(cheap=cheap, budget_s=budget_s, loop_search=loop_search,
                                     progress=progress))
