"""The cost guard: what ``poly_attention`` will do on a shape, and what it will cost, before it runs.

:func:`poly_plan` returns a :class:`PolyPlan`: the polynomial (degree, proven relative error), the
feature dimension ``r = C(E+g, g)``, the score radius R, and a predicted time for the polynomial
method and for ``scaled_dot_product_attention`` on the same shape.  The predictions come from
operation counts (the engine's matmuls and feature products; SDPA's two L x S x E products and
the L x S exponentials, halved when causal) divided by rates measured once per process and device
kind on two small shapes each (:func:`calibration`; about 0.1 s on a CPU), or by fixed default
rates where no measurement can run (under ``torch.compile`` tracing, on the meta device, or with
``calibrate=False``).  A plan is *slow* when ``r > n`` (the features outnumber the keys: exact
attention is cheaper by construction) or when the prediction for the polynomial method exceeds
the one for SDPA; ``poly_attention`` then warns with :class:`SlowApproximationWarning`, refuses,
or falls back to SDPA (``on_slow``), before it computes any feature.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

from ..approx.features import FeatureMap, feature_dim
from ..approx.poly import PolyApprox, output_error_factor

__all__ = ["PolyPlan", "SlowApproximationWarning", "calibration", "predict"]

ON_SLOW = ("warn", "error", "exact")

# seconds per unit of work when nothing can be measured: the order of magnitude calibration()
# found on one core of the development machine (float32, torch 2.13); only the ratio matters to
# the guard
_DEFAULT_RATES = {"poly_feat": 1.2e-9, "poly_mm": 0.35e-9, "sdpa_exp": 2.2e-9, "sdpa_mm": 0.25e-9}
_RATES: dict[tuple, dict[str, float]] = {}


class SlowApproximationWarning(UserWarning):
    """poly_attention predicts that it is slower than exact attention on this shape."""


@dataclass(frozen=True)
class PolyPlan:
    """What ``poly_attention`` would run on a shape (see :func:`attnio.torch_ops.poly_plan`).

    ``degree``, ``r`` (features per token), ``R`` (scores lie in [-R, R]), ``poly`` (the
    :class:`~attnio.approx.poly.PolyApprox`, with its proven relative error ``poly.bound``),
    ``feature_map``, ``guaranteed_error`` (per unit of V's column range), ``predicted_s`` and
    ``sdpa_predicted_s`` (seconds, forward), ``slow`` and ``reason`` (why it is slow, or "").
    """

    degree: int
    r: int
    R: float
    eps: float
    poly: PolyApprox
    feature_map: FeatureMap
    guaranteed_error: float
    predicted_s: float
    sdpa_predicted_s: float
    slow: bool
    reason: str
    calibrated: bool

    def __iter__(self):  # the first API returned (poly, feature_map, R)
        return iter((self.poly, self.feature_map, self.R))

    def message(self) -> str:
        return (f"poly_attention: degree {self.degree}, r = {self.r:,} features (R = {self.R:.3g}, "
                f"eps = {self.eps:g}); predicted {self.predicted_s:.3g} s against "
                f"{self.sdpa_predicted_s:.3g} s for exact SDPA: {self.reason}. Use exact attention "
                "(on_slow='exact' falls back to it), give a smaller entry_bound (R = scale * "
                "entry_bound^2 * E), or raise eps")


def _work(heads, L, S, E, Ev, r, g, causal, tile=64):
    """(feature products, matmul multiply-adds) of the engine; (exps, multiply-adds) of SDPA."""
    rows = L + S
    feat = heads * rows * r
    mm = heads * rows * r * (Ev + 1)
    sdpa_pairs = heads * L * S * (0.5 if causal else 1.0)
    if causal:
        mm += heads * L * tile * (E + Ev + 1 + g)
    return feat, mm, sdpa_pairs, sdpa_pairs * (E + Ev)


def predict(heads, L, S, E, Ev, r, g, causal, rates) -> tuple[float, float]:
    feat, mm, pairs, smm = _work(heads, L, S, E, Ev, r, g, causal)
    poly = feat * rates["poly_feat"] + mm * rates["poly_mm"]
    sdpa = pairs * rates["sdpa_exp"] + smm * rates["sdpa_mm"]
    return poly, sdpa


def _timed(fn, reps=2):
    fn()
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def calibration(device=None, dtype=None) -> tuple[dict[str, float], bool]:
    """Seconds per unit of work for this device kind, dtype and thread count: measured once per
    process (two small shapes per kernel: two equations in the two rates of each kernel's model,
    :func:`_work`); negative solutions from noisy timings are clamped to a tiny positive rate."""
    import torch

    from ._engine import linear_attention
    from ._kernels import PolyKernel

    device = torch.device("cpu") if device is None else torch.device(device)
    dtype = torch.float32 if dtype is None else dtype
    if device.type == "meta" or torch.compiler.is_compiling():
        return dict(_DEFAULT_RATES), False
    key = (device.type, str(dtype), torch.get_num_threads())
    if key in _RATES:
        return _RATES[key], True
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape):
        return (torch.rand(*shape, generator=g) - 0.5).to(device=device, dtype=dtype)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sd = torch.nn.functional.scaled_dot_product_attention
    n = 1024
    pts = []
    for E in (8, 64):
        q, k, v = rnd(1, 1, n, E), rnd(1, 1, n, E), rnd(1, 1, n, E)
        pts.append((_work(1, n, n, E, E, 1, 1, False)[2:], _timed(lambda: (sd(q, k, v), sync()))))
    (p1, m1), t1 = pts[0]
    (_, m2), t2 = pts[1]
    mm_rate = max((t2 - t1) / (m2 - m1), 1e-13)
    rates = {"sdpa_mm": mm_rate, "sdpa_exp": max((t1 - m1 * mm_rate) / p1, 1e-13)}
    fm = FeatureMap(4, 8, tuple(1.0 / math.factorial(j) for j in range(9)), 0.5)  # r = 495
    kern = PolyKernel(fm, dtype, device)
    ppts = []
    for Ev in (1, 32):  # feature-bound and matmul-bound
        q, k, v = rnd(1, 4 * n, 4), rnd(1, 4 * n, 4), rnd(1, 4 * n, Ev)
        ppts.append((_work(1, 4 * n, 4 * n, 4, Ev, fm.r, 8, False)[:2],
                     _timed(lambda: (linear_attention(q, k, v, kern, None), sync()))))
    (f1, mm1), t1 = ppts[0]
    (f2, mm2), t2 = ppts[1]
    b = max((t2 - t1) / (mm2 - mm1), 1e-13)  # t = f a + mm b (f equal in both)
    a = max((t1 - mm1 * b) / f1, 1e-13)
    rates.update(poly_feat=a, poly_mm=b)
    _RATES[key] = rates
    return rates, True


def make_plan(p: PolyApprox, fm: FeatureMap, R: float, eps: float, shape, causal: bool,
              device=None, dtype=None, calibrate: bool = True) -> PolyPlan:
    """A :class:`PolyPlan` for ``shape = (heads, L, S, E, Ev)`` (heads: all leading dims)."""
    heads, L, S, E, Ev = shape
    r = feature_dim(E, p.degree)
    rates, measured = calibration(device, dtype) if calibrate else (dict(_DEFAULT_RATES), False)
    pt, st = predict(heads, L, S, E, Ev, r, p.degree, causal, rates)
    reasons = []
    if r > S:
        reasons.append(f"r = {r:,} features exceed the n = {S:,} keys")
    if pt > st:
        reasons.append(f"predicted {pt / st:.3g}x slower than exact attention")
    return PolyPlan(p.degree, r, R, eps, p, fm, output_error_factor(p.bound), pt, st,
                    bool(reasons), "; ".join(reasons), measured)


def guard(plan: PolyPlan, on_slow: str) -> bool:
    """Apply ``on_slow`` to a slow plan: True to fall back to exact attention."""
    if not plan.slow:
        return False
    if on_slow == "exact":
        return True
    from ..core.errors import ParameterError

    if on_slow == "error":
        raise ParameterError(plan.message() + " (refused: on_slow='error')", param="on_slow")
    warnings.warn(plan.message() + " (on_slow='error' refuses, on_slow='exact' falls back)",
                  SlowApproximationWarning, stacklevel=3)
    return False
