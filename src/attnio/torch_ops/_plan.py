"""The cost guard: what ``poly_attention`` will do on a shape, and what it will cost, before it runs.

:func:`poly_plan` returns a :class:`PolyPlan`: the polynomial (degree, proven relative error), the
feature dimension ``r = C(E+g, g)``, the score radius R, the worst-case rounding term of the
compute dtype, the working memory, and a predicted time for the polynomial method and for
``scaled_dot_product_attention`` on the same shape.  The predictions come from operation counts
(the engine's matmuls, feature products and torch operations; SDPA's two L x S x E products and
the L x S exponentials, halved when causal) times rates measured once per machine, device,
dtype and thread count (:func:`calibration`, about 1 s, cached in memory and in a file under
the user's cache directory, like cuDNN's benchmark mode), or fixed default rates where no
measurement can run (under ``torch.compile`` tracing, on the meta device, or with
``calibrate=False``).  A plan is *slow* when ``r > n`` (the features outnumber the keys: exact
attention is cheaper by construction), when the prediction for the polynomial method exceeds
the one for SDPA, when r exceeds the features the kernel builds, or when its memory exceeds
``memory_limit``; ``poly_attention`` then falls back to SDPA (the default, with a warning),
warns and runs, or refuses (``on_slow``), before anything is allocated.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from ..approx.features import MAX_R_COMPUTE, FeatureMap, feature_dim
from ..approx.poly import PolyApprox, output_error_factor

__all__ = ["MEMORY_LIMIT", "PolyPlan", "SlowApproximationWarning", "calibration", "memory_bytes",
           "predict", "rounding_error", "warn_at_caller"]

ON_SLOW = ("exact", "warn", "error")
# a plan falls back when predicted more than this many times slower than SDPA: the predictions
# err by up to ~25% either way on a shared machine, and inside the margin the two cost about the
# same (on bench_torch.py --cost-grid's 72 shapes this made every clear case right, twice)
SLOW_MARGIN = 1.25
MEMORY_LIMIT = 1 << 30  # bytes of working memory a plan may use by default (beyond q, k, v, out)
_CAL_VERSION = 4  # bump when the engine or the calibration shapes change (invalidates the file)

# seconds per unit of work when nothing can be measured: the order of magnitude calibration()
# found on one core of the development machine (float32, torch 2.13); only the ratio matters to
# the guard
_DEFAULT_RATES = {"poly_feat": 1.2e-9, "poly_mm": 0.35e-9, "poly_op": 5e-6, "poly_call": 5e-4,
                  "poly_causal": 1.5, "sdpa_exp": 2.2e-9, "sdpa_mm": 0.25e-9, "sdpa_call": 3e-5}
_RATES: dict[str, dict[str, float]] = {}
_LAST_TIMES: dict[str, float] = {}  # the last calibration's medians (for inspection)


class SlowApproximationWarning(UserWarning):
    """poly_attention predicts that it is slower than exact attention on this shape."""


@dataclass(frozen=True)
class PolyPlan:
    """What ``poly_attention`` would run on a shape (see :func:`attnio.torch_ops.poly_plan`).

    ``degree``, ``r`` (features per token), ``R`` (scores lie in [-R, R]), ``poly`` (the
    :class:`~attnio.approx.poly.PolyApprox`, with its proven relative error ``poly.bound``),
    ``feature_map``, ``guaranteed_error`` (the polynomial's error per unit of V's column range,
    ``delta/(1-delta)``), ``rounding_error`` (the worst-case floating-point term of the compute
    dtype, per unit of column range: :func:`rounding_error`), ``predicted_s`` and
    ``sdpa_predicted_s`` (seconds, forward), ``memory_bytes`` (working memory beyond q, k, v and
    the output), ``slow`` and ``reason`` (why it is slow, or "").
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
    rounding_error: float = 0.0
    memory_bytes: int = 0

    def __iter__(self):  # the first API returned (poly, feature_map, R)
        return iter((self.poly, self.feature_map, self.R))

    def error_bound(self, v_range: float, v_max: float, unit: float) -> float:
        """The bound on ``|O~ - O|`` in one output column whose V column has range ``v_range``
        and largest magnitude ``v_max``, computed with unit roundoff ``unit``:
        ``(guaranteed_error + rounding_error) * v_range + 4 * unit * v_max``."""
        return (self.guaranteed_error + self.rounding_error) * v_range + 4 * unit * v_max

    def message(self) -> str:
        return (f"poly_attention: degree {self.degree}, r = {self.r:,} features (R = {self.R:.3g}, "
                f"eps = {self.eps:g}); predicted {self.predicted_s:.3g} s against "
                f"{self.sdpa_predicted_s:.3g} s for exact SDPA: {self.reason}. Use exact attention "
                "(on_slow='exact' falls back to it), give a smaller entry_bound (R = scale * "
                "entry_bound^2 * E), or raise eps")


