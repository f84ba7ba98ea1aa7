"""Kernel configurations (Timeloop's "mapping"): tiles, warps, stages, placements, as plain data.

A :class:`KernelConfig` says how one attention kernel runs on a GPU: the algorithm (``fa2``: an
FA2-style forward, warps along M with ``mma.sync``; ``fa3``: an FA3-style forward, a producer warp
group feeding one to three consumer warp groups with warp-group MMAs; ``splitkv``: FA2's split-KV
decode kernel and its combine; ``fa2_bwd``: FA2's backward; ``fa3_bwd``: FA3's backward), the tile (``Br`` query rows, ``Bc``
key rows), the warps, the K/V ``stages`` buffered in shared memory, where Q, P and the O
accumulator live (``q``, ``p``, ``o``: ``"regs"`` or ``"smem"``; the S accumulator is always in
registers, as in every real kernel), the element type (fp16/bf16/fp8, fp32 accumulators), GQA
packing of a KV head's query heads into one CTA's rows (``pack_gqa``) and KV ``splits``.

Named presets reproduce flash-attn's own choices, transcribed from Dao-AILab/flash-attention at
commit :data:`FLASH_ATTN_COMMIT`:

* :func:`fa2_config`: FA2's forward tile table (``csrc/flash_attn/src/flash_fwd_launch_template.h``,
  ``run_mha_fwd_hdim*``; sm80, sm86/89 and sm90 variants; d = 256 chosen by the device's shared
  memory), its split-KV kernel and ``num_splits_heuristic`` (``csrc/flash_attn/flash_api.cpp``), and
  the decode GQA swap (``seqlenq_ngroups_swapped``);
* :func:`fa3_config`: FA3's ``tile_size_fwd_sm90`` (``hopper/tile_size.h``), 2 stages, its
  ``get_num_splits``/``num_splits_heuristic`` (``hopper/flash_api.cpp``, ``hopper/heuristics.h``)
  and ``get_pack_gqa``;
* :func:`fa2_bwd_config`, :func:`fa3_bwd_config` (:data:`FA3_BWD_SM90`): the backward tables of
  ``csrc/flash_attn/src/flash_bwd_launch_template.h`` and ``hopper/flash_bwd_launch_template.h``
  (``run_mha_bwd_hdim*``); :func:`backward_config` picks the named kernel's;
* :func:`sdpa_config`: PyTorch SDPA's flash backend, which builds the FA2 sources of the same
  commit (a git submodule since 2025), so it is :func:`fa2_config`.

The heuristics are transcribed only to *score what flash-attn does*; the library's own answer
(:mod:`.oracle`) derives tiles and splits from the model and never calls them.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from dataclasses import dataclass
from typing import Any

from ..core.checks import check_bool, check_choice, check_int
from ..core.errors import ParameterError
from ..core.workload import Shape, cdiv
from .devices import Device, dtype_bytes, dtype_name

__all__ = ["ALGORITHMS", "FLASH_ATTN_COMMIT", "KERNELS", "KernelConfig", "fa2_config",
           "fa2_num_splits_heuristic", "fa3_config", "fa3_num_splits_heuristic", "fa3_tile_size",
           "fa1_config", "fa2_bwd_config", "FA3_BWD_SM90", "BACKWARD_ALGORITHMS", "backward_config", "fa3_bwd_config",
           "head_dim_rounded", "named_config", "parse_config", "sdpa_config"]

FLASH_ATTN_COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced"

#: The algorithms a config can name, with what each models.
ALGORITHMS = {
    "fa2": "FA2-style forward: warps along M (mma.sync), K/V stages in shared memory",
    "fa3": "FA3-style forward: 1 producer + 1-3 consumer warp groups (wgmma, TMA)",
    "splitkv": "split-KV decode: FA2-style split kernel, then a combine kernel",
    "fa2_bwd": "FA2 backward: K/V blocks per CTA, Q blocks inner",
    "fa3_bwd": "FA3 backward: K/V blocks per CTA, Q blocks inner; 1 producer + 2-3 consumer "
               "warp groups (wgmma, TMA), dQ added in fp32 atomics (sm90)",
}

#: The named kernels of ``attnio gpu kernels`` / ``--kernel``.
KERNELS = {
    "fa2": "flash-attn FA2 forward tables (sm80 / sm86-89 / sm90), split-KV heuristic, GQA swap",
    "fa3": "flash-attn FA3 tile_size_fwd_sm90, 2 stages, split and PackGQA heuristics (sm90)",
    "sdpa": "PyTorch SDPA flash backend = flash-attn FA2 sources (submodule)",
}

_PLACES = ("regs", "smem")
#: Head dims each family instantiates (flash-attn HEADDIM_SWITCH / round_up_headdim).
_HEAD_DIMS = {"fa2": (32, 64, 96, 128, 192, 256), "splitkv": (32, 64, 96, 128, 192, 256),
              "fa2_bwd": (32, 64, 96, 128, 192, 256), "fa3": (64, 96, 128, 192, 256),
              "fa3_bwd": (64, 96, 128, 192, 256)}

#: The backward families (K/V blocks per CTA, Q blocks inner).
BACKWARD_ALGORITHMS = ("fa2_bwd", "fa3_bwd")


def head_dim_rounded(algorithm: str, d: int) -> int:
    """The head dimension the kernel is instantiated for (d rounded up), or ParameterError."""
    for h in _HEAD_DIMS[algorithm]:
        if d <= h:
            return h
    raise ParameterError(f"d={d}: no kernel table covers head dimensions above "
                         f"{_HEAD_DIMS[algorithm][-1]} ({algorithm} instantiates d in "
                         f"{list(_HEAD_DIMS[algorithm])})", param="d")


@dataclass(frozen=True)
class KernelConfig:
    """One kernel's mapping of an attention workload onto a GPU (see the module docstring).

    ``warps`` counts every warp of a CTA (``fa3``: the producer warp group's 4 too, so
    ``warps = 4·(Br/64 + 1)``; without warp specialization, ``ws = False``, no producer group:
    ``4·Br/64``).  ``overlap`` is FA3's IntraWGOverlap (the next S and this P live together in
    registers); ``ws`` its warp specialization (a producer warp group issues the TMA loads, the
    consumer groups ping-pong; FA3 paper §3.1).  ``page_size``: K/V rows per page of a paged
    cache (0: contiguous).  ``label`` names a preset (``"fa3_sm90 d=128"``).
    """

    algorithm: str = "fa2"
    Br: int = 128
    Bc: int = 64
    warps: int = 4
    stages: int = 1
    q: str = "smem"
    p: str = "regs"
    o: str = "regs"
    dtype: str = "bf16"
    pack_gqa: bool = False
    splits: int = 1
    overlap: bool = False
    label: str = ""
    fa1: bool = False
    ws: bool = True
    page_size: int = 0

    # ------------------------------------------------------------------ derived
    @property
    def elem_bytes(self) -> int:
        return dtype_bytes(self.dtype)

    @property
    def out_bytes(self) -> int:
        """Bytes per output element (fp8 kernels write bf16, as FA3 does)."""
        return 2 if self.elem_bytes == 1 else self.elem_bytes

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def consumer_wgs(self) -> int:
        """FA3: consumer (MMA) warp groups (``fa3_bwd``: all warps but the producer group);
        other families: 0."""
        if self.algorithm == "fa3":
            return self.Br // 64
        return self.warps // 4 - 1 if self.algorithm == "fa3_bwd" else 0

    @property
    def wgmma(self) -> bool:
        """An FA3-style (producer/consumer warp groups, wgmma, TMA) kernel."""
        return self.algorithm in ("fa3", "fa3_bwd")

    @property
    def mma_threads(self) -> int:
        return 128 * self.consumer_wgs if self.wgmma else self.threads

    @property
    def forward(self) -> bool:
        return self.algorithm not in BACKWARD_ALGORITHMS

    def short(self) -> str:
        """``fa3 128x176 w12 s2 RS overlap`` (non-default placements, packing and splits too)."""
        s = [f"{self.algorithm} {self.Br}x{self.Bc} w{self.warps} s{self.stages}"]
        if self.algorithm == "fa3":
            s.append("RS" if self.p == "regs" else "SS")
            s.append("overlap" if self.overlap else "no-overlap")
        elif self.p != "regs":
            s.append("p=smem")
        if self.q != "smem":
            s.append(f"q={self.q}")
        if self.o != "regs":
            s.append(f"o={self.o}")
        if self.algorithm == "fa3" and not self.ws:
            s.append("no-ws")
        if self.page_size:
            s.append(f"page={self.page_size}")
        if self.pack_gqa:
            s.append("pack")
        if self.fa1:
            s.append("fa1")
        if self.splits > 1:
            s.append(f"splits={self.splits}")
        return " ".join(s)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ------------------------------------------------------------------ validation
    def validate(self, d: int | None = None) -> KernelConfig:
        """This config if its fields are in range and its tile is a multiple of the MMA shape;
        else ParameterError naming the field (``d``: also check the head dimension)."""
        check_choice("algorithm", self.algorithm, tuple(ALGORITHMS))
        for f in ("Br", "Bc", "warps", "stages", "splits"):
            check_int(f, getattr(self, f), minimum=1)
        for f in ("q", "p", "o"):
            check_choice(f, getattr(self, f), _PLACES)
        check_bool("pack_gqa", self.pack_gqa)
        check_bool("overlap", self.overlap)
        check_bool("fa1", self.fa1)
        check_bool("ws", self.ws)
        if not isinstance(self.page_size, int) or isinstance(self.page_size, bool) or \
                not 0 <= self.page_size <= 1 << 20:
            raise ParameterError(f"page_size must be an integer in [0, 1048576] (0: contiguous "
                                 f"K/V), got {self.page_size!r}", param="page_size")
        if not self.ws and self.algorithm != "fa3":
            raise ParameterError(f"ws=0: warp specialization is an fa3 option; {self.algorithm} "
                                 "has none to turn off", param="ws")
        dtype_name(self.dtype)
        if not 1 <= self.stages <= 3:
            raise ParameterError(f"stages must be 1, 2 or 3, got {self.stages}", param="stages")
        a = self.algorithm
        if a == "fa3":
            if self.Br not in (64, 128, 192):
                raise ParameterError(f"Br={self.Br} is not a multiple of the MMA tile (fa3 gives "
                                     "each consumer warp group 64 rows, wgmma m64, with 1-3 of "
                                     "them): Br in {64, 128, 192}", param="Br")
            want = 4 * (self.Br // 64 + int(self.ws))
            if self.warps != want:
                prod = " + 1 producer" if self.ws else " (ws=0: no producer)"
                raise ParameterError(f"warps={self.warps}: fa3 with Br={self.Br} has "
                                     f"{self.Br // 64} consumer warp groups{prod} = "
                                     f"{want} warps", param="warps")
            if self.q != "smem":
                raise ParameterError("q=regs: fa3 reads Q from shared memory (MmaQK_is_RS = "
                                     "false in flash-attn)", param="q")
            if self.elem_bytes == 1 and self.p != "regs":
                raise ParameterError("p=smem: fp8 fa3 needs P in registers ('MmaPV must be RS "
                                     "if FP8')", param="p")
        elif a == "fa3_bwd":
            if self.warps not in (12, 16):
                raise ParameterError(f"warps={self.warps}: fa3_bwd has 2 or 3 consumer warp "
                                     "groups + 1 producer: warps in (12, 16)", param="warps")
            if self.Br % 16:
                raise ParameterError(f"Br={self.Br} is not a multiple of the MMA tile (16 query "
                                     "rows per wgmma step of fa3_bwd)", param="Br")
            if self.overlap:
                raise ParameterError("overlap is an fa3 (forward) option, not fa3_bwd's",
                                     param="overlap")
            if self.elem_bytes == 1:
                raise ParameterError(f"dtype={self.dtype}: fa3_bwd kernels are fp16/bf16 only",
                                     param="dtype")
        else:
            if self.overlap:
                raise ParameterError(f"overlap is an fa3 option, not {a}'s", param="overlap")
            allowed = (4, 8) if a == "fa2_bwd" else (1, 2, 4, 8)
            if self.warps not in allowed:
                raise ParameterError(f"warps must be one of {allowed} for {a}, got "
                                     f"{self.warps}", param="warps")
            m = 16 * self.warps if a != "fa2_bwd" else 16
            if self.Br % m:
                raise ParameterError(f"Br={self.Br} is not a multiple of the MMA tile ({a} "
                                     f"stacks its {self.warps} warps along M in 16-row mma.sync "
                                     f"tiles): Br must be a multiple of {m}", param="Br")
            if self.elem_bytes == 1:
                raise ParameterError(f"dtype={self.dtype}: {a} kernels are fp16/bf16 only",
                                     param="dtype")
            if a == "splitkv" and self.q != "smem":
                raise ParameterError("q=regs: the split-KV kernel keeps Q in shared memory "
                                     "(flash-attn static_asserts !Is_Q_in_regs)", param="q")
        if self.Bc % 16:
            raise ParameterError(f"Bc={self.Bc} is not a multiple of the MMA tile (16 key "
                                 "rows per MMA step)", param="Bc")
        if self.Br > 256 or self.Bc > 256:
            raise ParameterError(f"Br and Bc must be at most 256, got {self.Br}x{self.Bc}",
                                 param="Br" if self.Br > 256 else "Bc")
        if self.splits > 1 and a not in ("fa3", "splitkv"):
            raise ParameterError(f"splits={self.splits}: KV splits need algorithm splitkv or "
                                 f"fa3, not {a}", param="splits")
        if self.fa1 and a not in ("fa2", "fa2_bwd"):
            raise ParameterError(f"fa1: FlashAttention-1's work partitioning is an fa2 or "
                                 f"fa2_bwd variant, not {a}'s", param="fa1")
        if a in BACKWARD_ALGORITHMS and self.pack_gqa:
            raise ParameterError("pack_gqa is a forward option", param="pack_gqa")
        if d is not None:
            head_dim_rounded(a, d)
        return self


# ---------------------------------------------------------------------- --config parsing
_KEYS = {"algorithm": str, "alg": str, "Br": int, "Bc": int, "warps": int, "stages": int,
         "q": str, "p": str, "o": str, "s": str, "dtype": str, "pack_gqa": bool, "pack": bool,
         "splits": int, "overlap": bool, "fa1": bool, "ws": bool, "page": int,
         "page_size": int}


def parse_config(text: str, **defaults: Any) -> KernelConfig:
    """A config from ``"Br=128,Bc=176,stages=2,warps=12"`` (keys: algorithm, Br, Bc, warps,
    stages, q, p, o, pack, splits, overlap, ws, page, dtype); ``defaults`` fill the rest.  An
    fa3 config not naming them gets FA3's shipped mechanisms: ``overlap=1`` (IntraWGOverlap),
    ``ws=1`` (warp specialization), 2 stages, the warps its ``Br`` and ``ws`` imply.

    >>> parse_config("Br=128,Bc=176,stages=2,warps=12", algorithm="fa3").short()
    'fa3 128x176 w12 s2 RS overlap'
    >>> parse_config("Br=128,Bc=176,overlap=0", algorithm="fa3").short()
    'fa3 128x176 w12 s2 RS no-overlap'
    """
    fields: dict[str, Any] = {}
    if not str(text).strip():
        raise ParameterError("config is empty: give comma-separated key=value items (keys: Br "
                             "Bc warps stages q p o pack splits overlap algorithm dtype)",
                             param="config")
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        if "=" not in part:
            raise ParameterError(f"config item {part!r} is not key=value; keys are Br Bc "
                                 "warps stages q p o pack splits overlap algorithm dtype",
                                 param="config")
        key, val = (x.strip() for x in part.split("=", 1))
        if key not in _KEYS:
            raise ParameterError(f"config key {key!r} is unknown; keys are Br Bc warps stages "
                                 "q p o pack splits overlap ws page algorithm dtype", param="config")
        typ = _KEYS[key]
        name = {"alg": "algorithm", "s": "p", "pack": "pack_gqa",
                "page": "page_size"}.get(key, key)
        if typ is int:
            try:
                fields[name] = int(val)
            except ValueError:
                raise ParameterError(f"config {key}={val!r} must be an integer",
                                     param="config") from None
        elif typ is bool:
            low = val.lower()
            if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ParameterError(f"config {key}={val!r} must be true or false",
                                     param="config")
            fields[name] = low in ("1", "true", "yes", "on")
        else:
            fields[name] = val
    base = {**defaults, **fields}
    if base.get("algorithm") == "fa3":
        base.setdefault("overlap", True)
        base.setdefault("ws", True)
    if "warps" not in fields and base.get("algorithm") == "fa3":
        base["warps"] = 4 * (int(base.get("Br", KernelConfig.Br)) // 64 + int(bool(base["ws"])))
    if "stages" not in fields and base.get("algorithm") == "fa3":
        base["stages"] = 2
    return KernelConfig(**base)


# ---------------------------------------------------------------------- flash-attn FA2 table
def _sm_family(dev: Device) -> str:
    cc = dev.compute_capability
    if cc == "8.0":
        return "sm80"
    if cc in ("8.6", "8.7", "8.9"):
        return "sm86_89"
    if cc.startswith(("9", "10")):
        return "sm90"
    raise ParameterError(f"device={dev.name!r} (compute capability {cc or 'n/a'}) runs no "
                         "flash-attn CUDA kernel table", param="device")


def _fa2_tile(d: int, causal: bool, fam: str, dev: Device) -> tuple[int, int, int]:
    """``run_mha_fwd_hdim{d}`` (no dropout): (kBlockM, kBlockN, kNWarps)."""
    if d == 32 or d == 64:
        return 128, 128, 4
    if d == 96:
        return (64, 64, 4) if fam == "sm86_89" and causal else (128, 64, 4)
    if d == 128:
        if fam == "sm86_89":
            return (64, 64, 4) if causal else (128, 32, 4)
        return 128, 64, 4
    if d == 192:
        return 128, 64, 8
    # d == 256: "For A100, we want to run with 128 x 64 (128KB smem). For H100 we want to run
    # with 64 x 64 (96KB smem) since then we can get 2 CTAs per SM."
    assert dev.smem_per_block is not None and dev.smem_per_sm is not None
    if (dev.smem_per_block >= 2 * d * (128 + 2 * 64)
            and dev.smem_per_sm < 4 * d * (64 + 2 * 64)):
        return 128, 64, 8
    return 64, 64, 4


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def fa2_num_splits_heuristic(batch_nheads_mblocks: int, num_SMs: int, num_n_blocks: int,
                             max_splits: int) -> int:
    """flash-attn FA2's ``num_splits_heuristic`` (csrc/flash_attn/flash_api.cpp), transcribed to
    score FA2's choice; float32 arithmetic emulated as in the C++."""
    if batch_nheads_mblocks >= _f32(_f32(0.8) * num_SMs):
        return 1
    max_splits = min(max_splits, num_SMs, num_n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or cdiv(num_n_blocks, s) != cdiv(num_n_blocks, s - 1)

    eff, best = [], 0.0
    for s in range(1, max_splits + 1):
        if not eligible(s):
            eff.append(0.0)
            continue
        n_waves = _f32(_f32(batch_nheads_mblocks * s) / _f32(num_SMs))
        e = _f32(n_waves / math.ceil(n_waves))
        best = max(best, e)
        eff.append(e)
    for s in range(1, max_splits + 1):
        if eligible(s) and eff[s - 1] >= 0.85 * best:
            return s
    return 1


def fa2_config(device: Device, shape: Shape, dtype: str = "bf16", page_size: int = 0
               ) -> KernelConfig:
    """The config flash-attn's FA2 forward (``mha_fwd``) runs for ``shape`` on ``device``.

    ``page_size`` > 0: K/V in a paged cache of that many tokens per page
    (``mha_fwd_kvcache`` with a ``block_table``, ``csrc/flash_attn/flash_api.cpp``): flash-attn
    refuses a page size that is not a multiple of 256 ("Paged KV cache block size must be
    divisible by 256") and always runs the split-KV kernel (``run_mha_fwd(params, stream,
    /*force_split_kernel=*/paged_KV)``), with one split where its heuristic picks none."""
    fam = _sm_family(device)
    if page_size and page_size % 256:
        raise ParameterError(f"page_size must be a multiple of 256 for flash-attn's FA2 paged "
                             f"K/V cache (flash_api.cpp), got {page_size}", param="page_size")
    d = head_dim_rounded("fa2", shape.d)
    if dtype_bytes(dtype) != 2:
        raise ParameterError(f"dtype={dtype}: flash-attn FA2 kernels are fp16/bf16 only",
                             param="dtype")
    # seqlenq_ngroups_swapped: decode with GQA packs the query heads of a KV head into M
    swapped = (shape.Nq == 1 and shape.group > 1 and shape.window is None
               and shape.d % 8 == 0)
    seqlen_q = shape.group if swapped else shape.Nq
    nheads = shape.n_kv_heads if swapped else shape.n_heads  # batch x heads
    block_n = 256 if d <= 64 else (128 if d <= 128 else 64)
    assert device.sm_count is not None  # (a device that passed require_model())
    splits = fa2_num_splits_heuristic(nheads * cdiv(seqlen_q, 64),
                                      device.sm_count * 2, cdiv(shape.Nkv, block_n), 128)
    label = f"fa2_{fam} d={d}"
    if splits > 1 or page_size:
        return KernelConfig("splitkv", 64, block_n, 4, 1, dtype=dtype, pack_gqa=swapped,
                            splits=splits, page_size=page_size,
                            label=label + f" splitkv splits={splits}")
    Br, Bc, w = _fa2_tile(d, shape.causal, fam, device)
    return KernelConfig("fa2", Br, Bc, w, 1, dtype=dtype, pack_gqa=swapped, label=label)


def sdpa_config(device: Device, shape: Shape, dtype: str = "bf16", page_size: int = 0
                ) -> KernelConfig:
    """PyTorch SDPA's flash backend: the FA2 sources of the same commit (a submodule).  It
    takes contiguous K/V only (``scaled_dot_product_attention`` has no page table)."""
    if page_size:
        raise ParameterError("page_size: PyTorch SDPA takes contiguous K/V only (no page "
                             f"table), got {page_size}", param="page_size")
    c = fa2_config(device, shape, dtype)
    return dataclasses.replace(c, label=c.label.replace("fa2_", "sdpa(fa2)_", 1))


# ---------------------------------------------------------------------- flash-attn FA3 table
def fa3_tile_size(d: int, dv: int, causal: bool, local: bool, element_size: int = 2,
                  v_colmajor: bool = False, paged_kv_non_tma: bool = False,
                  softcap: bool = False) -> tuple[int, int, bool, bool]:
    """``tile_size_fwd_sm90`` (hopper/tile_size.h): (kBlockM, kBlockN, MmaPV_is_RS,
    IntraWGOverlap), for rounded head dims."""
    if element_size == 2:
        if d <= 64:
            if dv == 512:
                return 64, 64, False, False
            if dv == 256:
                return 128, 96, True, False
            n128 = causal or local or paged_kv_non_tma
            return 192, 128 if n128 else 192, n128, True
        if d <= 96:
            return 192, 128 if (local or paged_kv_non_tma) else 144, False, True
        if d <= 128:
            n128 = causal or local or paged_kv_non_tma
            return 128, 128 if n128 else 176, True, True
        if d <= 192:
            return 128, 96 if (paged_kv_non_tma or local) else (128 if dv <= 128 else 112), True, True
        return 128, 64 if local else 80, True, True
    if d <= 64:
        return 192, 160, True, True
    if d <= 96:
        return 192, 128, True, True
    if d <= 128:
        return 128, 160 if paged_kv_non_tma else (192 if v_colmajor or (softcap and local) else 224), True, True
    if d <= 192:
        return 128, 128 if (paged_kv_non_tma or softcap) and local else 160, True, True
    return 128, 64 if local else 128, True, not paged_kv_non_tma


def fa3_num_splits_heuristic(total_mblocks: int, num_SMs: int, num_n_blocks: int,
                             num_m_blocks: int, size_one_kv_head: int, is_causal_or_local: bool,
                             max_splits: int) -> int:
    """flash-attn FA3's ``num_splits_heuristic`` (hopper/heuristics.h), transcribed to score
    FA3's choice; float32 arithmetic emulated as in the C++."""
    if total_mblocks >= _f32(_f32(0.8) * num_SMs):
        size_l2 = 50 * 1024 * 1024
        if size_one_kv_head > size_l2 and num_m_blocks >= num_SMs * 2 and not is_causal_or_local:
            return min(cdiv(size_one_kv_head, size_l2), max_splits)
        return 1
    if num_n_blocks <= 4:
        return 1
    max_splits = min(max_splits, num_SMs, num_n_blocks)
    eff, best = [], 0.0
    for s in range(1, max_splits + 1):
        n_waves = _f32(_f32(total_mblocks * s) / _f32(num_SMs))
        e = _f32(n_waves / math.ceil(n_waves))
        best = max(best, e)
        eff.append(e)
    for s in range(1, max_splits + 1):
        if eff[s - 1] >= 0.85 * best:
            return s
    return 1


def fa3_config(device: Device, shape: Shape, dtype: str = "bf16", page_size: int = 0
               ) -> KernelConfig:
    """The config flash-attn's FA3 forward runs for ``shape`` on ``device`` (Hopper only).

    ``page_size`` > 0: K/V in a paged cache of that many tokens per page.  ``get_pagedkv_tma``
    (``hopper/flash_api.cpp``) loads the pages with TMA only when the page size is a multiple
    of the tile's kBlockN and ``seqlen_q x heads/kv_heads > kBlockM``; otherwise the kernel is
    ``PagedKVNonTMA``: ``tile_size_fwd_sm90(..., paged_kv_non_TMA=true)`` picks the tile, and
    PackGQA is always on (``get_pack_gqa``)."""
    if not device.wgmma:
        raise ParameterError(f"kernel fa3 needs Hopper (compute capability 9.0, wgmma); "
                             f"device {device.name} is compute capability "
                             f"{device.compute_capability or 'n/a'}", param="kernel")
    d = head_dim_rounded("fa3", shape.d)
    e = dtype_bytes(dtype)
    local = shape.window is not None
    causal = shape.causal and not local
    Br, Bc, rs, overlap = fa3_tile_size(d, d, causal, local, e)
    g = shape.group
    non_tma = bool(page_size) and not (page_size % Bc == 0 and shape.Nq * g > Br)
    if non_tma:
        Br, Bc, rs, overlap = fa3_tile_size(d, d, causal, local, e, paged_kv_non_tma=True)
    # get_num_splits (hopper/flash_api.cpp): packed rows, KV heads, L2 rule
    seqlen_k_loaded = (shape.Nkv if shape.window is None
                       else max(0, min(shape.Nkv, shape.window + Br)))
    num_n = cdiv(seqlen_k_loaded, Bc)
    num_m = cdiv(shape.Nq * g, Br)
    size_one_kv_head = shape.Nkv * (d + d) * e
    assert device.sm_count is not None  # (a device that passed require_model())
    splits = fa3_num_splits_heuristic(shape.n_kv_heads * num_m, device.sm_count,
                                      num_n, num_m, size_one_kv_head, shape.causal, 128)
    if splits > 1 or non_tma:
        pack = True
    elif shape.group == 1:
        pack = False
    else:  # should_pack_gqa
        def eff(rows: int) -> float:
            return rows / (cdiv(rows, Br) * Br)

        pack = eff(shape.Nq) < 0.9 * eff(shape.Nq * g)
    return KernelConfig("fa3", Br, Bc, 4 * (Br // 64 + 1), 2, q="smem",
                        p="regs" if rs else "smem", dtype=dtype, pack_gqa=pack, splits=splits,
                        overlap=overlap, page_size=page_size,
                        label=f"fa3_sm90 d={d}" + (" paged non-TMA" if non_tma else ""))


def fa2_bwd_config(device: Device, shape: Shape, dtype: str = "bf16") -> KernelConfig:
    """The config flash-attn's FA2 backward (``run_mha_bwd_hdim*`` of
    ``csrc/flash_attn/src/flash_bwd_launch_template.h``, no dropout) runs: (kBlockM = Br query
    rows, kBlockN = Bc key rows, 8 warps), Q/dO double-buffered (2 stages) unless the traits set
    No_double_buffer; the shared-memory thresholds pick the variant by the device's opt-in
    maximum per block."""
    _sm_family(device)
    d = head_dim_rounded("fa2_bwd", shape.d)
    if dtype_bytes(dtype) != 2:
        raise ParameterError(f"dtype={dtype}: flash-attn FA2 kernels are fp16/bf16 only",
                             param="dtype")
    assert device.smem_per_block is not None  # (a device that passed require_model())
    smem = device.smem_per_block
    KiB = 1024
    if d == 32:
        t = (128, 128, 2)
    elif d == 64:
        t = (128, 128, 2) if smem >= 144 * KiB else (64, 128, 2)
    elif d == 96:
        t = (64, 128, 2)
    elif d == 128:
        t = (64, 128, 2) if smem >= 144 * KiB else (64, 64, 2)
    elif d == 192:
        t = (64, 64, 2) if smem >= 136 * KiB else (64, 64, 1)
    else:
        t = (64, 64, 2) if smem >= 176 * KiB else (64, 64, 1)
    return KernelConfig("fa2_bwd", t[0], t[1], 8, t[2], dtype=dtype,
                        label=f"fa2_bwd_{_sm_family(device)} d={d}")


#: flash-attn FA3's Hopper backward (``hopper/flash_bwd_launch_template.h`` at
#: :data:`FLASH_ATTN_COMMIT`, ``run_mha_bwd_hdim{64,96,128,192,256}``, the ``Arch >= 90``
#: branch, no softcap): head dim -> (causal or local?) -> the ``run_mha_bwd_dispatch`` template
#: arguments.  ``Stages_Q`` is 2 on sm90 (``Stages = Arch >= 90 ? 2 : ...``); the warp groups are
#: ``NumMmaWarpGroups`` consumers + 1 producer (``flash_bwd_kernel_sm90.h``: setmaxnreg 24/240
#: with 2 consumer groups, 32/160 with 3); ``Mma_dKV_is_RS = AtomLayoutMSdP == 1 &&
#: AtomLayoutNdKV == NumMmaWarpGroups && SdP_swapAB && !dKV_swapAB``
#: (``mainloop_bwd_sm90_tma_gmma_ws.hpp``): P then never goes to shared memory.  dQ is accumulated
#: per CTA in fp32 shared memory (``dQacc_use_TMA = kHeadDim < 256``) and added to a global fp32
#: dQaccum by TMA reduce-add; ``flash_bwd_convert_dq`` then writes dQ in the input type.
FA3_BWD_SM90: dict[int, dict[bool, dict[str, Any]]] = {}


def _fa3_bwd_row(tile: tuple[int, int], stages: tuple[int, int],
                 swaps: tuple[bool, bool, bool], wgs: int, atoms: tuple[int, int, int],
                 v_in_regs: bool) -> dict[str, Any]:
    """One row of flash-attn's sm90 backward dispatch, its template arguments grouped as
    ``run_mha_bwd_dispatch`` lists them: tile (kBlockM, kBlockN), stages (Stages_dO,
    Stages_dS), swaps (SdP_swapAB, dKV_swapAB, dQ_swapAB), NumMmaWarpGroups, atoms
    (AtomLayoutMSdP, AtomLayoutNdKV, AtomLayoutMdQ), V_in_regs."""
    (Br, Bc), (st_do, st_ds) = tile, stages
    (sdp_swap, dkv_swap, dq_swap), (at_sdp, at_dkv, at_dq) = swaps, atoms
    rs = at_sdp == 1 and at_dkv == wgs and sdp_swap and not dkv_swap
    return {"Br": Br, "Bc": Bc, "Stages_Q": 2, "Stages_dO": st_do, "Stages_dS": st_ds,
            "SdP_swapAB": sdp_swap, "dKV_swapAB": dkv_swap, "dQ_swapAB": dq_swap,
            "NumMmaWarpGroups": wgs, "warps": 4 * (wgs + 1), "AtomLayoutMSdP": at_sdp,
            "AtomLayoutNdKV": at_dkv, "AtomLayoutMdQ": at_dq, "V_in_regs": v_in_regs,
            "Mma_dKV_is_RS": rs}


for _causal in (False, True):
    FA3_BWD_SM90.setdefault(64, {})[_causal] = _fa3_bwd_row(
        (128, 128), (2, 2), (True, False, False), 2, (1, 2, 2), False)
    FA3_BWD_SM90.setdefault(96, {})[_causal] = _fa3_bwd_row(
        (64, 128), (2, 2), (True, False, False), 2, (1, 2, 1), True)
    FA3_BWD_SM90.setdefault(128, {})[_causal] = (
        _fa3_bwd_row((64, 128), (2, 2), (True, False, False), 2, (1, 2, 1), False) if _causal
        else _fa3_bwd_row((80, 128), (2, 2), (True, False, True), 2, (1, 2, 1), False))
    FA3_BWD_SM90.setdefault(192, {})[_causal] = _fa3_bwd_row(
        (64, 96), (1, 1), (False, True, False), 3, (1, 1, 1), False)
    FA3_BWD_SM90.setdefault(256, {})[_causal] = _fa3_bwd_row(
        (64, 80), (1, 1), (False, True, True), 2, (1, 1, 1), False)


def fa3_bwd_config(device: Device, shape: Shape, dtype: str = "bf16") -> KernelConfig:
    """The config flash-attn's FA3 backward runs for ``shape`` on ``device`` (Hopper only):
    :data:`FA3_BWD_SM90` (causal and local windows take the causal row).  attnio's fields:
    ``stages`` = Stages_dO (= Stages_dS in every shipped sm90 row; Q has 2), ``p="regs"`` when
    ``Mma_dKV_is_RS`` (P stays in registers) else ``"smem"``."""
    if not device.wgmma:
        raise ParameterError(f"kernel fa3 needs Hopper (compute capability 9.0, wgmma); "
                             f"device {device.name} is compute capability "
                             f"{device.compute_capability or 'n/a'}", param="kernel")
    d = head_dim_rounded("fa3_bwd", shape.d)
    if dtype_bytes(dtype) != 2:
        raise ParameterError(f"dtype={dtype}: flash-attn's FA3 backward is fp16/bf16 only",
                             param="dtype")
    r = FA3_BWD_SM90[d][shape.causal or shape.window is not None]
    return KernelConfig("fa3_bwd", r["Br"], r["Bc"], r["warps"], r["Stages_dO"], q="smem",
                        p="regs" if r["Mma_dKV_is_RS"] else "smem", dtype=dtype,
                        label=f"fa3_bwd_sm90 d={d}")


def fa1_config(device: Device, shape: Shape, dtype: str = "bf16", backward: bool = False
               ) -> KernelConfig:
    """FlashAttention-1 (flash-attn 1.x, ``fmha``): 4 warps that split the 256 keys of a step
    (split-K) over 16-row query steps forward, 8 warps over 128-key blocks backward.  attnio's
    fa2-family grids need 16 rows per warp, so the forward is modelled at Br = 64 (the
    reduction and round-trip costs per step scale with Br, so their share of a step is the
    same as at 16 rows)."""
    _sm_family(device)
    if dtype_bytes(dtype) != 2:
        raise ParameterError(f"dtype={dtype}: FlashAttention-1 kernels are fp16/bf16 only",
                             param="dtype")
    if backward:
        head_dim_rounded("fa2_bwd", shape.d)
        return KernelConfig("fa2_bwd", 64, 128, 8, 1, dtype=dtype, fa1=True, label="fa1 bwd")
    head_dim_rounded("fa2", shape.d)
    return KernelConfig("fa2", 64, 256 if shape.d <= 64 else 128, 4, 1, dtype=dtype, fa1=True,
                        label="fa1 fwd")


def named_config(kernel: str, device: Device, shape: Shape, dtype: str = "bf16",
                 page_size: int = 0) -> KernelConfig:
    """The config the named kernel (``fa2``, ``fa3``, ``sdpa``) runs for ``shape``;
    ``page_size`` > 0: with K/V in a paged cache of that many tokens per page."""
    check_choice("kernel", kernel, tuple(KERNELS))
    fn = {"fa2": fa2_config, "fa3": fa3_config, "sdpa": sdpa_config}[kernel]
    return fn(device, shape, dtype, page_size)


def backward_config(kernel: str, device: Device, shape: Shape, dtype: str = "bf16"
                    ) -> KernelConfig:
    """The backward config the named kernel runs: ``fa3`` -> :func:`fa3_bwd_config` (Hopper
    only), ``fa2`` and ``sdpa`` -> :func:`fa2_bwd_config`."""
    check_choice("kernel", kernel, tuple(KERNELS))
    fn = fa3_bwd_config if kernel == "fa3" else fa2_bwd_config
    return fn(device, shape, dtype)


def kernel_table(kernel: str, device: Device, dtype: str = "bf16", *, N: int = 8192,
                 batch: int = 4, heads: int = 32) -> list[dict[str, Any]]:
    """The named kernel's forward tile choice for every head dimension it covers, causal and
    not, on a prefill workload large enough that no KV split is chosen (``attnio gpu
    kernels``)."""
    check_choice("kernel", kernel, tuple(KERNELS))
    fam = "fa3" if kernel == "fa3" else "fa2"
    rows = []
    for d in _HEAD_DIMS[fam]:
        for causal in (False, True):
            shp = Shape(N, N, d, causal=causal, batch=batch, heads=heads)
            c = named_config(kernel, device, shp, dtype)
            rows.append({"d": d, "causal": causal, "config": c, "shape": shp})
    return rows
