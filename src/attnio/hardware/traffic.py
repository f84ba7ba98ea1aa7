"""Per-CTA tile streams, taken from the two-level simulator's schedules, in launch order.

A GPU kernel runs one CTA per (query block, head) (and per KV split, or per key block for the
backward).  What one CTA reads and writes is what the two-level schedule does for that block:
``flash2``'s ``schedule_group`` (GQA packing: the group's query heads share each K/V tile),
``flash_decoding``'s split and reduction loops, ``flash2_backward``'s key-block loop.  This module
does not count anything itself: it runs the schedule on a small instance through
:class:`~attnio.core.memory.TwoLevelMemory` in count mode with a tracer, with M = the CTA's
shared-memory budget plus the operands the config keeps in registers (the simulator refuses the
run if the shared-memory-resident tiles do not fit), and reads off the CTA's program: the tiles
it loads before its inner loop (**prologue**), per inner block (**body**), and after it
(**epilogue**), each tile named by its array, its head and the block it covers.  The program is
then instantiated for every CTA of the real grid with the block ranges the mask gives
(:mod:`attnio.core.masks`); tests hold the instantiated streams equal to the schedule's full
trace on small shapes (causal, windowed, GQA, split, backward) and their total to the closed-form
count.

The CTAs come out in the kernel's launch order (its grid order: flash-attn's FA2 launches
``m_block`` fastest, then batch, then head; FA3's persistent scheduler ``m_block``, then head,
then batch, and for causal masks its longest-first order over L2-sized head sections), with
per-CTA bytes, tensor-core FLOPs, exponentials and shared-memory traffic.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..algorithms.flash2 import ALGORITHM as FLASH2
from ..algorithms.flash2 import Flash2Tiling
from ..algorithms.flash2_backward import BACKWARD, BackwardTiling
from ..algorithms.flash_decoding import ALGORITHM as FLASH_DECODING
from ..algorithms.flash_decoding import SplitKVTiling
from ..core import masks
from ..core.errors import ParameterError, ScheduleError
from ..core.memory import FastTile, SlowArray, Tracer, TwoLevelMemory
from ..core.workload import Shape, cdiv
from ..runner import place_inputs
from . import geometry
from .devices import Device
from .kernels import KernelConfig, head_dim_rounded

__all__ = ["ARRAYS", "FEATURES", "Op", "Phase", "Template", "Traffic", "build",
           "byte_coefficients", "compulsory_bytes", "compulsory_rw", "features",
           "template", "work_coefficients"]

#: Array name -> code in a tile key (``code << 56 | head << 32 | row``).
ARRAYS = {"Q": 1, "K": 2, "V": 3, "O": 4, "L": 5, "O_part": 6, "lse_part": 7, "dO": 8, "D": 9,
          "dQ": 10, "dK": 11, "dV": 12}
_Q_ARRAYS = ("Q", "O", "L", "dO", "D", "dQ")
_KV_ARRAYS = ("K", "V", "dK", "dV")
_SPLIT_ARRAYS = ("O_part", "lse_part")


@dataclass(frozen=True)
class Op:
    """One tile access of a CTA program.

    ``head``: ``"q"`` (the CTA's first query head + ``rel``), ``"kv"`` (its KV head) or
    ``"split"`` (its split; in a body, the inner index).  ``rows``: ``"outer"`` (the CTA's own
    block) or ``"inner"`` (the inner loop's block).
    """

    store: bool
    array: str
    head: str
    rel: int
    rows: str


@dataclass(frozen=True)
class Template:
    prologue: tuple[Op, ...]
    body: tuple[Op, ...]
    epilogue: tuple[Op, ...]


# ---------------------------------------------------------------------- the simulator's trace
class _Recorder(Tracer):
    """A TwoLevelMemory tracer that keeps (store?, base array, first row, last row + 1)."""

    def __init__(self) -> None:
        self.ops: list[tuple[bool, str, int, int]] = []

    def slow(self, arr: SlowArray) -> None:
        pass

    def load(self, tile: FastTile, src: SlowArray, idx: tuple[slice, ...]) -> None:
        self.ops.append((False, src.name, idx[0].start, idx[0].stop))

    def store(self, tile: FastTile, dst: SlowArray, idx: tuple[slice, ...]) -> None:
        self.ops.append((True, dst.name, idx[0].start, idx[0].stop))

    def alloc(self, tile: FastTile, filled: bool = True) -> None:
        pass

    def free(self, tile: FastTile) -> None:
        pass

    def compute(self, tiles: tuple[FastTile, ...], writes: int | None) -> None:
        pass


def _budget_words(cfg: KernelConfig, smem: int | None, reg_words: int) -> int:
    """M for the simulator: the CTA's shared memory in words plus its register-resident words."""
    smem = smem if smem is not None else 1 << 40
    return smem // cfg.elem_bytes + reg_words


def _trace_forward(cfg: KernelConfig, d: int, G: int, Brh: int, smem: int | None):
    Bc = cfg.Bc
    shp = Shape(Brh, 3 * Bc, d, heads=G, kv_heads=1)
    # register-resident per group: O, m, l, tmp (and Q when q = regs) per head, one S tile
    regs = G * Brh * (d + 3) + Brh * Bc
    if cfg.q == "regs":
        regs += G * Brh * d
    if cfg.o == "smem":
        regs -= G * Brh * d
    rec = _Recorder()
    mem = TwoLevelMemory(_budget_words(cfg, smem, regs), mode="count", tracer=rec)
    h = place_inputs(mem, shp, None)
    h["L"] = mem.slow("L", (shp.n_heads * shp.Nq,))
    FLASH2.run_schedule(mem, h, shape=shp, tiling=Flash2Tiling(Brh, Bc, G), scale=1.0)
    return rec.ops, shp


def _trace_split(cfg: KernelConfig, d: int, rows: int, smem: int | None):
    Bc = cfg.Bc
    shp = Shape(rows, 2 * 3 * Bc, d)
    regs = rows * (d + 3) + rows * Bc
    rec = _Recorder()
    mem = TwoLevelMemory(_budget_words(cfg, smem, regs), mode="count", tracer=rec)
    h = place_inputs(mem, shp, None)
    FLASH_DECODING.run_schedule(mem, h, shape=shp, tiling=SplitKVTiling(rows, Bc, 2), scale=1.0)
    return rec.ops, shp


def _trace_backward(cfg: KernelConfig, d: int, smem: int | None):
    Br, Bc = cfg.Br, cfg.Bc
    shp = Shape(3 * Br, Bc, d)
    regs = 2 * Bc * d + 2 * Br * Bc + 2 * Br
    rec = _Recorder()
    mem = TwoLevelMemory(_budget_words(cfg, smem, regs), mode="count", tracer=rec)
    nq, nkv = shp.n_heads * shp.Nq, shp.n_kv_heads * shp.Nkv
    arrays = {n: mem.slow(n, (nq if n in _Q_ARRAYS else nkv, d))
              for n in ("Q", "K", "V", "O", "dO", "dQ", "dK", "dV")}
    arrays["L"] = mem.slow("L", (nq,))
    BACKWARD.run_schedule(mem, arrays, shape=shp, tiling=BackwardTiling(Br, Bc), scale=1.0)
    return rec.ops, shp


def _classify(op, Nq_t: int, outer: int, inner: int, kv_inner: bool):
    """Op of a traced access: head role, relative head, row role, inner index (or None)."""
    store, name, r0, r1 = op
    n = r1 - r0
    if name in _Q_ARRAYS:
        head, local = divmod(r0, Nq_t)
        if kv_inner or n != inner:     # a query tile of the CTA's own block
            if local != 0 or n != outer:
                raise ScheduleError(f"traced {name}[{r0}:{r1}] is not a whole query block")
            return Op(store, name, "q", head, "outer"), None
        if local % inner:
            raise ScheduleError(f"traced {name}[{r0}:{r1}] is not a whole query block")
        return Op(store, name, "q", head, "inner"), local // inner
    if name in _KV_ARRAYS:
        if kv_inner:
            if n != inner or r0 % inner:
                raise ScheduleError(f"traced {name}[{r0}:{r1}] is not a whole key block")
            return Op(store, name, "kv", 0, "inner"), r0 // inner
        if r0 != 0 or n != outer:
            raise ScheduleError(f"traced {name}[{r0}:{r1}] is not the CTA's key block")
        return Op(store, name, "kv", 0, "outer"), None
    if name in _SPLIT_ARRAYS:
        split, local = divmod(r0, Nq_t)
        if local != 0 or n != Nq_t:
            raise ScheduleError(f"traced {name}[{r0}:{r1}] is not one split's partial")
        return Op(store, name, "split", 0, "outer"), split
    raise ScheduleError(f"traced access to an unexpected array {name!r}")


def _periodic(ops: list, idx: list, what: str) -> tuple[Op, ...]:
    """The body period of a loop traced over inner indices 0, 1, 2."""
    n = len(ops)
    if n % 3 or n == 0:
        raise ScheduleError(f"{what}: the traced inner loop is not 3 equal iterations")
    L = n // 3
    for k in range(3):
        for i in range(L):
            if ops[k * L + i] != ops[i] or idx[k * L + i] != k:
                raise ScheduleError(f"{what}: inner iteration {k} differs from the first")
    return tuple(ops[:L])


def template(cfg: KernelConfig, d: int, G: int, Brh: int, smem: int | None = None
             ) -> dict[str, Template]:
    """The CTA programs of ``cfg`` (phase name -> Template), read off the schedule's trace.

    ``G`` query heads per CTA (packing), ``Brh`` query rows per head and CTA, ``smem`` the
    CTA's shared-memory bytes (None: unlimited) for the simulator's capacity check.  The trace
    depends only on the family, the tile, Q's and O's placement and the element type (not on
    stages, P's placement, overlap or the split count), so configs differing in those share it.
    """
    key = dataclasses.replace(cfg, Br=cfg.Br if not cfg.forward else 0, warps=1,
                              stages=1, p="regs", pack_gqa=False, splits=min(cfg.splits, 2),
                              overlap=False, label="", fa1=False)
    return _template(key, d, G, Brh, smem)


@functools.lru_cache(maxsize=1024)
def _template(cfg: KernelConfig, d: int, G: int, Brh: int, smem: int | None
              ) -> dict[str, Template]:
    if not cfg.forward:
        ops, shp = _trace_backward(cfg, d, smem)
        first_k = next(i for i, o in enumerate(ops) if o[1] == "K")
        # preprocessing kernel: the traced passes over query block 0
        pre = []
        for o in ops[:first_k]:
            if o[2] == 0:
                op, _ = _classify(o, shp.Nq, cfg.Br, cfg.Br, kv_inner=True)
                pre.append(op)
        main = [(_classify(o, shp.Nq, cfg.Bc, cfg.Br, kv_inner=False)) for o in ops[first_k:]]
        body_at = [i for i, (op, j) in enumerate(main) if op.rows == "inner"]
        b0, b1 = body_at[0], body_at[-1] + 1
        body = _periodic([m[0] for m in main[b0:b1]], [m[1] for m in main[b0:b1]], "backward")
        return {"pre": Template((), (), tuple(pre)),
                "main": Template(tuple(m[0] for m in main[:b0]), body,
                                 tuple(m[0] for m in main[b1:]))}
    if cfg.splits > 1:
        ops, shp = _trace_split(cfg, d, Brh, smem)
        q_at = [i for i, o in enumerate(ops) if o[1] == "Q"]
        if len(q_at) != 2:
            raise ScheduleError("split schedule: expected one Q load per split")
        split0 = [_classify(o, shp.Nq, Brh, cfg.Bc, kv_inner=True) for o in ops[:q_at[1]]]
        inner = [i for i, (op, _) in enumerate(split0) if op.rows == "inner"]
        b0, b1 = inner[0], inner[-1] + 1
        body = _periodic([m[0] for m in split0[b0:b1]], [m[1] for m in split0[b0:b1]],
                         "split")
        # the reduction: after both splits' partial stores
        last_part = max(i for i, o in enumerate(ops) if o[0] and o[1] in _SPLIT_ARRAYS)
        red = [_classify(o, shp.Nq, Brh, cfg.Bc, kv_inner=True) for o in ops[last_part + 1:]]
        loads = [(Op(op.store, op.array, "split", 0, "outer"), j) for op, j in red
                 if op.array in _SPLIT_ARRAYS]
        if len(loads) % 2:
            raise ScheduleError("split schedule: unexpected reduction")
        L = len(loads) // 2
        if [x[1] for x in loads] != [0] * L + [1] * L or \
                [x[0] for x in loads[:L]] != [x[0] for x in loads[L:]]:
            raise ScheduleError("split schedule: the reduction is not one pass per split")
        comb_body = tuple(x[0] for x in loads[:L])
        comb_epi = tuple(op for op, _ in red if op.array not in _SPLIT_ARRAYS)
        return {"split": Template(tuple(m[0] for m in split0[:b0]), body,
                                  tuple(m[0] for m in split0[b1:])),
                "combine": Template((), comb_body, comb_epi)}
    ops, shp = _trace_forward(cfg, d, G, Brh, smem)
    cl = [_classify(o, shp.Nq, Brh, cfg.Bc, kv_inner=True) for o in ops]
    inner = [i for i, (op, _) in enumerate(cl) if op.rows == "inner"]
    b0, b1 = inner[0], inner[-1] + 1
    body = _periodic([m[0] for m in cl[b0:b1]], [m[1] for m in cl[b0:b1]], "forward")
    return {"main": Template(tuple(m[0] for m in cl[:b0]), body,
                             tuple(m[0] for m in cl[b1:]))}


# ---------------------------------------------------------------------- the grid
@dataclass(frozen=True)
class Phase:
    """One kernel launch: its CTA program and its CTAs in launch order (numpy arrays).

    A frozen record: :func:`build` makes the CTA geometry with its row widths, then the per-CTA
    amounts (``load_bytes`` ... ``smem``, empty until then) as a new record
    (:func:`with_amounts`)."""

    name: str
    template: Template
    qhead: np.ndarray          # first query head of each CTA (key field of Q/O/L/... tiles)
    kvhead: np.ndarray         # its KV head
    split: np.ndarray          # its split (0 without splits)
    o0: np.ndarray             # its own block's rows [o0, o1)
    o1: np.ndarray
    i_base: np.ndarray         # inner loop: blocks of `inner_block` rows from i_base,
    i_first: np.ndarray        # indices [i_first, i_first + i_n), rows clipped to i_end
    i_n: np.ndarray
    i_end: np.ndarray
    inner_block: int
    inner_heads: int           # query heads the inner loop runs over (backward with GQA)
    reverse: bool              # inner loop from the last block down (flash-attn's order)
    ctas_per_sm: int
    warps: int
    row_bytes: dict[str, int]
    rows_per_head: dict[str, int]
    load_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    store_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    flops: np.ndarray = field(default_factory=lambda: np.zeros(0))
    exps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    smem: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def n(self) -> int:
        return len(self.o0)

    def inner_rows(self) -> np.ndarray:
        """Rows of all inner blocks of each CTA (per inner head)."""
        start = self.i_base + self.i_first * self.inner_block
        stop = np.minimum(self.i_base + (self.i_first + self.i_n) * self.inner_block, self.i_end)
        return np.where(self.i_n > 0, stop - start, 0)


@dataclass
class Traffic:
    """Every phase of one kernel config on one workload, plus its byte counts."""

    config: KernelConfig
    shape: Shape
    d_pad: int
    phases: list[Phase]
    compulsory: int
    two_level: int             # bytes of every tile access = the two-level count of the tiles

    @property
    def ctas(self) -> int:
        return sum(p.n for p in self.phases)


def _row_bytes(cfg: KernelConfig, d: int) -> dict[str, int]:
    e, eo = cfg.elem_bytes, cfg.out_bytes
    return {"Q": d * e, "K": d * e, "V": d * e, "O": d * eo, "L": 4, "O_part": 4 * d,
            "lse_part": 4, "dO": d * e, "D": 4, "dQ": 4 * d, "dK": d * e, "dV": d * e}


def _order(kind: str, B: int, H: int, M: int, S: int = 1, *, swizzle: int = 1) -> np.ndarray:
    """Launch order of the (b, h, split, m) grid as flat indices ``((b·H + h)·S + s)·M + m``.

    kind: ``"m,b,h"`` (FA2: m fastest, then batch, then head), ``"m,h,b"`` (FA3 static
    persistent), ``"m,s,h,b"`` (split kernels), ``"lpt"`` (FA3 causal: head sections of
    ``swizzle`` heads, head fastest, m descending).
    """
    b, h, s, m = np.meshgrid(np.arange(B), np.arange(H), np.arange(S), np.arange(M),
                             indexing="ij")
    flat = ((b * H + h) * S + s) * M + m
    if kind == "m,b,h":
        return np.transpose(flat, (1, 0, 2, 3)).reshape(-1)
    if kind in ("m,h,b", "m,s,h,b"):
        return flat.reshape(-1)
    if kind == "lpt":   # FA3 DynamicPersistentTileScheduler (S == 1)
        t = np.arange(B * H * M)
        sec = t // (swizzle * M)
        l2_mod = t - sec * swizzle * M
        nh = np.minimum(swizzle, B * H - sec * swizzle)
        blk = l2_mod // nh
        hin = l2_mod - blk * nh
        bidhb = sec * swizzle + hin
        blk = M - 1 - blk
        return bidhb * M + blk
    raise ValueError(kind)


def _fa3_swizzle(cfg: KernelConfig, shape: Shape, d: int, G: int) -> int:
    size_one_kv_head = shape.Nkv * 2 * d * cfg.elem_bytes
    size_l2 = 32 * 1024 * 1024   # flash-attn's "32 MB for K & V"
    sw = 1 if size_l2 < size_one_kv_head else 1 << int(math.log2(size_l2 // size_one_kv_head))
    return sw * (1 if cfg.pack_gqa else shape.group)


def _forward_phase(cfg, shape, d, G, Brh, tpl, ctas_per_sm, rows) -> Phase:
    B = shape.batch
    H = shape.kv_heads if cfg.pack_gqa else shape.heads
    starts, stops = geometry.block_counts(shape.Nq, Brh)
    M = len(starts)
    lo, hi = geometry.kv_ranges(shape, starts, stops)
    cnt, first_start, _ = geometry.meeting(lo, hi, cfg.Bc, shape.Nkv)
    if cfg.algorithm == "fa3":
        kind = "lpt" if shape.causal else "m,h,b"
    else:
        kind = "m,b,h"
    sw = _fa3_swizzle(cfg, shape, d, G) if kind == "lpt" else 1
    order = _order(kind, B, H, M, swizzle=sw)
    unit, m = np.divmod(order, M)
    b, h = np.divmod(unit, H)
    if cfg.pack_gqa:
        qhead = b * shape.heads + h * G
        kvhead = b * shape.kv_heads + h
    else:
        qhead = b * shape.heads + h
        kvhead = b * shape.kv_heads + h // shape.group
    n = cnt[m]
    return Phase(name="main", template=tpl, qhead=qhead, kvhead=kvhead, split=np.zeros_like(m),
                 o0=starts[m], o1=stops[m], i_base=np.zeros_like(m),
                 i_first=first_start[m] // cfg.Bc, i_n=n, i_end=np.full_like(m, shape.Nkv),
                 inner_block=cfg.Bc, inner_heads=1, reverse=True, ctas_per_sm=ctas_per_sm,
                 warps=cfg.warps, row_bytes=rows[0], rows_per_head=rows[1])


def _split_phases(cfg, shape, d, block_rows, tpls, ctas_per_sm, rows) -> list[Phase]:
    """Split kernel + combine over the (possibly packed) per-head problem."""
    S, Bc = cfg.splits, cfg.Bc
    G = shape.group if cfg.pack_gqa else 1
    Nq = shape.Nq * G
    H = shape.kv_heads if cfg.pack_gqa else shape.heads
    B = shape.batch
    L = cdiv(shape.Nkv, S)
    nsplit = cdiv(shape.Nkv, L)
    starts, stops = geometry.block_counts(Nq, block_rows)
    M = len(starts)
    # query rows of the packed problem see the keys of their own query position
    pos_lo, pos_hi = starts // G, (stops + G - 1) // G
    lo, hi = geometry.kv_ranges(shape, pos_lo, pos_hi)  # same mask geometry per position
    order = _order("m,s,h,b", B, H, M, nsplit)
    rest, m = np.divmod(order, M)
    unit, s = np.divmod(rest, nsplit)
    b, h = np.divmod(unit, H)
    head = b * H + h
    p0 = s * L
    p1 = np.minimum(shape.Nkv, p0 + L)
    slo = np.maximum(lo[m], p0) - p0
    shi = np.minimum(hi[m], p1) - p0
    cnt, first_start, _ = geometry.meeting(slo, shi, Bc, p1 - p0)
    keep = cnt > 0   # the schedule skips splits a block does not see
    kvhead = (b * shape.kv_heads + h) if cfg.pack_gqa else (b * shape.kv_heads + h // shape.group)
    split = Phase(name="split", template=tpls["split"], qhead=head[keep], kvhead=kvhead[keep],
                  split=s[keep], o0=starts[m][keep], o1=stops[m][keep], i_base=p0[keep],
                  i_first=first_start[keep] // Bc, i_n=cnt[keep], i_end=p1[keep],
                  inner_block=Bc, inner_heads=1, reverse=True, ctas_per_sm=ctas_per_sm,
                  warps=cfg.warps, row_bytes=rows[0], rows_per_head=rows[1])
    # combine: one CTA per (head, query block), over the splits its block saw
    corder = _order("m,h,b", B, H, M)
    cunit, cm = np.divmod(corder, M)
    cb, ch = np.divmod(cunit, H)
    vis = np.zeros((nsplit, M), dtype=np.int64)
    for p in range(nsplit):
        q0, q1 = p * L, min(shape.Nkv, (p + 1) * L)
        vis[p] = (np.minimum(hi, q1) > np.maximum(lo, q0))
    nvis = vis.sum(axis=0)
    firstvis = np.argmax(vis, axis=0)
    comb = Phase(name="combine", template=tpls["combine"], qhead=cb * H + ch,
                 kvhead=np.zeros_like(cm), split=np.zeros_like(cm), o0=starts[cm], o1=stops[cm],
                 i_base=np.zeros_like(cm), i_first=firstvis[cm], i_n=nvis[cm],
                 i_end=np.full_like(cm, 1 << 40), inner_block=1, inner_heads=1, reverse=False,
                 ctas_per_sm=16, warps=4, row_bytes=rows[0], rows_per_head=rows[1])
    return [split, comb]


def _backward_phases(cfg, shape, d, tpls, ctas_per_sm, rows) -> list[Phase]:
    Br, Bc = cfg.Br, cfg.Bc
    B, Hk, G = shape.batch, shape.kv_heads, shape.group
    # preprocessing: one CTA per (query head, query block)
    qs, qe = geometry.block_counts(shape.Nq, Br)
    Mq = len(qs)
    order = _order("m,b,h", B, shape.heads, Mq)
    unit, m = np.divmod(order, Mq)
    b, h = np.divmod(unit, shape.heads)
    z = np.zeros_like(m)
    pre = Phase(name="pre", template=tpls["pre"], qhead=b * shape.heads + h, kvhead=z, split=z,
                o0=qs[m], o1=qe[m], i_base=z, i_first=z, i_n=z, i_end=np.full_like(m, shape.Nq),
                inner_block=Br, inner_heads=1, reverse=False, ctas_per_sm=8, warps=4,
                row_bytes=rows[0], rows_per_head=rows[1])
    ks, ke = geometry.block_counts(shape.Nkv, Bc)
    Mk = len(ks)
    qlo, qhi = geometry.q_ranges(shape, ks, ke)
    cnt, first_start, _ = geometry.meeting(qlo, qhi, Br, shape.Nq)
    order = _order("m,b,h", B, Hk, Mk)
    unit, n = np.divmod(order, Mk)
    b, h = np.divmod(unit, Hk)
    main = Phase(name="main", template=tpls["main"], qhead=b * shape.heads + h * G,
                 kvhead=b * Hk + h, split=np.zeros_like(n), o0=ks[n], o1=ke[n],
                 i_base=np.zeros_like(n), i_first=first_start[n] // Br, i_n=cnt[n],
                 i_end=np.full_like(n, shape.Nq), inner_block=Br, inner_heads=G, reverse=True,
                 ctas_per_sm=ctas_per_sm, warps=cfg.warps, row_bytes=rows[0], rows_per_head=rows[1])
    return [pre, main]


# ---------------------------------------------------------------------- per-CTA amounts
#: Per-CTA features every amount is linear in (``Phase.features``).
FEATURES = ("one", "outer", "outer_live", "steps", "inner_rows", "outer_steps")


def features(ph: Phase) -> np.ndarray:
    """(CTAs, 6) array of :data:`FEATURES`: 1, the CTA's own rows, its rows if it runs its loop
    (a CTA whose every key is masked skips its loads, as the schedule does: it writes zeros),
    inner steps (blocks x inner heads), rows of all inner blocks, own rows x steps.  Cached."""
    if len(ph.__dict__.get("_features", ())) == ph.n and "_features" in ph.__dict__:
        return ph.__dict__["_features"]
    outer = (ph.o1 - ph.o0).astype(np.float64)
    live = (ph.i_n > 0) | (not ph.template.body)
    steps = (ph.i_n * ph.inner_heads).astype(np.float64)
    out = ph.__dict__["_features"] = np.stack([
        np.ones(ph.n), outer, np.where(live, outer, 0.0), steps,
        ph.inner_rows().astype(np.float64) * ph.inner_heads, outer * steps], axis=1)
    return out


def byte_coefficients(ph: Phase) -> tuple[np.ndarray, np.ndarray]:
    """(load, store) byte coefficients over :data:`FEATURES`, from the CTA program."""
    load, store = np.zeros(6), np.zeros(6)
    tpl = ph.template
    for part, ops in (("edge", tpl.prologue), ("body", tpl.body), ("edge", tpl.epilogue)):
        for op in ops:
            if part == "edge":
                f = 1 if op.store or not tpl.body else 2
            else:
                f = 4 if op.rows == "inner" else 5
            (store if op.store else load)[f] += ph.row_bytes[op.array]
    return load, store


def work_coefficients(ph: Phase, cfg: KernelConfig, d: int) -> tuple[np.ndarray, ...]:
    """(tensor FLOPs, exponentials, shared-memory bytes) coefficients over :data:`FEATURES`."""
    flops, exps, smem = np.zeros(6), np.zeros(6), np.zeros(6)
    e, Br, Bc = cfg.elem_bytes, cfg.Br, cfg.Bc
    if ph.name in ("main", "split") and cfg.forward:
        flops[3] = 4.0 * Br * Bc * d
        exps[3] = Br * Bc + Br
        smem[3] = fwd_smem_step(cfg, d)
        smem[0] = Br * d * e + 2 * Br * d * cfg.out_bytes
    elif ph.name == "main":   # backward
        flops[3] = 10.0 * Br * Bc * d
        exps[3] = Br * Bc
        smem[3] = bwd_smem_step(cfg, d)
        smem[0] = 2.0 * Bc * d * e
    else:                     # combine and preprocessing: no MMA
        exps[5] = 1.0
    return flops, exps, smem


def with_amounts(ph: Phase, cfg: KernelConfig, d: int) -> Phase:
    """``ph`` with its per-CTA bytes loaded/stored, tensor FLOPs, exponentials and
    shared-memory bytes (a new record; the features' cache carried over)."""
    F = features(ph)
    lc, sc = byte_coefficients(ph)
    fc, ec, mc = work_coefficients(ph, cfg, d)
    out = dataclasses.replace(ph, load_bytes=np.rint(F @ lc).astype(np.int64),
                              store_bytes=np.rint(F @ sc).astype(np.int64),
                              flops=F @ fc, exps=F @ ec, smem=F @ mc)
    out.__dict__["_features"] = F
    return out


def fwd_smem_step(cfg: KernelConfig, d: int) -> float:
    """Shared-memory bytes moved per inner (K/V) step of a forward CTA.

    K and V are written once (cp.async or TMA) and read by every MMA unit that needs them: each
    warp (FA2-style, warps split M) or each consumer warp group (FA3-style); Q is re-read from
    shared memory every step (wgmma's A operand, FA2's ldmatrix) unless ``q = regs``; P in shared
    memory is written and read; an O accumulator in shared memory is read and written (fp32).
    fp8 FA3 transposes V in shared memory (one more read and write of V).
    """
    e, Br, Bc = cfg.elem_bytes, cfg.Br, cfg.Bc
    readers = cfg.consumer_wgs if cfg.algorithm == "fa3" else cfg.warps
    kv = Bc * 2 * d * e
    t = kv * (1 + readers)
    if cfg.q == "smem":
        t += Br * d * e
    if cfg.p == "smem":
        t += 2 * Br * Bc * e
    if cfg.o == "smem":
        t += 2 * Br * d * 4
    if cfg.algorithm == "fa3" and e == 1:
        t += 2 * Bc * d * e
    return float(t)


def bwd_smem_step(cfg: KernelConfig, d: int) -> float:
    """Per inner (Q) step of the backward: Q and dO written; P and dS written; the five GEMMs
    (S = QKᵀ, dP = dO Vᵀ, dV += Pᵀ dO, dK += dSᵀ Q, dQ = dS K) read their shared operands
    (``fa3_bwd``: P stays in registers when ``p = regs``; the fp32 dQ tile goes through shared
    memory to the TMA reduce-add)."""
    e, Br, Bc = cfg.elem_bytes, cfg.Br, cfg.Bc
    writes = 2 * Br * d + 2 * Br * Bc
    reads = 2 * (Br * d + Bc * d) + 2 * (Br * Bc + Br * d) + (Br * Bc + Bc * d)
    if cfg.algorithm != "fa3_bwd":
        return float(e * (writes + reads))
    # fa3_bwd: with Mma_dKV_is_RS (p = regs) P never goes through shared memory; the step's
    # fp32 dQ tile is written there and read back by the TMA reduce-add (d < 256)
    if cfg.p == "regs":
        writes -= Br * Bc
        reads -= Br * Bc
    dq = 2 * Br * d * 4 if d < 256 else 0
    return float(e * (writes + reads) + dq)


# ---------------------------------------------------------------------- compulsory bytes
@functools.lru_cache(maxsize=256)
def _rows_seeing(shape: Shape) -> tuple[int, int]:
    """(query rows that see a key, key rows some query sees) per head."""
    if not shape.causal:
        return shape.Nq, shape.Nkv
    r = np.arange(shape.Nq, dtype=np.int64)
    lo, hi = geometry.kv_ranges(shape, r, r + 1)
    seen = hi > lo
    rc = masks.row_counts(shape)
    return int(seen.sum()), rc.v_rows


def compulsory_rw(cfg: KernelConfig, shape: Shape) -> tuple[int, int]:
    """(bytes read, bytes written) any schedule must move: the inputs that matter read once,
    the outputs written once.

    Forward: the query rows that see a key, the key/value rows some query sees; the output and
    (when the schedule writes it) the logsumexp (fp32).  Backward: Q, K, V, O, dO and L read,
    dQ (fp32), dK and dV written.
    """
    e, eo = cfg.elem_bytes, cfg.out_bytes
    d = shape.d
    if not cfg.forward:
        q = shape.n_heads * shape.Nq
        kv = shape.n_kv_heads * shape.Nkv
        return q * d * e * 3 + q * 4 + kv * d * e * 2, q * d * 4 + kv * d * e * 2
    qrows, kvrows = _rows_seeing(shape)
    lse = 4 * shape.n_heads * shape.Nq if cfg.splits == 1 else 0
    reads = shape.n_heads * qrows * d * e + shape.n_kv_heads * kvrows * 2 * d * e
    return reads, shape.n_heads * shape.Nq * d * eo + lse


def compulsory_bytes(cfg: KernelConfig, shape: Shape) -> int:
    """Read plus written bytes of :func:`compulsory_rw`."""
    r, w = compulsory_rw(cfg, shape)
    return r + w


# ---------------------------------------------------------------------- build
def build(cfg: KernelConfig, shape: Shape, device: Device | None = None,
          ctas_per_sm: int = 1) -> Traffic:
    """The phases, CTAs and per-CTA amounts of ``cfg`` running ``shape``."""
    d_pad = head_dim_rounded(cfg.algorithm, shape.d)
    d = shape.d
    G = shape.group if cfg.pack_gqa else 1
    if cfg.pack_gqa and cfg.Br < G:
        raise ParameterError(f"pack_gqa: Br={cfg.Br} rows cannot hold the {G} query heads of a "
                             "KV head", param="pack_gqa")
    Brh = max(1, cfg.Br // G)
    # split kernels with packing run a per-KV-head problem of Nq·G rows
    qrows = shape.Nq * G if cfg.splits > 1 else shape.Nq
    rows = (_row_bytes(cfg, d),
            {"Q": qrows, "O": qrows, "L": qrows, "dO": shape.Nq, "D": shape.Nq, "dQ": shape.Nq,
             "K": shape.Nkv, "V": shape.Nkv, "dK": shape.Nkv, "dV": shape.Nkv,
             "O_part": shape.Nq * G, "lse_part": shape.Nq * G})
    smem = None
    if device is not None:
        assert device.smem_per_block is not None  # (a device that passed require_model())
        smem = int(device.smem_per_block)
    if not cfg.forward:
        tpls = template(cfg, d, 1, cfg.Br, smem)
        phases = _backward_phases(cfg, shape, d, tpls, ctas_per_sm, rows)
    elif cfg.splits > 1:
        if cfg.pack_gqa and G > 1 and shape.causal and not (shape.Nq == 1 and shape.offset >= 0
                                                           and shape.window is None):
            raise ParameterError("pack_gqa with splits > 1 needs an unmasked shape or Nq = 1 "
                                 "(bottom-right causal, no window)", param="pack_gqa")
        if cfg.splits > shape.Nkv:
            raise ParameterError(f"splits={cfg.splits} > Nkv={shape.Nkv}", param="splits")
        tpls = template(cfg, d, 1, cfg.Br, smem)
        work = shape if not cfg.pack_gqa else Shape(shape.Nq, shape.Nkv, d, batch=shape.batch,
                                                   heads=shape.heads, kv_heads=shape.kv_heads)
        phases = _split_phases(cfg, work, d, cfg.Br, tpls, ctas_per_sm, rows)
    else:
        tpls = template(cfg, d, G, Brh, smem)
        phases = [_forward_phase(cfg, shape, d, G, Brh, tpls["main"], ctas_per_sm, rows)]
    phases = [with_amounts(ph, cfg, d_pad) for ph in phases]
    total = sum(int(ph.load_bytes.sum() + ph.store_bytes.sum()) for ph in phases)
    return Traffic(cfg, shape, d_pad, phases, compulsory_bytes(cfg, shape), total)


# ---------------------------------------------------------------------- streams
def _head_field(ph: Phase, op: Op, cta: np.ndarray, inner_idx=None, g=None) -> np.ndarray:
    if op.head == "kv":
        return ph.kvhead[cta]
    if op.head == "split":
        split = ph.split[cta] if inner_idx is None else inner_idx
        return ph.qhead[cta] * 256 + split
    return ph.qhead[cta] + op.rel + (0 if g is None else g)


def key(array: str, head, row):
    """The tile key ``code << 56 | head << 32 | row`` (numpy arrays or ints)."""
    return (np.int64(ARRAYS[array]) << 56) | (np.asarray(head, dtype=np.int64) << 32) | \
        np.asarray(row, dtype=np.int64)


def cta_ops(ph: Phase, i: int) -> list[tuple[bool, str, int, int, int]]:
    """The ordered tile accesses of CTA ``i``: (store?, array, head field, first row, rows).

    A plain reference expansion (tests compare it with the schedule's full trace and with
    :func:`wave_events`)."""
    tpl = ph.template
    out = []
    cta = np.array([i])
    n = int(ph.i_n[i])
    o0, o1 = int(ph.o0[i]), int(ph.o1[i])
    live = n > 0 or not tpl.body
    for op in tpl.prologue:
        if op.store or live:
            out.append((op.store, op.array, int(_head_field(ph, op, cta)[0]), o0, o1 - o0))
    first, B = int(ph.i_first[i]), ph.inner_block
    for g in range(ph.inner_heads):
        for jj in range(n):
            bi = first + (n - 1 - jj if ph.reverse else jj)
            for op in tpl.body:
                if op.rows == "inner":
                    r0 = int(ph.i_base[i]) + bi * B
                    rows = min(B, int(ph.i_end[i]) - r0)
                else:
                    r0, rows = o0, o1 - o0
                h = _head_field(ph, op, cta, inner_idx=bi if op.head == "split" else None,
                                g=g if op.head == "q" else None)
                out.append((op.store, op.array, int(h[0]), r0, rows))
    for op in tpl.epilogue:
        if op.store or live:
            out.append((op.store, op.array, int(_head_field(ph, op, cta)[0]), o0, o1 - o0))
    return out


def wave_events(ph: Phase, i0: int, i1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tile requests of CTAs ``[i0, i1)`` (one wave), interleaved in time.

    The wave's CTAs start together and advance in lockstep: at step t each issues its t-th
    access; within a step requests go in launch order, and CTAs that request the same tile in
    the same step (CTAs of one head walking the same K/V blocks) make one request.  Returns
    (keys, bytes, store?) arrays in request order.
    """
    tpl = ph.template
    P, b = len(tpl.prologue), len(tpl.body)
    rb = ph.row_bytes
    idx = np.arange(i0, i1)
    order = idx - i0
    n = ph.i_n[idx]
    G = ph.inner_heads
    outer = ph.o1[idx] - ph.o0[idx]
    steps, orders, keys, nbytes, stores = [], [], [], [], []

    def emit(step, ordr, k, nb, st):
        steps.append(step)
        orders.append(ordr)
        keys.append(k)
        nbytes.append(nb)
        stores.append(np.full(len(k), st, dtype=bool))

    for i, op in enumerate(tpl.prologue):
        sel = slice(None) if op.store or not b else n > 0
        c = idx[sel]
        emit(np.full(len(c), i), order[sel], key(op.array, _head_field(ph, op, c), ph.o0[c]),
             outer[sel] * rb[op.array], op.store)
    if b and len(idx):
        # classes of CTAs whose inner requests coincide
        uses_q = any(op.head in ("q", "split") for op in tpl.body)
        cols = [ph.kvhead[idx], ph.i_base[idx], ph.i_first[idx], n, ph.i_end[idx]]
        if uses_q:
            cols += [ph.qhead[idx], ph.o0[idx]]
        mat = np.stack(cols, axis=1)
        _, rep = np.unique(mat, axis=0, return_index=True)
        rep = np.asarray(rep)
        ccta = idx[rep]
        T = n[rep] * G
        tot = int(T.sum())
        if tot:
            cls = np.repeat(np.arange(len(rep)), T)
            start = np.cumsum(T) - T
            j = np.arange(tot) - start[cls]
            nn = n[rep][cls]
            g = j // np.maximum(nn, 1)
            jj = j - g * nn
            first = ph.i_first[ccta][cls]
            bi = first + (nn - 1 - jj if ph.reverse else jj)
            cc = ccta[cls]
            for q, op in enumerate(tpl.body):
                if op.rows == "inner":
                    r0 = ph.i_base[cc] + bi * ph.inner_block
                    rows = np.minimum(ph.inner_block, ph.i_end[cc] - r0)
                else:
                    r0, rows = ph.o0[cc], ph.o1[cc] - ph.o0[cc]
                h = _head_field(ph, op, cc, inner_idx=bi if op.head == "split" else None,
                                g=g if op.head == "q" else None)
                emit(P + j * b + q, order[rep][cls], key(op.array, h, r0), rows * rb[op.array],
                     op.store)
    base = P + n * G * b
    for i, op in enumerate(tpl.epilogue):
        sel = slice(None) if op.store or not b else n > 0
        c = idx[sel]
        emit(base[sel] + i, order[sel], key(op.array, _head_field(ph, op, c), ph.o0[c]),
             outer[sel] * rb[op.array], op.store)
    if not keys:
        z = np.zeros(0, dtype=np.int64)
        return z, z, np.zeros(0, dtype=bool)
    step = np.concatenate(steps)
    ordr = np.concatenate(orders)
    k = np.concatenate(keys)
    nb = np.concatenate(nbytes).astype(np.int64)
    st = np.concatenate(stores)
    srt = np.lexsort((ordr, step))
    k, nb, st = k[srt], nb[srt], st[srt]
    if len(k) > 1:
        keep = np.ones(len(k), dtype=bool)
        keep[1:] = (k[1:] != k[:-1]) | (st[1:] != st[:-1])
        k, nb, st = k[keep], nb[keep], st[keep]
    return k, nb, st
