"""``attnio.run``: run a registered algorithm on the simulated two-level memory.

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((100, 8)) for _ in range(3))
>>> r = attnio.run("flash2", Q, K, V, M=512)
>>> bool(np.abs(r.output - attnio.reference.attention(Q, K, V)).max() < 1e-12)
True
>>> c = attnio.run("flash2", shape=(100, 8), M=512, mode="count")
>>> (c.io.reads, c.io.writes) == (r.io.reads, r.io.writes)
True

Inputs are ``(N, d)`` matrices or ``(B, H, N, d)`` batches of heads, with K and V of shape
``(B, Hkv, Nkv, d)``, ``H % Hkv == 0`` (grouped-query attention).  In count mode pass
``shape=Shape(Nq=…, Nkv=…, d=…, batch=…, heads=…, kv_heads=…)`` (or ``(N, d)``, ``(Nq, Nkv, d)``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import algorithms as _alg
from .algorithms.base import Algorithm, default_scale
from .core.blockmask import BlockMask
from .core.checks import check_bool, check_choice, check_int, check_real
from .core.errors import ParameterError
from .core.memory import IOStats, Mode, SlowArray, TwoLevelMemory
from .core.progress import ProgressCallback
from .core.resources import (
    COPY_SECONDS_PER_WORD,
    DEFAULT_BUDGET_S,
    FLOPS_PER_SECOND,
    STEP_SECONDS,
    Cost,
    check_cost,
)
from .core.workload import MAX_M, Shape

__all__ = ["DEFAULT_BUDGET_S", "Result", "check_inputs", "check_logits", "estimate",
           "estimate_compute_seconds", "place_inputs", "run"]


@dataclass(frozen=True)
class Result:
    """What a run returns: the output (None in count mode), the counts and the tiling used.

    With ``backward=True``: ``io`` counts the forward pass (which then also writes the logsumexp),
    ``backward_io`` the backward pass (the schedule ``backward_algorithm``), ``grads`` holds
    ``dQ, dK, dV`` (compute mode).
    """

    algorithm: str
    shape: Shape
    M: int
    causal: bool
    tiling: Any
    io: IOStats
    output: np.ndarray | None = None
    mode: str = "compute"
    backward_io: IOStats | None = None
    backward_tiling: Any = None
    grads: dict[str, np.ndarray] | None = None
    backward_algorithm: str | None = None




def _to_numpy(name: str, x: Any) -> tuple[np.ndarray, str | None]:
    """numpy arrays pass; torch tensors are converted (bfloat16 upcast exactly to float32)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch

        dt = str(x.dtype).replace("torch.", "")
        t = x.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.to(torch.float32)
        return t.numpy(), dt
    return np.asarray(x), None


def _as_array(name: str, x: Any, allow_nonfinite: bool = False) -> np.ndarray:
    try:
        a, _ = _to_numpy(name, x)
    except (ValueError, TypeError) as e:
        raise ParameterError(f"{name} must be an array of numbers (N, d), got {type(x).__name__}: "
                             f"{str(e).splitlines()[0]}", param=name) from None
    if a.ndim not in (2, 4):
        raise ParameterError(
            f"{name} must be 2-D (N, d) or 4-D (batch, heads, N, d), got {a.ndim}-D with shape "
            f"{a.shape}", param=name)
    if not np.issubdtype(a.dtype, np.floating):
        raise ParameterError(
            f"{name} must have a floating dtype (float16, bfloat16, float32 or float64), got "
            f"{a.dtype}", param=name)
    if a.shape[-1] == 0:
        raise ParameterError(f"{name} must have head dimension d >= 1, got shape {a.shape}",
                             param=name)
    if a.size == 0:
        raise ParameterError(f"{name} must have every dimension >= 1 (N >= 1), got shape {a.shape}",
                             param=name)
    if not allow_nonfinite:
        bad = ~np.isfinite(a)
        if bad.any():
            pos = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ParameterError(
                f"{name} has a non-finite entry {a[pos]} at index {pos}; entries must be finite "
                "(allow_nonfinite=True propagates them as the reference does)", param=name)
    return a


