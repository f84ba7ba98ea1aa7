"""One run of one algorithm on the simulated two-level memory: validate, estimate, refuse, run,
check against the reference, certify (:func:`run`)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import algorithms as _alg
from ..algorithms import mapper
from ..algorithms.base import Algorithm, default_scale
from ..algorithms.protocol import NO_BACKWARD, NO_BLOCK_MASK, NO_WINDOW
from ..core import reference
from ..core.checks import check_bool, check_choice, check_int, check_real
from ..core.errors import ParameterError
from ..core.memory import IOStats, Mode, SlowArray, TwoLevelMemory
from ..core.progress import ProgressCallback
from ..core.resources import (
    COPY_SECONDS_PER_WORD,
    FLOPS_PER_SECOND,
    STEP_SECONDS,
    Cost,
    Limits,
)
from ..core.workload import MAX_M, Shape
from .certificate import Certificate, certificate
from .inputs import NpzInputs, RandomInputs, as_array, check_inputs, check_logits, reference_errors

__all__ = ["BackwardPass", "Result", "estimate", "estimate_compute_seconds", "place_inputs", "run"]


@dataclass(frozen=True)
class Result:
    """What a run returns: the output (None in count mode), the counts, the tiling used and the
    :class:`~attnio.runner.certificate.Certificate` of the count.

    With ``backward=True``: ``io`` counts the forward pass (which then also writes the logsumexp),
    ``backward_io`` the backward pass (the schedule ``backward_algorithm``), ``grads`` holds
    ``dQ, dK, dV`` (compute mode), ``backward_certificate`` certifies ``backward_io``.  With
    ``check=True`` (compute mode): ``max_abs_err`` (and ``max_abs_grad_err``) against the float64
    reference; ``error_bound`` is an approximate algorithm's guaranteed max |O - reference|.
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
    certificate: Certificate | None = None
    backward_certificate: Certificate | None = None
    max_abs_err: float | None = None
    max_abs_grad_err: float | None = None
    error_bound: float | None = None


@dataclass(frozen=True)
class BackwardPass:
    """A backward pass to run after the forward: ``algorithm`` names the schedule
    (:func:`attnio.algorithms.backward_names`; None: the least-I/O one for the shape and M, by
    closed form), ``tiling`` its tiling (None: its least-I/O one).  ``backward=True`` is
    ``BackwardPass()``."""

    algorithm: str | None = None
    tiling: Any = None


def estimate_compute_seconds(alg: Algorithm, shape: Shape, tiling: Any) -> tuple[float, int, int]:
    """(seconds, flops, tile steps) a compute-mode run is expected to take, from closed forms."""
    r = alg.cost(shape, tiling).features
    if r is not None:  # feature-space methods: O(n·r·d), not O(n²·d)
        flops = 4 * shape.n_heads * (shape.Nq + shape.Nkv) * r * shape.d
        # measured: each feature block evaluates the feature map, about 300 ns per feature,
        # row and block (approx_poly on 2 cores, r = 1,287..125,970); ``rb`` features a block
        # where the schema declares it
        rb = (tiling.rb if "rb" in alg.mapspace(shape, 1).field_names() else None) or r
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
             mode: str = "compute", backward: bool | tuple[Any, Any] = False, itemsize: int = 8,
             inputs: bool = False) -> Cost:
    """The memory and time :func:`run` would spend, from closed forms (nothing is allocated).

    Compute mode keeps a copy of Q, K, V and O in the simulator's slow memory, the slow
    workspace the schedule writes (at most its writes for one head), and the output;
    ``inputs=True`` adds the inputs themselves (float64), for a caller that has yet to create
    them.  ``backward`` adds the backward pass: True runs the algorithm's own ``.backward``, a
    pair ``(schedule, tiling)`` that one.  Count mode needs no arrays.  ``tiling`` is the
    algorithm's tiling for ``shape`` and ``M`` (None: the default one).
    """
    alg = _alg.get(name)
    shp = Shape.coerce(shape)
    t = tiling if tiling is not None and not isinstance(tiling, (dict, str, int)) else \
        alg.coerce_tiling(shp, check_int("M", M, minimum=1, maximum=MAX_M), tiling)
    pair = backward if isinstance(backward, tuple) else None
    if mode == "count":
        return _count_cost(alg, shp, t, pair, tiling is not None)
    if pair is None and backward and alg.backward is not None:
        pair = (alg.backward, alg.backward.coerce_tiling(shp, M, None))
    return _compute_cost(alg, shp, M, t, pair, (itemsize, (2 if backward else 1) if inputs else 0))