def _blocks_of(n, r, heads, Ev, tile):
    from ._engine import block_rows

    T = block_rows(n, r, heads, Ev + 1, tile, None)
    return T, -(-n // T)


def _work(shape, r, g, causal, tile=64):
    """(feature products, matmul multiply-adds, torch operations) of the engine; (exps,
    multiply-adds) of SDPA; ``shape = (heads, L, S, E, Ev)``."""
    heads, L, S, E, Ev = shape
    rows = L + S
    feat = heads * rows * r
    mm = heads * rows * r * (Ev + 1)
    per_block = g * E + 2 * E + 12  # the level steps, the top degree's products, the rest
    if causal:
        mm += heads * L * tile * (E + Ev + 1 + g)
        T, nb = _blocks_of(L, r, heads, Ev, tile)
        ops = nb * (2 * per_block + T // tile)
    else:
        ops = sum(_blocks_of(n, r, heads, Ev, 1)[1] for n in (L, S)) * per_block
    sdpa_pairs = heads * L * S * (0.5 if causal else 1.0)
    return feat, mm, ops, sdpa_pairs, sdpa_pairs * (E + Ev)


def predict(shape, r, g, causal, rates) -> tuple[float, float]:
    """(engine, SDPA) predicted seconds for ``shape = (heads, L, S, E, Ev)``."""
    feat, mm, ops, pairs, smm = _work(shape, r, g, causal)
    poly = (feat * rates["poly_feat"] + mm * rates["poly_mm"] + ops * rates["poly_op"])
    if causal:  # the chunked form's per-tile products: a factor measured on a causal shape
        poly *= rates["poly_causal"]
    poly += rates["poly_call"]
    sdpa = pairs * rates["sdpa_exp"] + smm * rates["sdpa_mm"] + rates["sdpa_call"]
    return poly, sdpa


def memory_bytes(shape, r, g, causal, itemsize=4, tile=64) -> int:
    """Working memory of the engine beyond q, k, v and the output, in bytes (an estimate made
    before anything is allocated): the feature tables (about 8g + 260 bytes per feature while
    they are built), a block's features and their products (3 T r per head), the r x (Ev+1)
    states (per block when causal: the saved states and the tiles' prefix sums; and, when the
    rows are split between threads, the tiles' state sums that a round of the two-pass scan
    keeps, at most ``_parallel._STORE`` elements, and at least 4 p blocks for p threads)."""
    from ._parallel import _STORE, workers

    heads, L, S, _, Ev = shape
    n = max(L, S)
    T, nb = _blocks_of(L if causal else n, r, heads, Ev, tile if causal else 1)
    p, kept = workers(), 0
    if causal and heads < p:  # rows split between the threads
        nb = max(nb, 4 * p)
        kept = min(heads * r * (Ev + 1) * -(-L // tile), _STORE)
    states = (nb + 2 + (T // tile if causal else 0)) * (Ev + 1)
    return int(r * (8 * g + 260) + itemsize * (heads * r * (3 * T + states) + kept))


def rounding_error(poly: PolyApprox, S: int, r: int, unit: float, tile: int = 64) -> float:
    """The worst-case floating-point term of the output error, per unit of V's column range,
    for sums computed with unit roundoff ``unit`` (float32: 2^-24) on V centred on its column
    midpoints (derived in docs/approximate.md §6): every term ``P(s_ij) v_j`` and ``P(s_ij)``
    is a sum of at most ``m = S + r + 2g + tile + 6`` rounded products and sums of terms whose
    magnitudes add up to at most ``S * sum_j |c_j| R^j`` (the monomials' absolute values), while
    the exact normaliser is at least ``S e^-R (1 - delta)``; so numerator and normaliser are
    each off by at most ``rho = gamma_m e^R sum_j |c_j| R^j`` relative to it
    (``gamma_m = m u / (1 - m u)``) and the ratio by ``2 rho / (1 - delta - rho)``.  Infinite
    when ``rho >= 1 - delta``."""
    g = poly.degree
    m = S + r + 2 * g + tile + 6
    mu = m * unit
    if mu >= 1:
        return math.inf
    gamma = mu / (1 - mu)
    pabs = sum(abs(c) * poly.R ** j for j, c in enumerate(poly.coefficients))
    rho = gamma * math.exp(poly.R) * pabs
    slack = 1 - poly.bound - rho
    return math.inf if slack <= 0 else 2 * rho / slack


def _timed(fn, reps=5):
    """The median of ``reps`` timings after one warm-up (the median: one slow repetition on a
    shared machine moves it less than the minimum or the mean)."""
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _cache_file() -> Path | None:
    """``$ATTNIO_CACHE_DIR/torch_rates.json``, else under ``$XDG_CACHE_HOME`` or ``~/.cache``;
    ``ATTNIO_CACHE_DIR=""`` turns the file off (the rates are then measured once per process)."""
    env = os.environ.get("ATTNIO_CACHE_DIR")
    if env is not None:
        return Path(env) / "torch_rates.json" if env else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnio" / "torch_rates.json"


def _cache_key(torch, device, dtype) -> str:
    import platform

    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else f"{platform.machine()} {platform.processor()} {os.cpu_count()} cpus")
    return "|".join((f"v{_CAL_VERSION}", f"torch {torch.__version__}", device.type, name,
                     str(dtype), f"{torch.get_num_threads()} threads"))


def _read_cache(key):
    path = _cache_file()
    if path is None:
        return None
    try:
        rates = json.loads(path.read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(rates, dict) and all(isinstance(rates.get(n), float) and rates[n] > 0
                                       for n in _DEFAULT_RATES):
        return {n: rates[n] for n in _DEFAULT_RATES}
    return None


def _write_cache(key, rates):
    path = _cache_file()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text())
            data = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            data = {}
        data[key] = rates
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:  # a read-only home: the in-process cache still holds them
        pass


#: The engine :func:`calibration` times (``._core.run``): ``._core`` imports this module, so this
#: module cannot import it; ``._core`` registers it here when it loads (``attnio.torch_ops``'s
#: ``__init__`` loads it, so it is there before any call).
_ENGINE: dict = {}


def register_engine(run) -> None:
    """Record the engine that :func:`calibration` times (called once, by ``._core``)."""
    _ENGINE["run"] = run


def calibration(device=None, dtype=None, *, refresh: bool = False) -> tuple[dict[str, float], bool]:
    """Seconds per unit of work for this device, dtype and thread count, like cuDNN's benchmark
    mode: measured once per machine (a micro-benchmark of about 1 s: two small shapes per
    kernel, two equations in the two rates of each kernel's model, :func:`_work`, the cost of one
    small torch operation and of a call on 16 tokens; all timed interleaved, five rounds,
    medians, so that a change of the machine's load hits every rate alike), then kept in memory and in a file under the user's cache
    directory (:func:`_cache_file`), so that every process on the machine decides the same way.
    ``refresh`` measures again and replaces the cached rates."""
    import torch

    from ._engine import linear_attention
    from ._kernels import PolyKernel

    device = torch.device("cpu") if device is None else torch.device(device)
    dtype = torch.float32 if dtype is None else dtype
    if device.type == "meta" or torch.compiler.is_compiling():
        return dict(_DEFAULT_RATES), False
    key = _cache_key(torch, device, dtype)
    if not refresh:
        if key in _RATES:
            return _RATES[key], True
        cached = _read_cache(key)
        if cached is not None:
            _RATES[key] = cached
            return cached, True
    from ._checks import Inputs, value_stats

    run_engine = _ENGINE["run"]  # registered by ._core when the package loads

    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape):
        return (torch.rand(*shape, generator=g) - 0.5).to(device=device, dtype=dtype)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sd = torch.nn.functional.scaled_dot_product_attention
    n = 2048
    fm = FeatureMap(4, 8, tuple(1.0 / math.factorial(j) for j in range(9)), 0.5)  # r = 495
    kern = PolyKernel(fm, dtype, device)
    x = rnd(64, 64)
    y = torch.empty_like(x)

    def small_ops():
        for _ in range(100):
            torch.mul(x, x, out=y)
        sync()

    q16, k16, v16 = rnd(1, 1, 16, 4), rnd(1, 1, 16, 4), rnd(1, 1, 16, 4)
    inp16 = Inputs(q16, k16, v16, 1, dtype)

    def call16():  # what a poly_attention call costs besides its work: checks, centring, engine
        value_stats(q16, k16, v16)
        run_engine(q16, k16, v16, inp16, lambda qc, kc: kern, None, None)
        sync()

    cases: dict = {}  # name: (work, callable); timed interleaved, so that a change of load hits all
    for E, m in ((8, n), (64, 2 * n)):  # E = 64 at 4,096 rows: K and V beyond a 2 MB cache
        q, k, v = rnd(1, 1, m, E), rnd(1, 1, m, E), rnd(1, 1, m, E)
        cases[f"sdpa{E}"] = (_work((1, m, m, E, E), 1, 1, False)[3:],
                             lambda q=q, k=k, v=v: (sd(q, k, v), sync()))
    for Ev in (1, 128):  # feature-bound and matmul-bound
        q, k, v = rnd(1, 4 * n, 4), rnd(1, 4 * n, 4), rnd(1, 4 * n, Ev)
        cases[f"poly{Ev}"] = (_work((1, 4 * n, 4 * n, 4, Ev), fm.r, 8, False)[:3],
                              lambda q=q, k=k, v=v: (linear_attention(q, k, v, kern, None),
                                                     sync()))
    q, k, v = rnd(1, 2 * n, 4), rnd(1, 2 * n, 4), rnd(1, 2 * n, 32)
    cases["causal"] = (_work((1, 2 * n, 2 * n, 4, 32), fm.r, 8, True)[:3],
                       lambda q=q, k=k, v=v: (linear_attention(q, k, v, kern, 0), sync()))
    cases["ops"] = (None, small_ops)
    cases["call"] = (None, call16)
    cases["sdpa_call"] = (None, lambda: (sd(q16, k16, v16), sync()))
    times: dict[str, list[float]] = {name: [] for name in cases}
    with torch.no_grad():
        for _, f in cases.values():
            f()
        for _ in range(5):
            for name, (_, f) in cases.items():
                t = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - t)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    _LAST_TIMES.clear()
    _LAST_TIMES.update(med)
    op = med["ops"] / 100
    (p1, m1), t1 = cases["sdpa8"][0], med["sdpa8"] - med["sdpa_call"]
    (_, m2), t2 = cases["sdpa64"][0], med["sdpa64"] - med["sdpa_call"]
    mm_rate = max((t2 - t1) / (m2 - m1), 1e-13)
    rates = {"sdpa_mm": mm_rate, "sdpa_exp": max((t1 - m1 * mm_rate) / p1, 1e-13),
             "sdpa_call": max(med["sdpa_call"], 1e-7), "poly_call": max(med["call"], 1e-7)}
    (f1, mm1, o1), (_, mm2, o2) = cases["poly1"][0], cases["poly128"][0]
    t1, t2 = med["poly1"], med["poly128"]
    t1, t2 = max(t1 - o1 * op, t1 / 2), max(t2 - o2 * op, t2 / 2)
    b = max((t2 - t1) / (mm2 - mm1), 1e-13)  # t = f a + mm b (f equal in both)
    a = max((t1 - mm1 * b) / f1, 1e-13)
    fc, mmc, oc = cases["causal"][0]
    rates["poly_causal"] = min(max(med["causal"] / (fc * a + mmc * b + oc * op), 1.0), 20.0)
    rates.update(poly_feat=a, poly_mm=b, poly_op=op)
    _RATES[key] = rates
    _write_cache(key, rates)
    return rates, True


def make_plan(approx: tuple[PolyApprox, FeatureMap, float, float], shape, causal: bool, *,
              device=None, dtype=None, calibrate: bool = True,
              memory_limit: int = MEMORY_LIMIT) -> PolyPlan:
    """A :class:`PolyPlan` for ``shape = (heads, L, S, E, Ev)`` (heads: all leading dims) and
    ``approx = (p, fm, R, eps)`` (the polynomial, its feature map, the score radius and the
    error target), computed in ``dtype`` (None: float32) on ``device``; only numbers are
    computed here (no feature table, no tensor)."""
    p, fm, R, eps = approx
    heads, L, S, E, Ev = shape
    unit, itemsize = 2.0 ** -24, 4
    if dtype is not None:
        import torch

        unit, itemsize = float(torch.finfo(dtype).eps) / 2, 8 if dtype == torch.float64 else 4
    r = feature_dim(E, p.degree)
    rates, measured = calibration(device, dtype) if calibrate else (dict(_DEFAULT_RATES), False)
    pt, st = predict(shape, r, p.degree, causal, rates)
    mem = memory_bytes(shape, r, p.degree, causal, itemsize) if r <= 10 ** 12 else 2 ** 62
    reasons = []
    if r > S:
        reasons.append(f"r = {r:,} features exceed the n = {S:,} keys")
    if pt > SLOW_MARGIN * st:
        reasons.append(f"predicted {pt / st:.3g}x slower than exact attention")
    if r > MAX_R_COMPUTE:
        reasons.append(f"r = {r:,} exceeds the {MAX_R_COMPUTE:,} features the kernel builds")
    if mem > memory_limit:
        reasons.append(f"its working memory, about {mem / 2**20:,.0f} MiB, exceeds "
                       f"memory_limit = {memory_limit / 2**20:,.0f} MiB")
    return PolyPlan(p.degree, r, R, eps, p, fm, output_error_factor(p.bound), pt, st,
                    bool(reasons), "; ".join(reasons), measured,
                    rounding_error(p, S, min(r, 10 ** 15), unit), mem)


_HERE = (str(Path(__file__).resolve().parents[1]) + os.sep,)  # the attnio package


def warn_at_caller(message: str, category) -> None:
    """Warn with the location of the first frame outside attnio and torch (the user's call),
    so that Python's default filter shows each warning once per call site."""
    import torch

    skip = _HERE + (str(Path(torch.__file__).resolve().parent) + os.sep,)
    level = 2
    f: FrameType | None = sys._getframe(1)
    while f is not None and str(Path(f.f_code.co_filename).resolve()).startswith(skip):
        f = f.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def guard(plan: PolyPlan, on_slow: str) -> bool:
    """Apply ``on_slow`` to a slow plan: True to fall back to exact attention."""
    if not plan.slow:
        return False
    if on_slow == "exact":
        warn_at_caller(plan.message() + " (falling back to exact attention: on_slow='exact'; "
                       "on_slow='warn' runs the approximation anyway, 'error' raises)",
                       SlowApproximationWarning)
        return True
    from ..core.errors import ParameterError

    if on_slow == "error":
        raise ParameterError(plan.message() + " (refused: on_slow='error')", param="on_slow")
    if plan.r > MAX_R_COMPUTE or "memory_limit" in plan.reason:
        raise ParameterError(plan.message() + " (refused even with on_slow='warn': it cannot "
                             "run; on_slow='exact' falls back)", param="on_slow")
    warn_at_caller(plan.message() + " (running anyway: on_slow='warn'; on_slow='error' refuses, "
                   "on_slow='exact' falls back)", SlowApproximationWarning)
    return False
