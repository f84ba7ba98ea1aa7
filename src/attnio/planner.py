"""``attnio.plan``: the least-I/O algorithm and tiling for given sizes, and its distance to the bound.

Like opt_einsum's ``contract_path``: sizes in, a readable report out.  Every registered attention
algorithm is scored with its closed form (``predict_total``) on each of its
``candidate_tilings`` that fits in M; nothing is simulated.  The least predicted I/O wins, ties
broken toward fewer steps (as ``Algorithm.default_tiling`` does) and then registry order.  The
choice is made by predicted I/O alone, never by a rule on M.

>>> p = plan(4096, 64, 65536)
>>> p.algorithm, p.regime
('flash2', 'large cache (M >= d^2)')
>>> p.predicted.total == attnio_run_total(p)
True
>>> p.ratio < 10
True
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from typing import Any

from . import algorithms as _alg
from . import bounds as _bounds
from . import devices as _devices
from .algorithms.base import IOCount, Shape
from .errors import AttnioError, ParameterError, check_int

__all__ = ["Candidate", "Plan", "plan"]

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

    def to_dict(self) -> dict:
        t = dataclasses.asdict(self.tiling) if dataclasses.is_dataclass(self.tiling) else self.tiling
        return {"algorithm": self.algorithm, "tiling": t, "reads": self.predicted.reads,
                "writes": self.predicted.writes, "total": self.predicted.total,
                "steps": self.steps, "exact": self.exact, "error": self.error,
                "tilings_scored": self.tried}


@dataclass(frozen=True, repr=False)
class Plan:
    """What :func:`plan` returns; ``repr`` prints the report."""

    N: int
    Nkv: int
    d: int
    M: int
    causal: bool
    heads: int
    algorithm: str
    tiling: Any
    predicted: IOCount
    runner_up: Candidate | None
    bounds: tuple
    best_bound: _bounds.Bound
    ratio: float | None
    regime: str
    why: str
    candidates: tuple = ()
    skipped: tuple = ()
    error: float | None = None
    dtype_bytes: int | None = None
    device: str | None = None
    approx_eps: float | None = None
    batch: int = 1
    kv_heads: int | None = None
    window: int | None = None
    causal_align: str | None = None
    backward: IOCount | None = None
    backward_tiling: Any = None

    @property
    def shape(self) -> Shape:
        """The problem as :func:`attnio.run` takes it."""
        return Shape(self.N, self.Nkv, self.d, batch=self.batch, heads=self.heads,
                     kv_heads=self.kv_heads, causal_align=self.causal_align or "bottom_right",
                     window=self.window)

    @property
    def chosen(self) -> Candidate:
        return self.candidates[0]

    def to_dict(self) -> dict:
        c = self.chosen.to_dict()
        return {
            "N": self.N, "Nkv": self.Nkv, "d": self.d, "M": self.M, "causal": self.causal,
            "heads": self.heads, "batch": self.batch, "kv_heads": self.kv_heads,
            "window": self.window, "causal_align": self.causal_align,
            "backward": None if self.backward is None else {
                "reads": self.backward.reads, "writes": self.backward.writes,
                "total": self.backward.total,
                "tiling": dataclasses.asdict(self.backward_tiling)},
            "device": self.device, "dtype_bytes": self.dtype_bytes,
            "approx_eps": self.approx_eps,
            "algorithm": self.algorithm, "tiling": c["tiling"],
            "reads": self.predicted.reads, "writes": self.predicted.writes,
            "total": self.predicted.total, "error": self.error,
            "runner_up": self.runner_up.to_dict() if self.runner_up else None,
            "bounds": [b.to_dict() for b in self.bounds],
            "best_bound": self.best_bound.to_dict(), "ratio": self.ratio,
            "regime": self.regime, "why": self.why,
            "candidates": [x.to_dict() for x in self.candidates],
            "skipped": [{"algorithm": a, "reason": r} for a, r in self.skipped],
        }

    def __repr__(self) -> str:
        size = f"N={self.N}" if self.N == self.Nkv else f"Nq={self.N} Nkv={self.Nkv}"
        mem = f"M={self.M:,} words"
        if self.dtype_bytes:
            mem += f" ({self.M * self.dtype_bytes:,} bytes at {self.dtype_bytes} B/word)"
        if self.device:
            mem += f", device {self.device}"
        extra = (f" causal={self.causal_align}" if self.causal else "")
        extra += f" window={self.window}" if self.window else ""
        extra += f" batch={self.batch}" if self.batch > 1 else ""
        extra += f" heads={self.heads}" if self.heads > 1 else ""
        extra += f" kv_heads={self.kv_heads}" if self.kv_heads not in (None, self.heads) else ""
        lines = [
            f"  Plan for attention {size} d={self.d}{extra}, {mem}",
            f"         Algorithm:  {self.algorithm}",
            f"            Tiling:  {self.tiling}",
            f"   Predicted reads:  {self.predicted.reads:,}",
            f"  Predicted writes:  {self.predicted.writes:,}",
            f"   Predicted total:  {self.predicted.total:,} words",
        ]
        if self.backward is not None:
            lines.append(f"  Backward (flash2-style, tiling {self.backward_tiling}): "
                         f"{self.backward.total:,} words; forward above includes the logsumexp")
        if self.dtype_bytes:
            lines.append(f"  Predicted traffic:  {self.predicted.total * self.dtype_bytes:,} bytes")
        if self.error is not None:
            lines.append(f"  Guaranteed error:  {self.error:.3g} (approximate)")
        b = self.best_bound
        scope = "" if self.chosen.exact else "; for exact algorithms only"
        lines.append(f"  Best lower bound:  {b.value:,.0f} ({b.name}, explicit{scope})")
        ratio = f"{self.ratio:.3f}" if self.ratio is not None else "n/a (approximate algorithm)"
        lines.append(f"  Ratio total/bound:  {ratio}")
        lines.append(f"            Regime:  {self.regime}")
        if self.runner_up:
            r = self.runner_up
            pct = 100.0 * (r.predicted.total / self.predicted.total - 1) if self.predicted.total else 0
            lines.append(f"         Runner-up:  {r.algorithm} {r.predicted.total:,} (+{pct:.1f}%)")
        w = max([len(c.algorithm) for c in self.candidates] + [9])
        lines += ["-" * 88,
                  f"{'algorithm':<{w}}  {'reads':>20}  {'writes':>18}  {'total':>20}  {'x best':>7}",
                  "-" * 88]
        for c in self.candidates:
            x = c.predicted.total / self.predicted.total if self.predicted.total else 1.0
            err = "" if c.exact else f"  (approximate, error <= {c.error:.3g})"
            lines.append(f"{c.algorithm:<{w}}  {c.predicted.reads:>20,}  {c.predicted.writes:>18,}"
                         f"  {c.predicted.total:>20,}  {x:>7.3f}{err}")
        for name, reason in self.skipped:
            lines.append(f"{name:<{w}}  (skipped: {reason})")
        lines += ["-" * 88, f"{'bound':<28} {'value':>20}  {'explicit':>8}  theorem", "-" * 88]
        for bd in self.bounds:
            lines.append(f"{bd.name:<28} {bd.value:>20,.0f}  {'yes' if bd.explicit else 'no':>8}"
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


def _approx_tilings_of(alg):
    """``approx_tilings(shape, M, causal, eps, entry_bound)``: a method of the algorithm, or a
    function of the module that defines it."""
    fn = getattr(alg, "approx_tilings", None)
    if fn is None:
        fn = getattr(sys.modules.get(type(alg).__module__), "approx_tilings", None)
    return fn if callable(fn) else None


def _score(alg, shape: Shape, M: int, causal: bool, approx_eps, entry_bound, backward=False):
    """The best (key, Candidate) of one algorithm, or (None, reason)."""
    if shape.window is not None and not alg.supports_window:
        return None, "no sliding-window support"
    if backward and not alg.supports_backward:
        return None, "no backward pass"
    if M < alg.min_M(shape, causal):
        return None, f"needs M >= {alg.min_M(shape, causal):,}"
    if alg.exact:
        tilings = alg.candidate_tilings(shape, M, causal)
    else:
        fn = _approx_tilings_of(alg)
        if fn is None:
            return None, "approximate, without approx_tilings"
        tilings = fn(shape, M, causal, approx_eps, entry_bound)
    best, best_key, tried = None, None, 0
    for t in tilings:
        if alg.footprint(shape, t, causal) > M:
            continue
        tried += 1
        io = alg.predict_total(shape, t, causal)
        key = (io.total, alg.steps(shape, t, causal))
        if best_key is None or key < best_key:
            best, best_key = (t, io), key
    if best is None:
        return None, "no candidate tiling fits in M"
    t, io = best
    if backward:  # the forward also writes the logsumexp; the backward is scored on its own
        bwd = alg.backward
        bt = bwd.coerce_tiling(shape, M, None, causal)
        bio = bwd.predict(shape, bt, causal)
        io = alg.predict_with_lse(shape, t, causal)
        best_key = (io.total + bio.total, best_key[1])
        return best_key, (Candidate(alg.name, t, io, best_key[1], alg.exact, None, tried), bio, bt)
    return best_key, Candidate(alg.name, t, io, best_key[1], alg.exact,
                               None if alg.exact else _error_of(t), tried)


def _why(chosen: Candidate, runner: Candidate | None, n: int, d: int, M: int,
         best_bound, ratio, theta) -> str:
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
        s += (f"The best explicit lower bound ({best_bound.name}) is {best_bound.value:,.0f}, so "
              f"this plan is within {ratio:.2f}x of optimal")
        if theta is not None:
            s += f" (and {theta:.2f}x the Θ-form with constant 1)"
        s += "."
    else:
        s += (f"The chosen algorithm is approximate (guaranteed error {chosen.error}); exact "
              "lower bounds do not apply to it.")
    return s


@functools.lru_cache(maxsize=1024)
def _plan(N, d, M, Nkv, causal, heads, dtype_b, device, approx_eps, entry_bound,
          registry: tuple, batch=1, kv_heads=None, window=None, align=None,
          backward=False) -> Plan:
    # ``registry`` (the registered names) is part of the cache key: registering an algorithm
    # after a call must not return a stale plan
    kv_heads = heads if kv_heads is None else kv_heads
    shape = Shape(N, Nkv, d, batch=batch, heads=heads, kv_heads=kv_heads,
                  causal_align=align or "bottom_right", window=window)
    algs = list(_alg.all_algorithms("attention"))
    if approx_eps is None:  # approximate algorithms only when an error target is given
        algs = [a for a in algs if a.exact]
    scored, skipped = [], []
    for i, alg in enumerate(algs):
        try:
            key, res = _score(alg, shape, M, causal, approx_eps, entry_bound, backward)
        except (AttnioError, ValueError, ArithmeticError) as e:
            # an algorithm that does not support these sizes, this mask or this error target
            key, res = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

        if key is None:
            skipped.append((alg.name, res))
        else:
            scored.append((key + (i,), res))
    if not scored:
        raise ParameterError(f"M={M}: no registered algorithm fits in M words for N={N}, d={d} "
                             f"({'; '.join(f'{a}: {r}' for a, r in skipped)})")
    scored.sort(key=lambda kr: kr[0])
    bwd = bt = None
    if backward:
        _, (_, bwd, bt) = scored[0]
        scored = [(k, c[0]) for k, c in scored]
    cands = tuple(c for _, c in scored)
    chosen = cands[0]
    runner = cands[1] if len(cands) > 1 else None
    bnds = tuple(_bounds.applicable(N, d, M, Nkv=Nkv, causal=(align or False) if causal else False,
                                    heads=batch * heads, kv_heads=batch * kv_heads,
                                    window=window))
    best = _bounds.best(bnds)
    total = chosen.predicted.total
    ratio = total / best.value if chosen.exact and best.value > 0 else None
    theta_b = next(b for b in bnds if b.name == "standard_matmul")
    theta = total / theta_b.value if chosen.exact and theta_b.value > 0 else None
    regime = "large cache (M >= d^2)" if M >= d * d else "small cache (M < d^2)"
    why = _why(chosen, runner, len(cands), d, M, best, ratio, theta)
    if backward:
        why += (f" With the backward pass: the forward writes the logsumexp too, and the backward "
                f"moves {bwd.total:,} more words (tiling {bt}); the bounds above are the "
                "forward's.")
    return Plan(N, Nkv, d, M, causal, heads, chosen.algorithm, chosen.tiling, chosen.predicted,
                runner, bnds, best, ratio, regime, why, cands, tuple(skipped), chosen.error,
                dtype_b, device, approx_eps, batch, kv_heads, window,
                (align if causal else None), bwd, bt)


def plan(N: int, d: int, M: int | None = None, *, Nkv: int | None = None, causal=False,
         heads: int = 1, dtype_bytes: int | str | None = None, device: str | None = None,
         M_bytes: int | None = None, approx_eps: float | None = None,
         entry_bound: float | None = None, batch: int = 1, kv_heads: int | None = None,
         window: int | None = None, backward: bool = False) -> Plan:
    """The least-I/O registered algorithm and tiling for attention of these sizes.

    Give the fast memory as ``M`` (words), ``M_bytes`` (bytes, with ``dtype_bytes``) or
    ``device`` (a preset of :mod:`attnio.devices`, words of ``dtype_bytes``, default 2 = fp16).
    ``batch`` x ``heads`` query heads (``kv_heads`` key/value heads: grouped-query attention,
    default as many as ``heads``); ``causal`` is False, True / "bottom_right" or "top_left";
    ``window`` a sliding window; ``backward=True`` plans forward + backward (algorithms with a
    backward pass only).  With ``approx_eps`` the
    approximate algorithms (``exact=False``) are scored too, through their ``approx_tilings``,
    and the plan reports their guaranteed error; without it only exact algorithms are considered.

    Pure and cached: the same arguments return the same :class:`Plan` object.
    """
    N = check_int("N", N, minimum=1)
    d = check_int("d", d, minimum=1)
    Nkv = N if Nkv is None else check_int("Nkv", Nkv, minimum=1)
    heads = check_int("heads", heads, minimum=1)
    from .runner import causal_mode

    causal, align = causal_mode(causal)
    batch = check_int("batch", batch, minimum=1)
    if kv_heads is not None:
        kv_heads = check_int("kv_heads", kv_heads, minimum=1)
        if heads % kv_heads:
            raise ParameterError(f"heads must be a multiple of kv_heads, got heads={heads} and "
                                 f"kv_heads={kv_heads}")
    if window is not None:
        window = check_int("window", window, minimum=1)
        if not causal:
            raise ParameterError("window needs a causal mask: pass causal=True")
    if not isinstance(backward, bool):
        raise ParameterError(f"backward must be True or False, got {backward!r}")
    given = [n for n, v in (("M", M), ("M_bytes", M_bytes), ("device", device)) if v is not None]
    if len(given) != 1:
        raise ParameterError("give exactly one of M (words), M_bytes (with dtype_bytes) or device, "
                             f"got {', '.join(given) or 'none'}")
    db = None if dtype_bytes is None else _devices.dtype_bytes(dtype_bytes)
    dev_name = None
    if device is not None:
        dev = _devices.get(device)
        dev_name = dev.name
        db = db or 2
        M = dev.words(db)
    elif M_bytes is not None:
        if db is None:
            raise ParameterError("M_bytes needs dtype_bytes (bytes per word, e.g. 2 for fp16)")
        M = _devices.words_for(M_bytes, db)
    M = check_int("M", M, minimum=1)
    if approx_eps is not None:
        if isinstance(approx_eps, bool) or not isinstance(approx_eps, (int, float)) or not (
                0 < approx_eps < 1):
            raise ParameterError(f"approx_eps must be a number in (0, 1), got {approx_eps!r}")
        approx_eps = float(approx_eps)
    if entry_bound is not None:
        try:
            entry_bound = float(entry_bound)
        except (TypeError, ValueError):
            entry_bound = float("nan")
        if not (entry_bound > 0 and entry_bound < float("inf")):
            raise ParameterError(f"entry_bound must be a finite real number > 0, got {entry_bound}")
        if approx_eps is None:
            raise ParameterError("entry_bound applies to approximate attention: give approx_eps "
                                 "(CLI: --eps) too")
    return _plan(N, d, M, Nkv, causal, heads, db, dev_name, approx_eps, entry_bound,
                 tuple(_alg.names(None)), batch, kv_heads, window, align, backward)


def attnio_run_total(p: Plan) -> int:
    """Simulate the plan in count mode and return the total I/O (used by the doctest)."""
    from .runner import run

    return run(p.algorithm, shape=p.shape, M=p.M, mode="count",
               causal=(p.causal_align if p.causal else False), window=p.window,
               tiling=p.tiling).io.total