def _count_cost(alg: Algorithm, shp: Shape, t: Any, backward: tuple[Any, Any] | None,
                given: bool) -> Cost:
    """Count mode: alike blocks once in bulk, but what a schedule walks, and a block-sparse
    layout's tiles one by one (``given``: whether the caller chose the tiling ``t``)."""
    if shp.block_mask is None:  # bulk: alike blocks once, except what a schedule walks
        walk = max(0, int(alg.count_walk(shp, t)))
        return Cost(0, walk * WALK_SECONDS, "count mode's walk over blocks")
    return _sparse_count_cost(alg, shp, t, backward, given)


def _compute_cost(alg: Algorithm, shp: Shape, M: int, t: Any,
                  backward: tuple[Any, Any] | None, data: tuple[int, int]) -> Cost:
    """Compute mode with the tiling ``t`` and the backward ``(schedule, tiling)`` (None: no
    backward pass); ``data``: the arrays' item size and how many copies of the inputs' size
    are yet to be created (0: none; 2: the inputs and the backward's)."""
    itemsize, created = data
    seconds, _, _ = estimate_compute_seconds(alg, shp, t)
    q = shp.n_heads * shp.Nq * shp.d
    kv = shp.n_kv_heads * shp.Nkv * shp.d
    writes = alg.cost(shp, t).io.writes // max(1, shp.n_heads)
    # a schedule whose slow workspace exceeds its writes (scores written on a band of a full
    # matrix) says how large it is
    if (workspace := alg.slow_workspace(shp, t)) is not None:
        writes = max(writes, int(workspace))
    # tiles hold at most M words, and never more than the data they copy (plus an approximate
    # algorithm's feature blocks): a huge M costs nothing a small workload does not
    r = alg.cost(shp, t).features
    tiles = min(M, 2 * q + 2 * kv + writes + (r * (shp.d + 1) if r is not None else 0))
    words = 2 * (q + 2 * kv) + q + writes + 2 * tiles  # slow copies and O, workspace, output
    bwd, bt = backward if backward is not None else (None, None)
    if bwd is not None:
        words += 2 * (3 * q + 2 * kv) + 2 * shp.n_heads * shp.Nq + writes + bwd.workspace(shp)
        _, flops, _ = estimate_compute_seconds(alg, shp, t)
        bwd_steps = shp.n_heads * max(0, int(bwd.steps(shp, bt)))
        seconds += 2.5 * flops / FLOPS_PER_SECOND + 1.5 * bwd_steps * STEP_SECONDS
    what = "the simulator's slow memory"
    if created:
        words += (q + 2 * kv) * created
        what = "the inputs and the simulator's slow memory"
    seconds += words * COPY_SECONDS_PER_WORD  # creating, filling and copying the arrays
    return Cost(int(words) * max(8, int(itemsize)), seconds, what)


#: Seconds per block a count-mode schedule walks one by one (``Algorithm.count_walk``): measured,
#: kv_stationary and q_stationary_min at N = 10**6, causal, 130-250 us per block on 2 cores.
WALK_SECONDS = 3e-4

#: The most tiles a block-sparse count maps (2**28): the map is built from the layout's prefix
#: sums with about 41 bytes per tile (within the memory estimate, up to 11 GB at the limit), so
#: a count beyond it is refused on every machine, not only on one with less memory.
MAX_TILE_MAP = 1 << 28