def estimate_compute_seconds(alg: Algorithm, shape: Shape, tiling: Any) -> tuple[float, int, int]:
    """(seconds, flops, tile steps) a compute-mode run is expected to take, from closed forms."""
    r = getattr(tiling, "r", None)
    if not alg.exact and isinstance(r, int):  # feature-space methods: O(n·r·d), not O(n²·d)
        flops = 4 * shape.n_heads * (shape.Nq + shape.Nkv) * r * shape.d
        # measured: each feature block evaluates the feature map, about 300 ns per feature,
        # row and block (approx_poly on 2 cores, r = 1,287..125,970)
        rb = getattr(tiling, "rb", None) or r
        nb = -(-r // max(1, rb))
        seconds = 3e-7 * nb * r * shape.n_heads * (shape.Nq + shape.Nkv)
        steps = shape.n_heads * max(0, int(alg.steps(shape, tiling)))
        return seconds + flops / FLOPS_PER_SECOND + steps * STEP_SECONDS, flops, steps
    else:
        flops = 4 * shape.n_heads * shape.Nq * shape.Nkv * shape.d
        if shape.causal:
            flops //= 2
    steps = shape.n_heads * max(0, int(alg.steps(shape, tiling)))
    return flops / FLOPS_PER_SECOND + steps * STEP_SECONDS, flops, steps


def estimate(name: str | Algorithm, shape: Any, M: int, *, tiling: Any = None,
             mode: str = "compute", backward: bool = False, itemsize: int = 8,
             inputs: bool = False, backward_schedule: tuple[Any, Any] | None = None) -> Cost:
    """The memory and time :func:`run` would spend, from closed forms (nothing is allocated).

    Compute mode keeps a copy of Q, K, V and O in the simulator's slow memory, the slow
    workspace the schedule writes (at most its writes for one head), and the output;
    ``inputs=True`` adds the inputs themselves (float64), for a caller that has yet to create
    them.  ``backward`` adds the backward pass (``backward_schedule``: the (schedule, tiling) to
    run it with; None: the algorithm's own ``.backward``).  Count mode needs no arrays.
    ``tiling`` is the algorithm's tiling for ``shape`` and ``M`` (None: the default one).
    """
    alg = _alg.get(name)
    shp = Shape.coerce(shape)
    t = tiling if tiling is not None and not isinstance(tiling, (dict, str, int)) else \
        alg.coerce_tiling(shp, check_int("M", M, minimum=1, maximum=MAX_M), tiling)
    if mode == "count":
        if shp.block_mask is None:
            return Cost(0, 0.0, "count mode")
        return _sparse_count_cost(alg, shp, t, backward_schedule if backward else None)
    seconds, _, _ = estimate_compute_seconds(alg, shp, t)
    q = shp.n_heads * shp.Nq * shp.d
    kv = shp.n_kv_heads * shp.Nkv * shp.d
    writes = alg.predict_total(shp, t).writes // max(1, shp.n_heads)
    words = 2 * (q + 2 * kv) + q + writes + 2 * M  # slow copies and O, workspace, output, tiles
    bwd: Any = None
    bt: Any = None
    if backward and backward_schedule is not None:
        bwd, bt = backward_schedule
    elif backward and (own := getattr(alg, "backward", None)) is not None:
        bwd = own
        bt = bwd.coerce_tiling(shp, M, None)
    if bwd is not None:
        words += 2 * (3 * q + 2 * kv) + 2 * shp.n_heads * shp.Nq + writes + bwd.workspace(shp)
        _, flops, _ = estimate_compute_seconds(alg, shp, t)
        bwd_steps = shp.n_heads * max(0, int(bwd.steps(shp, bt)))
        seconds += 2.5 * flops / FLOPS_PER_SECOND + 1.5 * bwd_steps * STEP_SECONDS
    what = "the simulator's slow memory"
    if inputs:
        words += (q + 2 * kv) * (2 if backward else 1)
        what = "the inputs and the simulator's slow memory"
    seconds += words * COPY_SECONDS_PER_WORD  # creating, filling and copying the arrays
    return Cost(int(words) * max(8, int(itemsize)), seconds, what)


def _sparse_count_cost(alg: Algorithm, shp: Shape, t: Any,
                       backward_schedule: tuple[Any, Any] | None) -> Cost:
    """Count mode on a block-sparse layout: the schedule visits its kept tiles one by one (no
    closed-form bulk over an irregular layout) from a map of every tile, built from the layout's
    prefix sums."""
    bm = shp.block_mask
    assert bm is not None
    nbytes = 8 * (bm.Tq + 1) * (bm.Tk + 1)  # the layout's int64 prefix sums
    steps = shp.n_heads * max(0, int(alg.steps(shp, t)))
    tilings = [t]
    if backward_schedule is not None and backward_schedule[0] is not None:
        bwd, bt = backward_schedule
        steps += shp.n_heads * max(0, int(bwd.steps(shp, bt)))
        tilings.append(bt)
    for tl in tilings:  # one boolean (byte) per tile of each map
        nbytes += -(-shp.Nq // max(1, int(getattr(tl, "Br", 1)))) * \
            -(-shp.Nkv // max(1, int(getattr(tl, "Bc", 1))))
    return Cost(int(nbytes), steps * STEP_SECONDS, "the block-sparse tile map and its steps")


def check_logits(data: tuple[np.ndarray, ...], scale: float, dtype: Any) -> None:
    """Refuse inputs whose logits ``scale · q·k`` could overflow the accumulation dtype.

    |q·k| <= ||q||·||k|| bounds every logit; the online softmax subtracts two of them, so the
    bound must stay below an eighth of the dtype's largest value.
    """
    def largest_norm(x: np.ndarray) -> float:  # over rows without a NaN/inf (allow_nonfinite)
        rows = x[np.isfinite(x).all(axis=-1)]
        if rows.size == 0:
            return 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            return float(np.sqrt(np.max(np.sum(np.square(rows, dtype=np.float64), axis=-1))))

    with np.errstate(over="ignore", invalid="ignore"):
        bound = abs(scale) * largest_norm(data[0]) * largest_norm(data[1])
    top = float(np.finfo(np.dtype(dtype)).max) / 8
    if not bound <= top:  # also catches inf and NaN
        raise ParameterError(
            f"scale={scale:g} makes the logits overflow {np.dtype(dtype)}: |scale|·max|q|·max|k| "
            f"= {bound:.3g} > {top:.3g}; use a smaller scale or smaller inputs", param="scale")


def check_inputs(Q: Any, K: Any, V: Any, allow_nonfinite: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Shape]:
    """Validate Q (Nq x d or B x H x Nq x d), K and V; return them and their Shape."""
    Q, K, V = (_as_array(n, x, allow_nonfinite) for n, x in (("Q", Q), ("K", K), ("V", V)))
    if K.shape != V.shape:
        raise ParameterError(f"K and V must have the same shape, got K {K.shape} and V {V.shape}",
                             param="V")
    if Q.ndim != K.ndim:
        raise ParameterError(f"Q and K must both be 2-D or both 4-D, got Q {Q.shape} and K "
                             f"{K.shape}", param="K")
    if Q.shape[-1] != K.shape[-1]:
        raise ParameterError(
            f"Q and K must have the same head dimension d, got Q {Q.shape} and K {K.shape}",
            param="K")
    if Q.ndim == 2:
        return Q, K, V, Shape(Q.shape[0], K.shape[0], Q.shape[1])
    if Q.shape[0] != K.shape[0]:
        raise ParameterError(f"Q and K must have the same batch size, got Q {Q.shape} and K "
                             f"{K.shape}", param="K")
    B, H, Nq, d = Q.shape
    return Q, K, V, Shape(Nq, K.shape[2], d, batch=B, heads=H, kv_heads=K.shape[1])


def run(
    name: str | Algorithm,
    Q: Any = None,
    K: Any = None,
    V: Any = None,
    *,
    M: int,
    shape: Any = None,
    mode: str | None = None,
    causal: object = None,
    window: int | None = None,
    scale: float | None = None,
    tiling: Any = None,
    bulk: bool = True,
    backward: bool = False,
    grad_output: Any = None,
    backward_tiling: Any = None,
    backward_algorithm: str | None = None,
    block_mask: BlockMask | None = None,
    allow_nonfinite: bool = False,
    budget_s: float | None = DEFAULT_BUDGET_S,
    force: bool = False,
    max_memory: int | None = None,
    progress: ProgressCallback | None = None,
) -> Result:
    """Run algorithm ``name`` with a fast memory of ``M`` words.

    Either pass ``Q, K, V`` (compute mode: the output is returned) or ``shape`` with
    ``mode="count"`` (shapes only, same counts).  Inputs may be numpy arrays (float16/32/64) or
    torch tensors (bfloat16 too); arithmetic accumulates in float32 at least, and the output has
    the inputs' precision (bfloat16 outputs are rounded to bfloat16 and returned as float32
    arrays).  Before allocating, the run's memory and time are estimated from closed forms
    (:func:`estimate`) and refused when over ``max_memory`` or ``budget_s``.

    Parameters
    ----------
    name : str or Algorithm
        A registered algorithm (:func:`attnio.algorithms.names`) or an Algorithm instance.
    Q, K, V : array-like, optional
        The inputs, 2-D ``(N, d)`` or 4-D ``(batch, heads, N, d)`` (K and V with ``kv_heads``
        heads: grouped-query attention); omit all three for count mode.
    M : int
        Fast-memory capacity in words.
    shape : Shape or tuple, optional
        The workload without inputs (:class:`~attnio.core.workload.Shape`, ``(Nq, Nkv, d)`` or
        ``(N, d)``); with inputs it must match their sizes and gives only the mask.
    mode : {"compute", "count"}, optional
        Default: ``"compute"`` with inputs, ``"count"`` without.
    causal : bool or str, optional
        False, True / ``"bottom_right"`` or ``"top_left"`` (None: the shape's mask, unmasked by
        default).
    window : int, optional
        Keep each query's W most recent keys (with a causal mask).
    scale : float, optional
        The softmax scale (None: 1/sqrt(d)).
    tiling : Tiling, mapping or None
        The algorithm's Tiling (or a mapping of its fields); None picks the least-I/O one.
    bulk : bool
        In count mode, count runs of equal blocks once (same counts, faster).
    backward : bool
        Also run the backward pass (after a forward that writes the logsumexp).
    grad_output : array-like, optional
        dO, like Q (compute mode with ``backward=True``).
    backward_tiling : Tiling, mapping or None
        The backward schedule's tiling (None: its least-I/O one).
    backward_algorithm : str, optional
        The backward schedule (:func:`attnio.algorithms.backward_names`; None: the least-I/O one
        for the shape and M, by closed form).
    block_mask : BlockMask, optional
        A block-sparse layout (:class:`~attnio.core.blockmask.BlockMask`; algorithms with
        ``supports_block_mask`` only).
    allow_nonfinite : bool
        Accept NaN/inf inputs (refused with their position by default).
    budget_s : float or None
        Refuse a compute-mode run estimated to take longer than this many seconds (None: no
        limit) unless ``force``.
    force : bool
        Run even when over ``budget_s``.
    max_memory : int, optional
        Refuse a run estimated to need more bytes (default: what the machine has available).
    progress : callable, optional
        ``progress(steps, total)``, called about 500 times over the run's tile steps
        (:class:`attnio.core.progress.Progress` draws a bar).

    Returns
    -------
    Result
        The counts (``io``; ``backward_io`` with ``backward=True``), the tiling used, and the
        output (and ``grads``) in compute mode.
    """
    alg = _alg.get(name)
    M = check_int("M", M, minimum=1, maximum=MAX_M)
    check_bool("backward", backward)
    if mode is not None:
        check_choice("mode", mode, ("compute", "count"))
    if budget_s is not None:
        budget_s = check_real("budget_s", budget_s, lo=0, what="seconds")
    if backward and not alg.supports_backward:
        ok = [a.name for a in _alg.all_algorithms() if a.supports_backward]
        raise ParameterError(f"{alg.name} has no backward pass; algorithms with one: {ok}",
                             param="backward")
    if not backward and (backward_algorithm is not None or backward_tiling is not None):
        which = "backward_algorithm" if backward_algorithm is not None else "backward_tiling"
        raise ParameterError(f"{which} applies to the backward pass: pass backward=True too",
                             param=which)
    if backward_algorithm is not None:
        _alg.get_backward(backward_algorithm)  # an unknown name fails before anything runs
    data: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    low: set[str] = set()
    if Q is None and K is None and V is None:
        if shape is None:
            raise ParameterError("give Q, K, V (compute mode) or shape=(N, d) with mode='count'",
                                 param="shape")
        mode = mode or "count"
        if mode != "count":
            raise ParameterError(f"mode={mode!r} needs Q, K, V; without data only mode='count' "
                                 "runs", param="mode")
        if grad_output is not None:
            raise ParameterError("grad_output needs Q, K, V (compute mode)", param="grad_output")
        shp = Shape.coerce(shape)
    else:
        if Q is None or K is None or V is None:
            raise ParameterError("give all three of Q, K, V (or none, with shape= and "
                                 "mode='count')", param="Q")
        Qa, Ka, Va, shp = check_inputs(Q, K, V, allow_nonfinite)
        low = {str(x.dtype) for x in (Q, K, V) if type(x).__module__.startswith("torch")}
        if shape is not None:  # the inputs gave the sizes; shape may add the mask
            given = Shape.coerce(shape)
            if _sizes(given) != _sizes(shp):
                raise ParameterError(f"shape={shape!r} does not match the inputs' shape {shp}",
                                     param="shape")
            shp = given
        mode = mode or "compute"
        data = (Qa, Ka, Va)
        if backward and mode == "compute":
            if grad_output is None:
                raise ParameterError("backward=True in compute mode needs grad_output (dO, like "
                                     "Q)", param="grad_output")
            grad_output = _as_array("grad_output", grad_output, allow_nonfinite)
            if grad_output.shape != Qa.shape:
                raise ParameterError(f"grad_output must have Q's shape {Qa.shape}, got "
                                     f"{grad_output.shape}", param="grad_output")
    shp = shp.with_mask(causal, window, block_mask)
    if shp.window is not None and not alg.supports_window:
        ok = [a.name for a in _alg.all_algorithms() if a.supports_window]
        raise ParameterError(f"{alg.name} does not support window=; algorithms that do: {ok}",
                             param="window")
    if shp.block_mask is not None and not alg.supports_block_mask:
        ok = [a.name for a in _alg.all_algorithms() if a.supports_block_mask]
        raise ParameterError(f"{alg.name} does not support block-sparse attention (block_mask); "
                             f"algorithms that do: {ok}", param="block_mask")
    s = default_scale(shp.d, scale)
    t = alg.coerce_tiling(shp, M, tiling, inputs=data)
    bwd: Any = None
    bt: Any = None
    if backward:  # chosen and validated before anything runs
        bwd, bt = _alg.choose_backward(shp, M, backward_algorithm, backward_tiling)
    dtype = np.dtype(np.float64)
    if data is not None:
        dtype = np.result_type(np.float32, *(a.dtype for a in data))
    if max_memory is not None:
        max_memory = check_int("max_memory", max_memory, minimum=1)
    cost = estimate(alg, shp, M, tiling=t, mode=mode, backward=backward,
                    backward_schedule=(bwd, bt) if backward else None,
                    itemsize=dtype.itemsize)
    check_cost(cost, subject=f"{mode} mode on {shp.describe()}", max_memory=max_memory,
               budget_s=budget_s if mode == "compute" or shp.block_mask is not None else None,
               force=force, instead="use mode='count' (same counts) or a smaller N"
               if mode == "compute" else "use attnio.plan (closed forms) or a smaller N")
    if data is not None and mode == "compute":
        check_logits(data, s, dtype)
    total_steps = shp.n_heads * max(0, int(alg.steps(shp, t))) if progress is not None else 0
    mem_mode: Mode = "count" if mode == "count" else "compute"  # mode was checked above
    mem = TwoLevelMemory(M, mode=mem_mode, bulk=bulk, dtype=dtype, progress=progress,
                         progress_total=total_steps)
    h = place_inputs(mem, shp, data if mode == "compute" else None)
    if backward:
        h["L"] = mem.slow("L", (shp.n_heads * shp.Nq,))
    alg.run_schedule(mem, h["Q"], h["K"], h["V"], h["O"], shape=shp, tiling=t, scale=s,
                     lse=h.get("L"))
    output = None
    if mode == "compute":
        output = _unstack(mem.contents(h["O"]), shp, data)
        if "torch.bfloat16" in low and output is not None:
            output = _round_bf16(output)
    res = Result(alg.name, shp, M, shp.causal, t, mem.stats(), output, mode)
    if not backward:
        return res
    return _run_backward(bwd, bt, res, mem, h, shp, M, s, mem_mode, bulk, dtype, data, grad_output,
                         progress)


def _sizes(s: Shape) -> tuple[int, ...]:
    return (s.Nq, s.Nkv, s.d, s.batch, s.heads, s.n_kv_heads)


def place_inputs(mem: TwoLevelMemory, shp: Shape,
                 data: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> dict[str, SlowArray]:
    """Put Q, K, V (stacked by head) and an empty O into slow memory (O in Q's precision).

    ``data`` is ``(Q, K, V)`` in compute mode (2-D or 4-D arrays), None in count mode."""
    nq, nkv = shp.n_heads * shp.Nq, shp.n_kv_heads * shp.Nkv
    h = {}
    for name, rows, i in (("Q", nq, 0), ("K", nkv, 1), ("V", nkv, 2)):
        arr = None if data is None else data[i].reshape(rows, shp.d)
        h[name] = mem.slow(name, (rows, shp.d), arr)
    # NaN until written: an output word a schedule never stores shows up in every check
    unset = None if data is None else np.full((nq, shp.d), np.nan, dtype=data[0].dtype)
    h["O"] = mem.slow("O", (nq, shp.d), unset)
    return h


def _round_bf16(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).to(
        torch.float32).numpy()


def _unstack(flat, shp: Shape, data):
    if flat is None:
        return None
    if data is not None and data[0].ndim == 4:
        return flat.reshape(shp.batch, shp.heads, shp.Nq, shp.d)
    return flat


def _run_backward(bwd: Any, bt: Any, fwd: Result, fmem: TwoLevelMemory,
                  h: dict[str, SlowArray], shp: Shape, M: int, s: float, mode: Mode, bulk: bool,
                  dtype: Any, data: Any, dO: Any,
                  progress: ProgressCallback | None = None) -> Result:
    total = shp.n_heads * max(0, int(bwd.steps(shp, bt))) if progress is not None else 0
    mem = TwoLevelMemory(M, mode=mode, bulk=bulk, dtype=dtype, progress=progress,
                         progress_total=total)
    nq, nkv = shp.n_heads * shp.Nq, shp.n_kv_heads * shp.Nkv
    arrays = {}
    # the backward's inputs are where the forward left them, in slow memory (no I/O)
    for name, rows in (("Q", nq), ("K", nkv), ("V", nkv), ("O", nq)):
        arrays[name] = mem.slow(name, (rows, shp.d), fmem.contents(h[name]))
    arrays["L"] = mem.slow("L", (nq,), fmem.contents(h["L"]))
    arrays["dO"] = mem.slow("dO", (nq, shp.d), None if dO is None else dO.reshape(nq, shp.d))
    arrays["dQ"] = mem.slow("dQ", (nq, shp.d))
    arrays["dK"] = mem.slow("dK", (nkv, shp.d))
    arrays["dV"] = mem.slow("dV", (nkv, shp.d))
    bwd.run_schedule(mem, arrays, shape=shp, tiling=bt, scale=s)
    grads = None
    if mode == "compute":
        four = data[0].ndim == 4
        grads = {}
        for name in ("dQ", "dK", "dV"):
            g = mem.contents(arrays[name])
            assert g is not None  # compute mode: slow arrays hold data
            if four:
                heads = shp.heads if name == "dQ" else shp.n_kv_heads // shp.batch
                n = shp.Nq if name == "dQ" else shp.Nkv
                g = g.reshape(shp.batch, heads, n, shp.d)
            grads[name] = g
    return dataclasses.replace(fwd, backward_io=mem.stats(), backward_tiling=bt, grads=grads,
                               backward_algorithm=bwd.name)
