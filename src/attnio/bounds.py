"""Every lower bound on the I/O of attention that attnio knows, as callable functions.

Each function returns a :class:`Bound` and raises :class:`~attnio.errors.ParameterError` (a
``ValueError``) naming the violated precondition when called outside it.  Counts are in words
(reads + writes between slow and fast memory), as the simulator counts them.

``explicit=True`` means the value is a proven lower bound with every constant spelled out, so a
measured count may be compared with it (``tests/test_bounds.py`` holds every exact algorithm to
it).  ``explicit=False`` means an asymptotic statement Ω(f) or Θ(f) reported as ``f`` with
constant 1: it says how the cost scales, never that a count must exceed that number.

The derivations of the explicit bounds are in ``docs/bounds.md``; the short version:

* :func:`trivial`: every input word the output depends on is read, every output word written;
* :func:`standard_matmul_large_cache`: Saha & Ye's Lemma 3.3 argument (dominator sets of
  summation trees), redone on segments of K I/Os: ``Q >= max_K K·(⌈P/T(M+K)⌉ - 1)`` with
  ``T(m) = max(m, ⌊m²/(4d²)⌋)`` score trees finished per segment; about ``N²d²/M - M`` for
  M >= 2d²;
* :func:`standard_matmul_small_cache`: a Loomis–Whitney segment argument that needs no
  reduction to matmul (the scores need not be written): about ``√2·N²d/√M - 4M`` for M << d²;
* :func:`matmul`: the same Loomis–Whitney argument for C = A·B with C written.

>>> b = standard_matmul(4096, 64, 65536)
>>> b.regime, b.explicit, int(b.value)
('large cache (M >= d^2)', False, 1048576)
>>> trivial(4096, 4096, 64).value
1048576
>>> standard_matmul_large_cache(4096, 64, 65536).value >= 4096 ** 2 * 64 ** 2 // 65536 - 2 * 65536
True
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np

from .errors import ParameterError, check_int

__all__ = [
    "Bound",
    "applicable",
    "best",
    "binary_inputs",
    "fast_matmul_field",
    "matmul",
    "matmul_cosma",
    "required_pairs",
    "standard_matmul",
    "standard_matmul_large_cache",
    "standard_matmul_small_cache",
    "trivial",
]

SAHA_YE = "Saha & Ye, arXiv 2402.07443"


@dataclass(frozen=True)
class Bound:
    """A lower bound: its value (words), where it comes from, under which assumptions.

    ``explicit``: a proven bound with explicit constants (safe to compare a count with);
    otherwise an asymptotic form with ``constant`` 1.  ``regime`` names the cache regime when the
    result distinguishes one; ``name`` is the function that produced it.
    """

    value: float
    theorem: str
    assumptions: tuple[str, ...]
    explicit: bool
    name: str = ""
    regime: str = ""
    constant: float | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        return d

    def __str__(self) -> str:
        kind = "explicit" if self.explicit else "asymptotic, constant 1"
        reg = f", {self.regime}" if self.regime else ""
        return f"{self.name} >= {self.value:,.0f} ({self.theorem}; {kind}{reg})"


# ---------------------------------------------------------------- helpers
def _sizes(N, d, M=None, Nkv=None, heads=1):
    N = check_int("N", N, minimum=1)
    d = check_int("d", d, minimum=1)
    Nkv = N if Nkv is None else check_int("Nkv", Nkv, minimum=1)
    heads = check_int("heads", heads, minimum=1)
    if M is None:
        return N, d, Nkv, heads
    return N, d, check_int("M", M, minimum=1), Nkv, heads


def _mask(causal, window=None) -> tuple[str | None, int | None]:
    """(alignment or None, window): ``causal`` is a bool or "bottom_right"/"top_left"."""
    if causal is True or causal == "bottom_right":
        align = "bottom_right"
    elif causal == "top_left":
        align = "top_left"
    elif causal is False:
        align = None
    else:
        raise ParameterError(
            f"causal must be True, False, 'bottom_right' or 'top_left', got {causal!r}")
    if window is not None:
        window = check_int("window", window, minimum=1)
        if align is None:
            raise ParameterError("window needs a causal mask (causal=True)")
    return align, window


@functools.lru_cache(maxsize=4096)
def _rows(Nq: int, Nkv: int, align: str | None, window: int | None) -> tuple[int, ...]:
    """(rows seeing >= 2 keys, their pairs, all visible pairs, K rows needed, V rows needed).

    Row r sees keys [lo_r, hi_r): hi_r = min(Nkv, r + 1 + off), lo_r = max(0, r + off - W + 1)
    (off = Nkv - Nq bottom-right, 0 top-left).  The keys a set of consecutive rows sees form one
    interval, so the K (V) rows needed are the span of the rows that see >= 2 (>= 1) keys.
    """
    if align is None:
        two = Nkv >= 2
        return (Nq if two else 0, Nq * Nkv if two else 0, Nq * Nkv, Nkv if two else 0, Nkv)
    off = Nkv - Nq if align == "bottom_right" else 0
    r = np.arange(Nq, dtype=np.int64)
    hi = np.clip(r + 1 + off, 0, Nkv)
    lo = np.zeros_like(hi) if window is None else np.clip(r + off - window + 1, 0, Nkv)
    v = np.maximum(hi - lo, 0)
    two, one = v >= 2, v >= 1
    span = lambda m: int(hi[m].max() - lo[m].min()) if m.any() else 0  # noqa: E731
    return (int(two.sum()), int(v[two].sum()), int(v.sum()), span(two), span(one))


def _visible(Nq: int, Nkv: int, causal, window=None) -> tuple[int, int, int]:
    """(query rows that see >= 2 keys, their (query, key) pairs, all visible pairs)."""
    return _rows(Nq, Nkv, *_mask(causal, window))[:3]


def required_pairs(Nq: int, Nkv: int, causal=False, window: int | None = None) -> int:
    """Scores S_ij an exact algorithm must compute: visible pairs of rows that see >= 2 keys.

    A row that sees exactly one key outputs that key's value whatever the score, so its score
    need not be computed (and a row that sees none outputs 0).
    """
    Nq = check_int("Nq", Nq, minimum=1)
    Nkv = check_int("Nkv", Nkv, minimum=1)
    return _visible(Nq, Nkv, causal, window)[1]


# A fixed grid of segment lengths K (ratio 2^(1/8)); the same grid for every input keeps every
# explicit bound monotone (each term is monotone in N, d, M for a fixed K).
_KGRID = tuple(sorted({math.ceil(2 ** (j / 8)) for j in range(0, 8 * 64)}))


_KARR = np.array(_KGRID, dtype=float)


def _segment_max(term, approx, limit: int) -> tuple[int, int]:
    """max over the fixed grid of K <= limit of ``term(K)`` (a valid bound for every K).

    ``approx`` evaluates the term in floating point over the whole grid at once to find the best
    few K; the value returned is ``term`` (exact integer arithmetic where it matters) at those.
    """
    n = int(np.searchsorted(_KARR, limit, side="right"))
    if n == 0:
        return 0, 0
    vals = approx(_KARR[:n])
    best, arg = 0, 0
    for i in np.argsort(vals)[-3:]:
        K = _KGRID[int(i)]
        v = max(0, int(term(K)))
        if v > best:
            best, arg = v, K
    return best, arg


# ---------------------------------------------------------------- the bounds
def trivial(Nq: int, Nkv: int, d: int, *, causal=False, heads: int = 1,
            kv_heads: int | None = None, window: int | None = None) -> Bound:
    """Read every input word the output depends on once, write every output word once.

    Unmasked with Nkv >= 2 this is ``(Nq + 2·Nkv)·d + Nq·d`` per head.  Exceptions (exact): a
    query row that sees fewer than two keys outputs a value independent of its query, so its Q row
    need not be read; a key no row with two or more visible keys sees need not be read from K, and
    a key no row sees at all not from V.  ``heads`` query heads share ``kv_heads`` key/value heads
    (grouped-query attention; default ``kv_heads = heads``), so K and V count once per kv head.
    """
    Nq, d, Nkv, heads = _sizes(Nq, d, Nkv=Nkv, heads=heads)
    kv_heads = heads if kv_heads is None else check_int("kv_heads", kv_heads, minimum=1)
    if heads % kv_heads:
        raise ParameterError(f"heads must be a multiple of kv_heads, got {heads} and {kv_heads}")
    rows2, _, _, k_rows, v_rows = _rows(Nq, Nkv, *_mask(causal, window))
    value = heads * (rows2 * d + Nq * d) + kv_heads * (k_rows + v_rows) * d
    return Bound(
        value, "trivial: inputs read once, output written once",
        ("every word of O is written at least once",
         "every input word O depends on (generic inputs) is read at least once"),
        True, name="trivial", regime="any M",
    )


def standard_matmul(N: int, d: int, M: int, *, Nkv: int | None = None, causal=False,
                    heads: int = 1, window: int | None = None) -> Bound:
    """Saha & Ye Theorem 3.1: Θ(min(N²d/√M, N²d²/M)) for attention with standard matmul.

    The large-cache part (M >= d²) is Lemmas 3.3/3.4 (red-blue pebbling, Hong–Kung); the small-cache
    part (M < d²) is Theorem 3.7 (reduction to Hong–Kung's matmul bound, Corollary 6.2, paying N²
    to write QKᵀ).  Reported with constant 1 (asymptotic).  With ``Nkv`` or ``causal`` the N² is
    read as the number of scores that must be computed (derived extension, not the paper's).
    """
    N, d, M, Nkv, heads = _sizes(N, d, M, Nkv, heads)
    P = _visible(N, Nkv, causal, window)[1]
    small, large = P * d / math.sqrt(M), P * d * d / M
    regime = "large cache (M >= d^2)" if M >= d * d else "small cache (M < d^2)"
    assumptions = ["S = QKᵀ computed with the standard algorithm (sums of d products)",
                   "red-blue pebble game, recomputation allowed"]
    if Nkv != N or causal is not False:
        assumptions.append("N² read as the number of scores computed (derived extension)")
    return Bound(heads * min(small, large), f"{SAHA_YE}, Theorem 3.1 (Lemmas 3.3-3.4, Thm 3.7)",
                 tuple(assumptions), False, name="standard_matmul", regime=regime, constant=1.0)


@functools.lru_cache(maxsize=4096)
def _large_cache(P: int, d: int, M: int) -> tuple[int, int]:
    dd4 = 4 * d * d

    def term(K: int) -> int:
        m = M + K
        T = max(m, m * m // dd4)  # score trees a segment can finish (docs/bounds.md, step 4)
        return K * (-(-P // T) - 1)

    def approx(K: np.ndarray) -> np.ndarray:  # the same term in floats, to locate the best K
        m = M + K
        T = np.maximum(m, np.floor(m * m / dd4))
        return K * (np.ceil(P / T) - 1)

    return _segment_max(term, approx, P + 1)


def standard_matmul_large_cache(N: int, d: int, M: int, *, Nkv: int | None = None,
                                causal=False, heads: int = 1,
                                window: int | None = None) -> Bound:
    """Explicit form of Saha & Ye's large-cache bound (Lemma 3.3's argument on I/O segments).

    ``Q >= max_K K·(⌈P/T(M+K)⌉ - 1)`` with ``T(m) = max(m, ⌊m²/(4d²)⌋)``, P the number of scores
    that must be computed (N² unmasked).  With K = M this is at least ``N²d²/M - M`` whenever
    M >= 2d².  Valid for every M (it is tight only for M >= d²).  Derivation: docs/bounds.md.
    """
    N, d, M, Nkv, heads = _sizes(N, d, M, Nkv, heads)
    P = heads * _visible(N, Nkv, causal, window)[1]
    value, K = _large_cache(P, d, M)
    return Bound(
        value, f"derived from {SAHA_YE}, Lemma 3.3 (docs/bounds.md §3)",
        ("each score S_ij is a sum of the d products q_il·k_jl (standard matmul), any order",
         "recomputation allowed; fast memory holds <= M words between operations",
         f"segments of K = {K} I/Os"),
        True, name="standard_matmul_large_cache",
        regime="large cache (M >= d^2)" if M >= d * d else "small cache (M < d^2)",
    )


@functools.lru_cache(maxsize=4096)
def _small_cache(P: int, d: int, M: int) -> tuple[int, int]:
    work = P * d  # products q_il·k_jl that must be computed
    dd = float(d * d)

    def products(K):
        # max over X in [0, M+K] of f(X) = X²/4 · (2M + K - X + X²/(4d²))   (docs/bounds.md §4):
        # at X = M+K or at a root of f'(X) ∝ X·(X²/d² - 3X + 2c) inside the interval
        K = np.asarray(K, dtype=float)
        c, xmax = 2.0 * M + K, M + K
        disc = 9.0 - 8.0 * c / dd
        r = np.sqrt(np.maximum(disc, 0.0))
        f = xmax * xmax / 4.0 * (c - xmax + xmax * xmax / (4 * dd))
        for x in ((3 - r) * dd / 2, (3 + r) * dd / 2):
            ok = (disc >= 0) & (x > 0) & (x < xmax)
            fx = x * x / 4.0 * (c - x + x * x / (4 * dd))
            f = np.where(ok, np.maximum(f, fx), f)
        return np.sqrt(f) * (1 + 1e-12)

    def term(K: int) -> int:
        return K * (math.ceil(work / float(products(K))) - 1)

    def approx(K: np.ndarray) -> np.ndarray:
        return K * (np.ceil(work / products(K)) - 1)

    return _segment_max(term, approx, 2 * work + 2)


def standard_matmul_small_cache(N: int, d: int, M: int, *, Nkv: int | None = None,
                                causal=False, heads: int = 1,
                                window: int | None = None) -> Bound:
    """Explicit small-cache bound, derived (Loomis–Whitney on I/O segments; cf. Theorem 3.7).

    ``Q >= max_K K·(⌈P·d/E(K)⌉ - 1)`` with ``E(K)² = max_{0<=X<=M+K} X²/4·(2M+K-X+X²/(4d²))`` the
    most products a segment of K I/Os can compute; for M << d² this is about ``√2·N²d/√M - 4M``
    (K = 4M).  Unlike Theorem 3.7 it needs no reduction to matmul: a score tree either crosses a
    segment boundary (a word imported or exported) or has all its 2d inputs imported.
    """
    N, d, M, Nkv, heads = _sizes(N, d, M, Nkv, heads)
    P = heads * _visible(N, Nkv, causal, window)[1]
    value, K = _small_cache(P, d, M)
    return Bound(
        value, "derived: Loomis–Whitney segment argument (docs/bounds.md §4; cf. "
        f"{SAHA_YE}, Theorem 3.7)",
        ("each score S_ij is a sum of the d products q_il·k_jl (standard matmul), any order",
         "recomputation allowed; fast memory holds <= M words between operations",
         f"segments of K = {K} I/Os"),
        True, name="standard_matmul_small_cache",
        regime="small cache (M < d^2)" if M < d * d else "large cache (M >= d^2)",
    )


def _is_prime_power(q: int) -> bool:
    p = 2
    while p * p <= q:
        if q % p == 0:
            while q % p == 0:
                q //= p
            return q == 1
        p += 1
    return q >= 2


def fast_matmul_field(N: int, d: int, M: int, q: int, *, heads: int = 1) -> Bound:
    """Saha & Ye Theorem 4.8: Ω(min(N²d²/M, N²)) with any matrix multiplication, Q, K over F_q.

    Precondition: q is a prime power (a finite field F_q exists) and q > N (the Vandermonde
    construction of Lemma 4.7).  Asymptotic; words are field elements, not reals.
    """
    N, d, M, _, heads = _sizes(N, d, M, None, heads)
    if isinstance(q, bool) or not isinstance(q, int):
        raise ParameterError(f"q must be an integer prime power > N={N}, got {q!r}")
    if q <= N:
        raise ParameterError(f"q must be > N (Theorem 4.8 needs a field F_q with q > N={N}), got q={q}")
    if not _is_prime_power(q):
        raise ParameterError(f"q must be a prime power (F_q must be a field), got q={q}")
    value = heads * min(N * N * d * d / M, float(N * N))
    return Bound(value, f"{SAHA_YE}, Theorem 4.8", (
        f"Q, K have entries in the finite field F_q, q = {q} > N", "any matrix multiplication",
        "the algorithm computes every entry of QKᵀ (not necessarily writes it)",
        "I/O counted in field elements"), False, name="fast_matmul_field",
        regime="large cache (M >= d^2)" if M >= d * d else "small cache (M < d^2)", constant=1.0)


def binary_inputs(N: int, d: int, M: int, *, heads: int = 1) -> Bound:
    """Saha & Ye Theorem 4.14: Ω(min(N²d²/(M log²N), N²)) with any matmul, binary Q, K.

    Precondition: N >= 2 (log N > 0; log base 2).  Asymptotic.
    """
    N, d, M, _, heads = _sizes(N, d, M, None, heads)
    if N < 2:
        raise ParameterError(f"N must be >= 2 for Theorem 4.14 (its bound divides by log²N), got N={N}")
    lg = math.log2(N)
    value = heads * min(N * N * d * d / (M * lg * lg), float(N * N))
    return Bound(value, f"{SAHA_YE}, Theorem 4.14", (
        "Q, K in {0, 1}^{N×d}", "any matrix multiplication",
        "the algorithm computes every entry of QKᵀ", "I/O counted in bits"), False,
        name="binary_inputs", regime="large cache (M >= d^2)" if M >= d * d else "small cache (M < d^2)",
        constant=1.0)


@functools.lru_cache(maxsize=4096)
def _matmul_lw(m: int, k: int, n: int, M: int) -> tuple[int, int]:
    work = m * k * n

    def products(K):
        # E(K)² = max_R (M+R)²/4 · (M+K-R): R = (M+2K)/3 when K >= M, else R = K
        K = np.asarray(K, dtype=float)
        R = np.where(K >= M, (M + 2 * K) / 3, K)
        return np.sqrt((M + R) ** 2 / 4 * (M + K - R)) * (1 + 1e-12)

    def term(K: int) -> int:
        return K * (math.ceil(work / float(products(K))) - 1)

    def approx(K: np.ndarray) -> np.ndarray:
        return K * (np.ceil(work / products(K)) - 1)

    return _segment_max(term, approx, 2 * work + 2)


def matmul(m: int, k: int, n: int, M: int) -> Bound:
    """C = A·B (A m×k, B k×n, standard algorithm, C written): explicit, derived.

    ``max(mk + kn + mn, max_K K·(⌈mnk/E(K)⌉ - 1))`` with ``E(K)`` the Loomis–Whitney count of
    products per segment of K I/Os (docs/bounds.md §5); about ``√2·mnk/√M - 4M``.  COSMA's
    Theorem 1 (``2mnk/√M + mn``) is :func:`matmul_cosma`: it is not marked explicit here because
    its statement fails for small k (docs/bounds.md §6 gives a schedule that beats it).
    """
    m = check_int("m", m, minimum=1)
    k = check_int("k", k, minimum=1)
    n = check_int("n", n, minimum=1)
    M = check_int("M", M, minimum=1)
    lw, K = _matmul_lw(m, k, n, M)
    floor = m * k + k * n + m * n
    return Bound(max(lw, floor), "derived: Loomis–Whitney segment argument (docs/bounds.md §5)", (
        "standard algorithm: C_ij is a sum of the k products a_il·b_lj, any order",
        "C must end in slow memory; recomputation allowed",
        f"segments of K = {K} I/Os" if lw > floor else "the input/output floor mk + kn + mn"),
        True, name="matmul", regime="any M")


def matmul_cosma(m: int, k: int, n: int, M: int) -> Bound:
    """COSMA (Kwasniewski et al., SC'19, arXiv 1908.09606) Theorem 1: ``2mnk/√M + mn``.

    Stated for the red-blue pebbling of the classical matmul CDAG with mnk multiplications (no
    recomputation).  Not marked explicit: the statement fails when k is small against √M (e.g.
    m = n = 100, k = 1, M = 100: a schedule with 10,300 I/Os exists, the formula says 12,000;
    docs/bounds.md §6), so it is reported as an asymptotic form.
    """
    m = check_int("m", m, minimum=1)
    k = check_int("k", k, minimum=1)
    n = check_int("n", n, minimum=1)
    M = check_int("M", M, minimum=1)
    return Bound(2.0 * m * n * k / math.sqrt(M) + m * n, "COSMA (arXiv 1908.09606), Theorem 1", (
        "classical matmul CDAG, exactly mnk multiplications (no recomputation)", "C written",
        "fails for small k (docs/bounds.md §6): not used as an explicit bound"), False,
        name="matmul_cosma", regime="any M", constant=1.0)


def applicable(N: int, d: int, M: int, *, Nkv: int | None = None, causal=False,
               heads: int = 1, kv_heads: int | None = None, window: int | None = None,
               q: int | None = None, binary: bool = False) -> list[Bound]:
    """Every attention bound whose preconditions hold for these sizes.

    ``causal`` is False, True / "bottom_right" or "top_left"; ``window`` a sliding window; the
    score-counting bounds hold for grouped-query attention too (a score still needs its query
    row and key row), the trivial bound counts K and V once per ``kv_heads``.  The fast-matmul
    bounds are stated for square, unmasked attention and need their input model: Theorem 4.8
    only when ``q`` (a prime power > N) is given, Theorem 4.14 only when ``binary=True`` (N >= 2).
    """
    N, d, M, Nkv, heads = _sizes(N, d, M, Nkv, heads)
    _mask(causal, window)
    kw = dict(Nkv=Nkv, causal=causal, heads=heads, window=window)
    out = [trivial(N, Nkv, d, causal=causal, heads=heads, kv_heads=kv_heads, window=window),
           standard_matmul_large_cache(N, d, M, **kw),
           standard_matmul_small_cache(N, d, M, **kw),
           standard_matmul(N, d, M, **kw)]
    square = Nkv == N and causal is False
    if q is not None:
        if not square:
            raise ParameterError("q: Theorem 4.8 is stated for square unmasked attention (Nkv = N, "
                                 "causal=False)")
        out.append(fast_matmul_field(N, d, M, q, heads=heads))
    if binary:
        if not square:
            raise ParameterError("binary: Theorem 4.14 is stated for square unmasked attention "
                                 "(Nkv = N, causal=False)")
        out.append(binary_inputs(N, d, M, heads=heads))
    return out


def best(bounds) -> Bound:
    """The largest explicit bound among ``bounds`` (asymptotic ones have no usable constant)."""
    ex = [b for b in bounds if b.explicit]
    if not ex:
        raise ParameterError("best: no explicit bound among the given bounds")
    return max(ex, key=lambda b: b.value)


# The approximate-attention bounds live beside the polynomial method (attnio.approx.bounds); they
# are re-exported here so that every bound is reachable from one module.  Imported last: that
# module builds on Bound above.
from .approx.bounds import (  # noqa: E402
    alman_song_degree,
    approx_trivial,
    approx_w_stationary,
    seth_entry_threshold,
)

__all__ += ["alman_song_degree", "approx_trivial", "approx_w_stationary", "seth_entry_threshold"]