def _sparse_count_cost(alg: Algorithm, shp: Shape, t: Any,
                       backward_schedule: tuple[Any, Any] | None, given: bool = True) -> Cost:
    """Count mode on a block-sparse layout: the schedule visits its kept tiles one by one (no
    closed-form bulk over an irregular layout) from a map of every tile, built from the layout's
    prefix sums; a map of more than :data:`MAX_TILE_MAP` tiles is refused."""
    bm = shp.block_mask
    assert bm is not None
    nbytes = 8 * (bm.Tq + 1) * (bm.Tk + 1)  # the layout's int64 prefix sums
    steps = shp.n_heads * max(0, int(alg.steps(shp, t)))
    tilings: list[tuple[Any, Any]] = [(alg, t)]
    if backward_schedule is not None and backward_schedule[0] is not None:
        bwd, bt = backward_schedule
        steps += shp.n_heads * max(0, int(bwd.steps(shp, bt)))
        tilings.append((bwd, bt))
    for k, (sch, tl) in enumerate(tilings):  # each map: a boolean (byte) per tile, built from five
        # int64 temporaries per tile (core.blockmask's prefix-sum differences) and four row
        # gathers of the sums
        sides = _sides(tl, sch)
        tr, tc = -(-shp.Nq // sides[0]), -(-shp.Nkv // sides[1])
        if tr * tc > MAX_TILE_MAP and not (given and k == 0):  # a tiling the caller did not give
            raise ParameterError.worded(
                f"{{N}}: {shp.describe()} with {alg.name}'s least-I/O tiling for this M "
                f"({tl}) maps {tr:,} x {tc:,} tiles in a block-sparse count, more than 2**28; "
                f"use {{plan}} (closed forms), a smaller {{N}}, or larger tiles ({{tiling}})",
                param="N", plan="attnio.plan")
        if tr * tc > MAX_TILE_MAP:
            raise ParameterError.worded(
                f"{{tiling}} {tl} maps {tr:,} x {tc:,} tiles in a block-sparse count, more than "
                f"2**28; give larger tiles, or use {{plan}} (closed forms)",
                param="tiling", plan="attnio.plan")
        nbytes += tr * tc * (1 + 5 * 8) + 4 * 8 * tr * (bm.Tk + 1)
    return Cost(int(nbytes), steps * STEP_SECONDS, "the block-sparse tile map and its steps")


@dataclass(frozen=True)
class _Request:
    """The arguments of one :func:`run` as given, before :func:`_job` validates them."""

    arrays: tuple[Any, Any, Any]     # Q, K, V (each None in count mode or with inputs)
    M: int
    shape: Any
    mode: str | None
    causal: object
    window: int | None
    scale: float | None
    tiling: Any
    backward: bool | BackwardPass
    grad_output: Any
    inputs: Any
    check: bool
    limits: Limits | None
    allow_nonfinite: bool


@dataclass(frozen=True)
class _Data:
    """What a run's inputs give before anything large is allocated: the sizes, the mode, and the
    arrays (given ones; drawn or read ones come with :func:`_materialise`)."""

    sizes: Shape
    mode: str
    data: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    grad_output: Any = None
    header: dict | None = None       # an NpzInputs' array headers
    dtype: np.dtype = np.dtype(np.float64)
    low: frozenset[str] = frozenset()  # torch dtypes of the inputs (bfloat16 rounds the output)


@dataclass(frozen=True)
class _Job:
    """A run, validated: what runs, on what, from which data, within which limits."""

    alg: Algorithm
    shape: Shape
    M: int
    tiling: Any                      # the user's tiling (coerced again once data is loaded)
    est_tiling: Any                  # the coerced tiling: estimated with, then run
    scale: float
    backward: BackwardPass | None
    bwd: Any                         # the backward (schedule, tiling), chosen before running
    bt: Any
    inputs: _Data
    source: RandomInputs | NpzInputs | None
    check: bool
    limits: Limits
    allow_nonfinite: bool

    @property
    def mode(self) -> str:
        return self.inputs.mode

    @property
    def data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        return self.inputs.data

    @property
    def dtype(self) -> np.dtype:
        return self.inputs.dtype


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
    backward: bool | BackwardPass = False,
    grad_output: Any = None,
    inputs: RandomInputs | NpzInputs | str | os.PathLike[str] | None = None,
    check: bool = False,
    limits: Limits | None = None,
    progress: ProgressCallback | None = None,
    allow_nonfinite: bool = False,
    bulk: bool = True,
) -> Result:
    """Run algorithm ``name`` with a fast memory of ``M`` words: validate, estimate, refuse,
    run, check against the reference (``check``) and certify the count.

    Either pass data (``Q, K, V`` or ``inputs``: compute mode, the output is returned) or
    ``shape`` alone (count mode: shapes only, the same counts).  Inputs may be numpy arrays
    (float16/32/64) or torch tensors (bfloat16 too); arithmetic accumulates in float32 at least,
    and the output has the inputs' precision (bfloat16 outputs are rounded to bfloat16 and
    returned as float32 arrays).  Before anything is allocated (inputs drawn or read included),
    the run's memory and time (and the reference's with ``check``) are estimated from closed
    forms (:func:`estimate`) and refused beyond ``limits``.

    Parameters
    ----------
    name : str or Algorithm
        A registered algorithm (:func:`attnio.algorithms.names`) or an Algorithm instance.
    Q, K, V : array-like, optional
        The inputs, 2-D ``(N, d)`` or 4-D ``(batch, heads, N, d)`` (K and V with ``kv_heads``
        heads: grouped-query attention); omit all three for count mode or with ``inputs``.
    M : int
        Fast-memory capacity in words.
    shape : Shape or tuple, optional
        The workload (:class:`~attnio.core.workload.Shape`, ``(Nq, Nkv, d)`` or ``(N, d)``),
        mask and block-sparse layout included; with data it must match their sizes and gives
        only the mask.
    mode : {"compute", "count"}, optional
        Default: ``"compute"`` with data, ``"count"`` without.
    causal, window : optional
        Shorthands merged into the shape's mask: causal False, True / ``"bottom_right"`` or
        ``"top_left"``; window W, each query's W most recent keys (with a causal mask).
    scale : float, optional
        The softmax scale (None: 1/sqrt(d)).
    tiling : Tiling, mapping or None
        The algorithm's Tiling (or a mapping of its fields); None picks the least-I/O one.
    backward : bool or BackwardPass
        Also run the backward pass (after a forward that writes the logsumexp); a
        :class:`BackwardPass` names its schedule (None: the least-I/O one by closed form) and
        tiling.
    grad_output : array-like, optional
        dO, like Q (compute mode with arrays and ``backward``; drawn or read with ``inputs``).
    inputs : RandomInputs, NpzInputs or path, optional
        Data the run draws (:class:`~attnio.runner.inputs.RandomInputs`) or reads from an
        ``.npz`` file of Q, K, V (and dO) after its estimate is accepted.
    check : bool
        Compare the output (and gradients) with the float64 reference: ``max_abs_err``
        (``max_abs_grad_err``) on the Result.
    limits : Limits, optional
        :class:`~attnio.core.resources.Limits`: ``budget_s`` seconds (default 300) unless
        ``force``, ``max_memory`` bytes (default: what the machine has available).
    progress : callable, optional
        ``progress(steps, total)``, called about 500 times over the run's tile steps
        (:class:`attnio.core.progress.Progress` draws a bar).
    allow_nonfinite : bool
        Accept NaN/inf inputs (refused with their position by default).
    bulk : bool
        In count mode, count runs of equal blocks once (same counts, faster).

    Returns
    -------
    Result
        The counts (``io``; ``backward_io`` with ``backward``), the tiling used, the output (and
        ``grads``) in compute mode, and the :class:`~attnio.runner.certificate.Certificate` of
        each count.
    """
    job = _job(_alg.get(name), _Request(
        (Q, K, V), M=M, shape=shape, mode=mode, causal=causal, window=window, scale=scale,
        tiling=tiling, backward=backward, grad_output=grad_output, inputs=inputs, check=check,
        limits=limits, allow_nonfinite=allow_nonfinite))
    check_bool("bulk", bulk)
    _refuse(job)
    if job.mode == "compute":
        job = _materialise(job)
    res = _execute(job, bulk, progress)
    if job.check and res.output is not None and job.data is not None:
        err, gerr = reference_errors(*job.data, job.inputs.grad_output, res.output, res.grads,
                                     job.shape, job.scale)
        res = dataclasses.replace(res, max_abs_err=err, max_abs_grad_err=gerr)
    return res


def _job(alg: Algorithm, req: _Request) -> _Job:
    """Every argument validated, the data's sizes known, nothing large allocated."""
    M = check_int("M", req.M, minimum=1, maximum=MAX_M)
    if req.mode is not None:
        check_choice("mode", req.mode, ("compute", "count"))
    scale = req.scale
    if scale is not None:
        if isinstance(scale, (str, bytes)):
            raise ParameterError(f"scale must be a finite real number, got the string {scale!r}",
                                 param="scale")
        scale = check_real("scale", scale)
    check_bool("check", req.check)
    check_bool("allow_nonfinite", req.allow_nonfinite)
    limits = req.limits
    if limits is None:
        limits = Limits()
    elif not isinstance(limits, Limits):
        raise ParameterError(f"limits must be an attnio.core.resources.Limits, got "
                             f"{type(limits).__name__}", param="limits")
    bp = _backward_pass(alg, req.backward)
    source = req.inputs
    if isinstance(source, (str, os.PathLike)):
        source = NpzInputs(os.fspath(source))
    given = _sizes_and_data(req, source, bp)
    shape = _with_mask(given.sizes, req.shape, req.causal, req.window)
    _supports(alg, shape)
    est = alg.coerce_tiling(shape, M, _estimate_tiling(alg, req.tiling, source),
                            inputs=given.data)
    bwd = bt = None
    if bp is not None:  # chosen and validated before anything runs
        bwd, bt = _alg.choose_backward(shape, M, bp.algorithm, bp.tiling)
    return _Job(alg, shape, M, req.tiling, est, default_scale(shape.d, scale), bp, bwd, bt,
                given, source, req.check, limits, req.allow_nonfinite)


def _backward_pass(alg: Algorithm, backward: object) -> BackwardPass | None:
    if isinstance(backward, BackwardPass):
        bp: BackwardPass | None = backward
    elif isinstance(backward, (bool, np.bool_)):
        bp = BackwardPass() if backward else None
    else:
        raise ParameterError(f"backward must be True, False or a BackwardPass, got {backward!r}",
                             param="backward")
    if bp is not None and not mapper.supports(alg, NO_BACKWARD):  # before the workload is known
        ok = [a.name for a in _alg.all_algorithms() if mapper.supports(a, NO_BACKWARD)]
        raise ParameterError(f"{alg.name} has no backward pass; algorithms with one: {ok}",
                             param="backward")
    if bp is not None and bp.algorithm is not None:
        _alg.get_backward(bp.algorithm)  # an unknown name fails before anything runs
    return bp


def _sizes_and_data(req: _Request, source: Any, bp: BackwardPass | None) -> _Data:
    """The sizes the data give (the arrays checked), or the shape's in count mode; the mode, the
    given arrays, their dtype and grad_output."""
    Q, K, V = req.arrays
    given = [x is not None for x in (Q, K, V)]
    if any(given) and source is not None:
        raise ParameterError("give Q, K, V or inputs=, not both", param="inputs")
    if any(given) and not all(given):
        raise ParameterError("give all three of Q, K, V (or none, with shape= and "
                             "mode='count')", param="Q")
    if all(given):
        Qa, Ka, Va, sizes = check_inputs(Q, K, V, req.allow_nonfinite)
        out = _Data(sizes, req.mode or "compute", (Qa, Ka, Va),
                    dtype=np.result_type(np.float32, Qa.dtype, Ka.dtype, Va.dtype),
                    low=frozenset(str(x.dtype) for x in (Q, K, V)
                                  if type(x).__module__.startswith("torch")))
    elif source is not None:
        out = _source_sizes(source, req.shape, req.mode, bp)
    else:
        if req.shape is None:
            raise ParameterError("give Q, K, V (compute mode) or shape=(N, d) with mode='count'",
                                 param="shape")
        if req.mode not in (None, "count"):
            raise ParameterError(f"mode={req.mode!r} needs Q, K, V (or inputs=); without data "
                                 "only mode='count' runs", param="mode")
        if req.grad_output is not None:
            raise ParameterError("grad_output needs Q, K, V (compute mode)", param="grad_output")
        if req.check:
            raise ParameterError("check=True compares data with the reference: it needs Q, K, V "
                                 "(compute mode)", param="check")
        return _Data(Shape.coerce(req.shape), "count")
    if out.mode == "compute":
        g = _grad_output(req, source, bp, out.data)
        if g is not None:
            out = dataclasses.replace(out, grad_output=g)
    return out


def _source_sizes(src: Any, shape: Any, mode: str | None, bp: BackwardPass | None) -> _Data:
    if isinstance(src, RandomInputs):
        if shape is None:
            raise ParameterError("inputs=RandomInputs(...) draws Q, K, V of shape=: give it",
                                 param="shape")
        return _Data(Shape.coerce(shape), mode or "compute")
    if not isinstance(src, NpzInputs):
        raise ParameterError(f"inputs must be an .npz path, NpzInputs or RandomInputs, got "
                             f"{type(src).__name__}", param="inputs")
    header = src.header(bp is not None)
    return _Data(src.shape(header), mode or "compute", header=header,
                 dtype=np.result_type(np.float32, *(dt for _, dt in header.values())))


def _grad_output(req: _Request, source: Any, bp: BackwardPass | None,
                 data: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> np.ndarray | None:
    grad_output = req.grad_output
    if bp is None:
        if grad_output is not None:
            raise ParameterError("grad_output is for the backward pass: pass backward=True too",
                                 param="grad_output")
        return None
    if source is not None:
        if grad_output is not None:
            raise ParameterError("grad_output comes with inputs= (drawn or read from the file): "
                                 "drop it", param="grad_output")
        return None
    if grad_output is None:
        raise ParameterError("backward=True in compute mode needs grad_output (dO, like Q)",
                             param="grad_output")
    assert data is not None
    g = as_array("grad_output", grad_output, req.allow_nonfinite)
    if g.shape != data[0].shape:
        raise ParameterError(f"grad_output must have Q's shape {data[0].shape}, got "
                             f"{g.shape}", param="grad_output")
    return g


def _with_mask(sizes: Shape, shape: Any, causal: object, window: int | None) -> Shape:
    """The data's sizes with the mask of ``shape`` and the ``causal``/``window`` shorthands."""
    shp = sizes
    if shape is not None:
        given = Shape.coerce(shape)
        if _size_key(given) != _size_key(sizes):
            raise ParameterError(f"shape={shape!r} does not match the inputs' shape {sizes}",
                                 param="shape")
        shp = given
    return shp.with_mask(causal, window)


def _size_key(s: Shape) -> tuple[int, ...]:
    return (s.Nq, s.Nkv, s.d, s.batch, s.heads, s.n_kv_heads)


def _supports(alg: Algorithm, shp: Shape) -> None:
    """A ParameterError naming what ``alg`` cannot run in this workload (the mapper's
    :func:`can_run` without M: too small an M is left to the tiling's check, which names M or
    the tiling)."""
    why = mapper.can_run(alg, shp)
    if why == NO_WINDOW:
        ok = [a.name for a in _alg.all_algorithms() if mapper.supports(a, NO_WINDOW)]
        form = alg.windowed_form  # a schedule with a separate windowed form
        hint = f"; its windowed form is {form}" if form else ""
        raise ParameterError(f"{alg.name} does not support window={shp.window} (a sliding "
                             f"window){hint}; the algorithms that do: {', '.join(ok)}",
                             param="window")
    if why == NO_BLOCK_MASK:
        ok = [a.name for a in _alg.all_algorithms() if mapper.supports(a, NO_BLOCK_MASK)]
        raise ParameterError(f"{alg.name} does not support block-sparse attention (block_mask); "
                             f"algorithms that do: {ok}", param="block_mask")
    if why is not None:
        raise ParameterError(f"{alg.name} cannot run {shp.describe()}: {why}", param="algorithm")


def _sides(tiling: Any, schedule: Any) -> tuple[int, int]:
    """The query and key rows of a tile (``Br``, ``Bc`` where the schema declares them; 1
    otherwise): what a block-sparse count maps tile by tile."""
    names = {f.name for f in schedule.schema()}
    return (max(1, int(tiling.Br)) if "Br" in names else 1,
            max(1, int(tiling.Bc)) if "Bc" in names else 1)


def _estimate_tiling(alg: Algorithm, tiling: Any, source: Any) -> Any:
    """The tiling to estimate with: a schedule about to draw or read its inputs prices the
    tiling its :meth:`~attnio.algorithms.base.Algorithm.estimate_tiling` gives for their entry
    bound (drawn: RandomInputs.entry_bound; read: None)."""
    if source is None:
        return tiling
    return alg.estimate_tiling(
        tiling, source.entry_bound if isinstance(source, RandomInputs) else None)


def _refuse(job: _Job) -> None:
    """The estimate of the run (and of the reference with ``check``), refused beyond limits."""
    shp = job.shape
    creates = job.source is not None
    pair = (job.bwd, job.bt) if job.backward is not None else None
    if job.mode == "count":
        cost = _count_cost(job.alg, shp, job.est_tiling, pair, job.tiling is not None)
    else:
        cost = _compute_cost(job.alg, shp, job.M, job.est_tiling, pair, (
            job.dtype.itemsize, (2 if job.backward is not None else 1) if creates else 0))
    if job.check and job.mode == "compute":
        cost = cost + reference.cost(shp.Nq, shp.Nkv, shp.d, shp.n_heads,
                                     backward=job.backward is not None)
    instead = ("use mode='count' (same counts) or a smaller N" if job.mode == "compute"
               else "use attnio.plan (closed forms) or a smaller N")
    job.limits.check(cost, subject=f"{job.mode} mode on {shp.describe()}", instead=instead,
                     timed=job.mode == "compute" or shp.block_mask is not None
                     or cost.seconds > 0)


def _materialise(job: _Job) -> _Job:
    """The job with its inputs drawn or loaded (after the estimate) and checked; the tiling for
    the data, and the logits' range checked."""
    inputs = job.inputs
    if isinstance(job.source, RandomInputs):
        Q, K, V, dO = job.source.draw(job.shape, job.alg.exact, job.backward is not None)
        inputs = dataclasses.replace(inputs, data=(Q, K, V), grad_output=dO)
    elif isinstance(job.source, NpzInputs):
        Q, K, V, dO = job.source.load(job.backward is not None)
        try:
            Qa, Ka, Va, _ = check_inputs(Q, K, V, job.allow_nonfinite)
            if dO is not None:
                dO = as_array("grad_output", dO, job.allow_nonfinite)
        except ParameterError as e:
            raise job.source.checked(e) from None
        inputs = dataclasses.replace(inputs, data=(Qa, Ka, Va), grad_output=dO)
    assert inputs.data is not None  # compute mode: arrays given, drawn or loaded
    est = job.est_tiling
    if job.source is not None:  # the tiling for the data (an approximate one reads its range)
        est = job.alg.coerce_tiling(job.shape, job.M, job.tiling, inputs=inputs.data)
    check_logits(inputs.data, job.scale, inputs.dtype)
    return dataclasses.replace(job, inputs=inputs, est_tiling=est)


def _execute(job: _Job, bulk: bool, progress: ProgressCallback | None) -> Result:
    """Run the forward (and backward) schedule; attach the certificates."""
    alg, shp, M = job.alg, job.shape, job.M
    t = job.est_tiling
    s = job.scale
    total_steps = shp.n_heads * max(0, int(alg.steps(shp, t))) if progress is not None else 0
    mem_mode: Mode = "count" if job.mode == "count" else "compute"
    mem = TwoLevelMemory(M, mode=mem_mode, bulk=bulk, dtype=job.dtype, progress=progress,
                         progress_total=total_steps)
    data = job.data if job.mode == "compute" else None
    h = place_inputs(mem, shp, data)
    if job.backward is not None:
        h["L"] = mem.slow("L", (shp.n_heads * shp.Nq,))
    alg.execute(mem, h, t, shape=shp, scale=s)
    output = None
    bound = None
    if data is not None:
        output = _unstack(mem.contents(h["O"]), shp, data)
        if "torch.bfloat16" in job.inputs.low and output is not None:
            output = _round_bf16(output)
        if not alg.exact:
            bound = t.error_bound_for(data[2])
    io = mem.stats()
    res = Result(alg.name, shp, M, shp.causal, t, io, output, job.mode,
                 certificate=certificate(shp, M, io.total, exact=alg.exact,
                                         features=alg.cost(shp, t).features),
                 error_bound=bound)
    if job.backward is None:
        return res
    return _run_backward(job, res, mem, h, bulk=bulk, progress=progress)


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


def _run_backward(job: _Job, fwd: Result, fmem: TwoLevelMemory, h: dict[str, SlowArray], *,
                  bulk: bool, progress: ProgressCallback | None = None) -> Result:
    """The backward pass of ``job`` after its forward ``fwd``, which left Q, K, V, O and the
    logsumexp in ``fmem`` (arrays ``h``); the Result with its counts and gradients."""
    bwd, bt, shp, M, s = job.bwd, job.bt, job.shape, job.M, job.scale
    mode: Mode = "count" if job.mode == "count" else "compute"
    data, dO = job.data if mode == "compute" else None, job.inputs.grad_output
    total = shp.n_heads * max(0, int(bwd.steps(shp, bt))) if progress is not None else 0
    mem = TwoLevelMemory(M, mode=mode, bulk=bulk, dtype=job.dtype, progress=progress,
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
    bwd.execute(mem, arrays, bt, shape=shp, scale=s)
    grads = None
    if mode == "compute":
        assert data is not None  # compute mode: the forward's inputs
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
    io = mem.stats()
    return dataclasses.replace(fwd, backward_io=io, backward_tiling=bt, grads=grads,
                               backward_algorithm=bwd.name,
                               backward_certificate=certificate(shp, M, io.total, backward=True))
