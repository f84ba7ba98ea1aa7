"""Devices: the figures of each GPU the hardware model needs, every one cited, in one table.

A :class:`Device` is plain data (Timeloop's "architecture"): SM count; per SM the register file,
the register limit per thread, threads and CTAs, shared memory per SM and per block; the L2
(bytes, line and sector); HBM bandwidth; tensor-core FLOP/s per dtype; the clock.  Each figure
names its source in ``provenance`` (keys of :data:`SOURCES`); docs/devices.md prints the table.
A figure no primary source publishes is ``None`` (the model then refuses the device, saying
which figure is missing) or, where it is inferred, listed in ``inferred``; the model's own
*assumptions* are listed in ``assumed`` and in docs/hardware.md.  The memory system's figures no
vendor publishes (L2 hit and DRAM latency, a TMA load's extra latency, one SM's share of the L2
bandwidth) come from microbenchmarks (``luo2025``, ``gpu_benches``, ``cc_h100``), marked
``derived`` where arithmetic on a measurement (a mean, a division by the SM count) gives them.

The two-level planner's presets (``attnio plan --device``) come from the same table: its fast
memory M is what one CTA can use, the per-block shared memory (``fast_bytes``), in words of the
dtype.  Two CPU presets (``cpu-l1d``, ``cpu-l2``) exist for the two-level model only.

>>> get("a100").words(2)
83456
>>> get("h100").name, get("h100").sm_count
('h100-sxm', 132)
>>> words_for(196608, "float32")
49152
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.checks import check_int
from ..core.errors import ParameterError, UnknownNameError

__all__ = ["ALIASES", "DTYPE_BYTES", "GENERATIONS", "SOURCES", "Device", "all_devices",
           "dtype_bytes", "dtype_name", "generation_of", "get", "gpu_names", "names",
           "words_for"]

KiB, MiB = 1024, 1024 * 1024

DTYPE_BYTES = {
    "float64": 8, "fp64": 8, "double": 8,
    "float32": 4, "fp32": 4, "float": 4, "tf32": 4,
    "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "float8": 1, "fp8": 1, "int8": 1, "fp8_e4m3": 1, "e4m3": 1,
}

#: Canonical tensor-core dtype names (the keys of ``Device.tensor_flops``).
_DTYPE_CANON = {
    "float16": "fp16", "fp16": "fp16", "half": "fp16",
    "bfloat16": "bf16", "bf16": "bf16",
    "float8": "fp8", "fp8": "fp8", "fp8_e4m3": "fp8", "e4m3": "fp8", "int8": "fp8",
    "tf32": "tf32", "float32": "tf32", "fp32": "tf32", "float": "tf32",
}

#: Sources: key -> (title, URL, read during the research behind this table?).  ``False`` means
#: the figure is taken from the named official document whose text could not be re-read here.
SOURCES: dict[str, tuple[str, str, bool]] = {
    "cuda_cc": ("CUDA Programming Guide, 5.1 Compute Capabilities, Tables 30-33 (device and SM "
                "information, memory, shared memory capacity per compute capability)",
                "https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/"
                "compute-capabilities.html", True),
    "cuda_smem_banks": ("CUDA C++ Programming Guide 12.6: shared memory has 32 banks, each 32 "
                        "bits per clock; 1 KB per block reserved for system use",
                        "https://docs.nvidia.com/cuda/archive/12.6.0/cuda-c-programming-guide/"
                        "index.html", True),
    "cuda_arith": ("CUDA C++ Programming Guide, Arithmetic Instructions throughput table: 16 "
                   "results per clock per SM for exp2/log2/rcp/rsqrt/sin/cos (CC 5.x-9.0)",
                   "https://docs.nvidia.com/cuda/archive/12.6.0/cuda-c-programming-guide/"
                   "index.html#arithmetic-instructions", False),
    "ncu_sector": ("Nsight Compute Kernel Profiling Guide: a sector is 32 aligned bytes, an "
                   "L1/L2 cache line is four sectors (128 B)",
                   "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html", False),
    "a100_blog": ("NVIDIA Ampere Architecture In-Depth (NVIDIA Technical Blog, 2020-05-14), "
                  "Tables 1, 3, 4", "https://developer.nvidia.com/blog/"
                  "nvidia-ampere-architecture-in-depth/", True),
    "a100_ds": ("NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: HBM2e 2,039 GB/s; "
                "BF16/FP16 312 TFLOPS dense)", "https://www.nvidia.com/en-us/data-center/a100/",
                False),
    "h100_blog": ("NVIDIA Hopper Architecture In-Depth (NVIDIA Technical Blog, 2022-03-22): SM "
                  "counts, 50 MB L2, 256 KB L1+shared, compute-capability table",
                  "https://developer.nvidia.com/blog/nvidia-hopper-architecture-in-depth/", True),
    "h100_wp": ("NVIDIA H100 Tensor Core GPU Architecture whitepaper V1.04, Tables 1 and 3 (BF16 "
                "dense 989.4 TFLOPS SXM5, 756 PCIe)",
                "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper", True),
    "h100_page": ("NVIDIA H100 product page / datasheet, H100 SXM: 80GB, 3.35TB/s, BF16 1,979* "
                  "TFLOPS, FP8 3,958* (*sparse)", "https://www.nvidia.com/en-us/data-center/h100/",
                  True),
    "h100_pcie_ds": ("NVIDIA H100 datasheet (2022-2023), PCIe column: 80GB HBM2e, 2TB/s, FP8 "
                     "3,026*, TF32 756*", "https://resources.nvidia.com/en-us-tensor-core/"
                     "nvidia-tensor-core-gpu-datasheet", False),
    "h200_page": ("NVIDIA H200 product page / datasheet: 141GB HBM3e, 4.8TB/s, BF16 1,979* "
                  "TFLOPS, FP8 3,958* (*sparse)", "https://www.nvidia.com/en-us/data-center/h200/",
                  False),
    "dgx_b200": ("NVIDIA DGX B200 datasheet: 8x B200, 1,440GB, 64TB/s HBM3e",
                 "https://www.nvidia.com/en-us/data-center/dgx-b200/", False),
    "hgx_page": ("NVIDIA HGX platform page, HGX B200 (8 GPUs): FP16/BF16 36 PFLOPS*, FP8 72*, "
                 "TF32 18* (*sparse)", "https://www.nvidia.com/en-us/data-center/hgx/", False),
    "ada_wp": ("NVIDIA Ada GPU Architecture whitepaper v2.1, Appendix A (GeForce RTX 4090): 128 "
               "SMs, 2520 MHz boost, 1008 GB/s, L2 73728 KB, FP16/BF16 tensor with FP32 "
               "accumulate 165.2 TFLOPS", "https://images.nvidia.com/aem-dam/Solutions/geforce/"
               "ada/nvidia-ada-gpu-architecture.pdf", True),
    "ada_tuning": ("NVIDIA Ada Tuning Guide 1.4.1.1 (48 warps, 24 blocks, 100 KB smem per SM, 99 "
                   "KB per block)", "https://docs.nvidia.com/cuda/ada-tuning-guide/index.html",
                   True),
    "l40s_ds": ("NVIDIA L40S datasheet: 18,176 CUDA cores, 568 Tensor Cores, 48GB GDDR6, "
                "864GB/s, BF16 362.05 TFLOPS dense", "https://www.nvidia.com/en-us/data-center/"
                "l40s/", False),
    "mi300x_ds": ("AMD Instinct MI300X data sheet: 304 CUs, 2100 MHz, 192 GB HBM3, 5.3 TB/s, "
                  "FP16/BF16 1307.4 TFLOPS dense", "https://www.amd.com/content/dam/amd/en/"
                  "documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
                  False),
    "rocm_specs": ("ROCm documentation, AMD GPU specifications, MI300X row: 304 CUs, LDS 64 KiB, "
                   "L2 32 MiB (4 per XCD), VGPR file 512 KiB", "https://rocm.docs.amd.com/en/"
                   "latest/reference/gpu-specs.html", True),
    "rocm_workload": ("ROCm documentation, AMD Instinct MI300X workload optimization (512 VGPRs "
                      "per lane, 4 MB L2 per XCD, 256 MB Infinity Cache)",
                      "https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/"
                      "inference-optimization/workload.html", False),
    "cdna3_wp": ("AMD CDNA 3 Architecture white paper (L2: 4 MB per XCD, 16-way, 128 B lines)",
                 "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/"
                 "white-papers/amd-cdna-3-white-paper.pdf", False),
    "cc_b200": ("Chips and Cheese, 'Nvidia's B200: Keeping the CUDA Juggernaut Rolling' (2025): "
                "two dies of 80 SMs with 74 enabled each, 148 SMs; L1/shared memory 256 KB per SM "
                "as on H100; a 126 MB L2 split over the dies (the SM count read in the article, "
                "the L2 size through a public summary of it)",
                "https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut", False),
    "intel_orm": ("Intel 64 and IA-32 Architectures Optimization Reference Manual, Golden Cove: "
                  "48 KiB L1d, 2 MiB L2 per core", "https://www.intel.com/content/www/us/en/"
                  "developer/articles/technical/intel-sdm.html", False),
    "luo2024": ("W. Luo et al., 'Benchmarking and Dissecting the Nvidia Hopper GPU "
                "Architecture', arXiv:2402.13499 (2024): latency and throughput of Hopper's "
                "wgmma tensor-core instructions against Ampere's and Ada's mma (abstract read; "
                "the tables not re-read here)", "https://arxiv.org/abs/2402.13499", False),
    "gpu_benches": ("D. Ernst, gpu-benches (github.com/te42kyfo/gpu-benches, commit 1c36d509ee71): "
                    "measured data files gpu-latency/{a100_80,h100_pcie}.txt (one warp's pointer "
                    "chase: A100-80GB L2 211 cycles near / ~424 far / DRAM ~571; H100 PCIe at "
                    "1755 MHz L2 265.5 near / ~475 far / DRAM ~655) and gpu-l2-cache/"
                    "{a100_80,h100_pcie,h200}.txt (every SM reading L2-resident data: 5.40, 7.02 "
                    "and 10.16 TB/s, medians over 4-16 MB data sets)",
                    "https://github.com/te42kyfo/gpu-benches", True),
    "luo2025": ("W. Luo et al., 'Dissecting the NVIDIA Hopper Architecture through "
                "Microbenchmarking and Multiple Level Analysis', arXiv:2501.12084v2 (2025), A100 "
                "PCIe / H800 PCIe / RTX 4090: Table 3 (P-chase: L2 273.0 and global 571 cycles on "
                "RTX 4090; global 566 A100, 656 H800), Table 4 (fine-grained P-chase, cycles: "
                "A100 L2 near hit 208.0, far hit 356.6, near miss 474.9, far miss 622.7; H800 "
                "258.0, 414.1, 555.5, 743.7), Table 5 (H800 L2 throughput 4472.3 B/clk), Fig. 2 "
                "(TMA loads ~170 cycles above ordinary global loads).  Figures taken from a "
                "public full-text summary of the paper (read), the PDF itself not read here",
                "https://arxiv.org/abs/2501.12084", False),
    "cc_h100": ("C. Lam, 'Nvidia's H100: Funny L2, and Tons of Bandwidth', Chips and Cheese, "
                "2023-07-02 (H100 PCIe): L2 read bandwidth 'over 5.5 TB/s' (near partition), 3.8 "
                "TB/s over the whole 50 MB (A100: 4.5 TB/s), RTX 4090 'about 5 TB/s'; far-partition "
                "L2 hits take 'nearly twice as long'; clocks fell to 1395 MHz under L2 load (text "
                "read through a verbatim public copy; its latency charts are images, not read)",
                "https://chipsandcheese.com/2023/07/02/nvidias-h100-funny-l2-and-tons-of-"
                "bandwidth/", True),
    "device_file": ("a user's device file (`attnio gpu ... --device-file FILE.toml`)", "", True),
    "derived": ("derived: arithmetic on the cited figures, shown in docs/devices.md", "", True),
    "assumed": ("a modelling assumption, not a published figure (docs/hardware.md, "
                "'Assumptions')", "", True),
    "inferred": ("inferred from a sibling part with the same die; not published for this "
                 "product (docs/devices.md)", "", True),
}


@dataclass(frozen=True)
class Device:
    """One device.  GPU figures are per GPU (SI units: bytes, bytes/s, FLOP/s, Hz).

    ``fast_bytes`` is the two-level model's fast memory for this device: one CTA's usable shared
    memory on a GPU (``smem_per_block``), the cache size on a CPU preset.
    """

    name: str
    description: str
    fast_bytes: int
    kind: str = "gpu"                       # "gpu" or "cpu" (two-level presets only)
    vendor: str = ""
    arch: str = ""
    compute_capability: str = ""
    sm_count: int | None = None
    regs_per_sm: int | None = None          # 32-bit registers
    max_regs_per_thread: int | None = None
    max_threads_per_sm: int | None = None
    max_ctas_per_sm: int | None = None
    smem_per_sm: int | None = None          # bytes
    smem_per_block: int | None = None       # bytes (opt-in maximum for one CTA)
    smem_reserved_per_block: int = 0        # bytes the runtime keeps per resident CTA
    l2_bytes: int | None = None
    l2_line_bytes: int | None = None
    l2_sector_bytes: int | None = None
    hbm_bytes: float | None = None
    hbm_bw: float | None = None             # bytes/s
    tensor_flops: dict[str, float | None] = field(default_factory=dict)  # dense FLOP/s by dtype
    clock_hz: float | None = None
    smem_bytes_per_clk: int | None = None   # per SM
    sfu_per_clk: int | None = None          # exp2 results per clock per SM
    sm_l2_bytes_per_clk: float | None = None  # one SM's share of the measured L2 bandwidth
    l2_hit_latency_clk: float | None = None   # L2 hit latency, SM clocks (near/far mean)
    dram_latency_clk: float | None = None     # L2 miss (DRAM) latency, SM clocks
    tma_latency_clk: float = 0.0              # extra latency of a TMA load (fa3), SM clocks
    l2_bw: float | None = None              # L2 bandwidth, bytes/s (None: not public)
    wgmma: bool = False                     # warp-group MMA (FA3-style kernels) available
    source: str = ""
    provenance: dict[str, tuple[str, ...]] = field(default_factory=dict)
    inferred: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # FA3's warp-group MMA exists on sm90 only: a device claiming it elsewhere (a Blackwell
        # part given wgmma=True) would run FA3 at a rate no such kernel reaches.
        if self.kind == "gpu" and self.wgmma and self.compute_capability != "9.0":
            raise ParameterError(
                f"device {self.name!r}: wgmma=True needs compute capability 9.0 (wgmma, the "
                f"instruction of FA3-style kernels, is sm_90a only; Blackwell's tcgen05 kernels "
                f"are not modelled), got compute_capability={self.compute_capability!r}",
                param="device")

    # -------------------------------------------------------------- the two-level view
    def words(self, dtype: int | str = 2) -> int:
        """Words of the given dtype (bytes per element, or a dtype name) in ``fast_bytes``."""
        return self.fast_bytes // dtype_bytes(dtype)

    # -------------------------------------------------------------- the GPU model's view
    def flops(self, dtype: str) -> float:
        """Dense tensor-core FLOP/s for ``dtype`` with FP32 accumulation (ParameterError if the
        device has no such tensor cores or none is published)."""
        key = _DTYPE_CANON.get(str(dtype).lower(), str(dtype).lower())
        v = self.tensor_flops.get(key)
        if v is None:
            have = sorted(k for k, x in self.tensor_flops.items() if x is not None)
            raise ParameterError(f"dtype={dtype!r}: {self.name} has no published {key} tensor-"
                                 f"core rate (it has: {', '.join(have) or 'none'})",
                                 param="dtype")
        return float(v)

    # The GPU model's figures below are read only from a device that passed require_model():
    # the asserts state that (and narrow the optional figures for the type checker).
    @property
    def sm_l2_bw(self) -> float:
        """One SM's load bandwidth from the L2, bytes/s: its share of the measured L2 bandwidth
        (derived; docs/hardware.md, "Assumptions")."""
        assert self.sm_l2_bytes_per_clk is not None and self.clock_hz is not None
        return float(self.sm_l2_bytes_per_clk * self.clock_hz)

    @property
    def l2_hit_latency_s(self) -> float:
        """Load-to-use latency of an L2 hit, seconds (the mean of near and far partitions)."""
        assert self.l2_hit_latency_clk is not None and self.clock_hz is not None
        return float(self.l2_hit_latency_clk / self.clock_hz)

    @property
    def dram_latency_s(self) -> float:
        """Load-to-use latency of an L2 miss served by DRAM, seconds."""
        assert self.dram_latency_clk is not None and self.clock_hz is not None
        return float(self.dram_latency_clk / self.clock_hz)

    @property
    def tma_latency_s(self) -> float:
        """What a TMA load adds to a load's latency (FA3-style kernels), seconds."""
        assert self.clock_hz is not None
        return float(self.tma_latency_clk / self.clock_hz)

    @property
    def l2_bandwidth(self) -> float:
        """L2 bandwidth in bytes/s: the published figure, else every SM's port together."""
        if self.l2_bw is not None:
            return float(self.l2_bw)
        assert (self.sm_count is not None and self.sm_l2_bytes_per_clk is not None
                and self.clock_hz is not None)
        return float(self.sm_count * self.sm_l2_bytes_per_clk * self.clock_hz)

    @property
    def smem_bw_per_sm(self) -> float:
        assert self.smem_bytes_per_clk is not None and self.clock_hz is not None
        return float(self.smem_bytes_per_clk * self.clock_hz)

    @property
    def sfu_rate_per_sm(self) -> float:
        """Exponentials per second per SM (special-function units)."""
        assert self.sfu_per_clk is not None and self.clock_hz is not None
        return float(self.sfu_per_clk * self.clock_hz)

    #: Figures the GPU model needs; a device lacking one cannot be scored.
    MODEL_FIELDS = ("sm_count", "regs_per_sm", "max_regs_per_thread", "max_threads_per_sm",
                    "max_ctas_per_sm", "smem_per_sm", "smem_per_block", "l2_bytes",
                    "l2_sector_bytes", "hbm_bw", "clock_hz", "smem_bytes_per_clk", "sfu_per_clk",
                    "sm_l2_bytes_per_clk", "l2_hit_latency_clk", "dram_latency_clk")

    def missing(self) -> list[str]:
        """The figures the GPU model needs that this device does not publish."""
        if self.kind != "gpu":
            return ["(a CPU preset: two-level model only)"]
        return [f for f in self.MODEL_FIELDS if getattr(self, f) is None]

    def require_model(self) -> Device:
        """This device, or ParameterError naming the figures the GPU model lacks for it."""
        miss = self.missing()
        if miss:
            ok = [d.name for d in all_devices() if not d.missing()]
            raise ParameterError(
                f"device={self.name!r} cannot be scored: {', '.join(miss)} not public (devices "
                f"the GPU model can score: {', '.join(ok)})", param="device")
        return self

    def cite(self, fig: str) -> str:
        """The source keys of one figure, e.g. ``"cuda_cc, h100_blog"`` ("" when the figure is
        not public)."""
        if getattr(self, fig, None) is None:
            return ""
        keys = self.provenance.get(fig) or ()
        if fig in self.assumed:
            keys = (*keys, "assumed")
        if fig in self.inferred:
            keys = (*keys, "inferred")
        return ", ".join(keys)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in ("name", "description", "kind", "vendor", "arch", "compute_capability",
                  "fast_bytes", "sm_count", "regs_per_sm", "max_regs_per_thread",
                  "max_threads_per_sm", "max_ctas_per_sm", "smem_per_sm", "smem_per_block",
                  "l2_bytes", "l2_line_bytes", "l2_sector_bytes", "hbm_bytes", "hbm_bw",
                  "clock_hz", "smem_bytes_per_clk", "sfu_per_clk", "sm_l2_bytes_per_clk",
                  "l2_hit_latency_clk", "dram_latency_clk", "tma_latency_clk", "l2_bw", "wgmma"):
            out[k] = getattr(self, k)
        out["tensor_flops"] = dict(self.tensor_flops)
        out["provenance"] = {k: list(v) for k, v in self.provenance.items()}
        out["inferred"] = list(self.inferred)
        out["assumed"] = list(self.assumed)
        out["scorable"] = not self.missing()
        return out


# ------------------------------------------------------------------------------ the table
def _cc_limits(cc: str) -> dict[str, Any]:
    """Per-SM limits of a compute capability (cuda_cc Tables 30-32)."""
    if cc in ("8.0", "9.0", "10.0"):
        smem_sm = {"8.0": 164, "9.0": 228, "10.0": 228}[cc] * KiB
        return dict(regs_per_sm=65536, max_regs_per_thread=255, max_threads_per_sm=2048,
                    max_ctas_per_sm=32, smem_per_sm=smem_sm, smem_per_block=smem_sm - KiB,
                    smem_reserved_per_block=KiB)
    if cc in ("8.6", "8.9"):
        return dict(regs_per_sm=65536, max_regs_per_thread=255, max_threads_per_sm=1536,
                    max_ctas_per_sm=24 if cc == "8.9" else 16, smem_per_sm=100 * KiB,
                    smem_per_block=99 * KiB, smem_reserved_per_block=KiB)
    raise ValueError(cc)


#: The architecture generations the GPU model knows: name -> (compute capability, parts).  A
#: device's generation picks its per-SM limits (:func:`_cc_limits`), whether it has ``wgmma``
#: (sm90 only) and the time model's parameters (``calibration.json``; a generation without a fit
#: borrows another's, with a warning: :mod:`.fits`).
GENERATIONS: dict[str, tuple[str, str]] = {
    "sm80": ("8.0", "Ampere GA100 (A100)"),
    "sm86": ("8.6", "Ampere GA10x (A10, A40, RTX 30xx)"),
    "sm89": ("8.9", "Ada AD10x (L4, L40, L40S, RTX 40xx)"),
    "sm90": ("9.0", "Hopper GH100 (H100, H200, H800)"),
    "sm100": ("10.0", "Blackwell B100/B200 (GB200)"),
}


def generation_of(cc: str) -> str:
    """The generation name of a compute capability (``"8.9"`` -> ``"sm89"``)."""
    return "sm" + cc.replace(".", "") if cc else ""


_LIMITS = ("regs_per_sm", "max_regs_per_thread", "max_threads_per_sm", "max_ctas_per_sm",
           "smem_per_sm", "smem_per_block", "smem_reserved_per_block")

#: The memory system's figures behind the model's latency and port terms (docs/hardware.md,
#: "Memory latency and each SM's L2 port").  NVIDIA publishes none of them: they come from
#: microbenchmarks.  Latencies are load-to-use, in SM clocks as the papers report them; an L2 hit
#: is the mean of the near- and far-partition hits (a tile's lines spread over both partitions),
#: an L2 miss the mean of the near and far misses (luo2025 Table 4).  One SM's L2 port is its
#: share of the L2 bandwidth measured with every SM loading (aggregate / SMs / clock).
_MEM_GA100 = dict(sm_l2_bytes_per_clk=35.5, l2_hit_latency_clk=282.3, dram_latency_clk=548.8)
_MEM_GH100 = dict(sm_l2_bytes_per_clk=39.2, l2_hit_latency_clk=336.1, dram_latency_clk=649.6,
                  tma_latency_clk=170.0)
_MEM_AD102 = dict(sm_l2_bytes_per_clk=15.5, l2_hit_latency_clk=273.0, dram_latency_clk=571.0)
_MEM_FIELDS = ("sm_l2_bytes_per_clk", "l2_hit_latency_clk", "dram_latency_clk",
               "tma_latency_clk")
_PROV_GA100 = {"sm_l2_bytes_per_clk": ("gpu_benches", "derived"),
               "l2_hit_latency_clk": ("luo2025", "derived"),
               "dram_latency_clk": ("luo2025", "derived")}
_PROV_GH100 = {"sm_l2_bytes_per_clk": ("luo2025", "derived"),
               "l2_hit_latency_clk": ("luo2025", "derived"),
               "dram_latency_clk": ("luo2025", "derived"), "tma_latency_clk": ("luo2025",)}
_NOTE_GA100 = ("Memory system (microbenchmarks, docs/hardware.md): one SM's L2 port = 5,404 GB/s "
               "measured with every SM reading L2-resident data (gpu_benches, A100-80GB) / (108 "
               "SMs x 1.41 GHz) = 35.5 B/clk; L2 hit latency (208.0 + 356.6) / 2 = 282.3 and L2 "
               "miss (474.9 + 622.7) / 2 = 548.8 cycles, the near/far means of luo2025 Table 4 "
               "(A100 PCIe 40GB; gpu_benches: 211 near, 571 DRAM on A100-80GB).")
_NOTE_GH100 = ("Memory system (microbenchmarks on H800 PCIe, the same GH100 die; "
               "docs/hardware.md): one SM's L2 port = 4,472.3 B/clk (luo2025 Table 5) / 114 SMs "
               "= 39.2 B/clk (gpu_benches: 7.02 TB/s / (114 x 1.755 GHz) = 35.1 on H100 PCIe, "
               "44.2 at the 1.395 GHz cc_h100 saw under L2 load; 10.16 TB/s / (132 x 1.98 GHz, "
               "GH100 SXM boost, not in these sources) = 38.9 on H200); L2 hit (258.0 + 414.1) / "
               "2 = 336.1 and miss (555.5 + 743.7) / 2 = "
               "649.6 cycles (luo2025 Table 4; gpu_benches H100 PCIe: 265.5 near, ~655 DRAM); a "
               "TMA load ~170 cycles more (luo2025 Fig. 2).")


def _nv(name, description, cc, *, sources, arch, **kw) -> Device:
    lim = _cc_limits(cc)
    prov: dict[str, tuple[str, ...]] = {f: ("cuda_cc",) for f in _LIMITS}
    prov.update({"l2_line_bytes": ("ncu_sector",), "l2_sector_bytes": ("ncu_sector",),
                 "smem_bytes_per_clk": ("cuda_smem_banks",), "sfu_per_clk": ("cuda_arith",),
                 "smem_reserved_per_block": ("cuda_smem_banks",)})
    prov.update(kw.pop("provenance", {}))
    assumed = tuple(kw.pop("assumed", ()))
    base = dict(kind="gpu", vendor="NVIDIA", arch=arch, compute_capability=cc,
                l2_line_bytes=128, l2_sector_bytes=32, smem_bytes_per_clk=128, sfu_per_clk=16,
                wgmma=cc == "9.0", source="; ".join(sources))
    base.update(lim)
    base.update(kw)
    return Device(name=name, description=description, fast_bytes=base["smem_per_block"],
                  provenance=prov, assumed=assumed, **base)


_A100_PROV = {"sm_count": ("a100_blog",), "l2_bytes": ("a100_blog",),
              "clock_hz": ("a100_blog",), "regs_per_sm": ("a100_blog", "cuda_cc")}

_GPUS = (
    _nv("a100-40gb", "NVIDIA A100 40GB SXM4 (Ampere GA100)", "8.0", arch="Ampere GA100",
        sources=("a100_blog", "cuda_cc"), sm_count=108, l2_bytes=40 * MiB, hbm_bytes=40e9,
        hbm_bw=1555e9, clock_hz=1410e6,
        tensor_flops={"fp16": 312e12, "bf16": 312e12, "tf32": 156e12, "fp8": None},
        provenance={**_A100_PROV, "hbm_bytes": ("a100_blog",), "hbm_bw": ("a100_blog",),
                    "tensor_flops": ("a100_blog",), **_PROV_GA100},
        inferred=("sm_l2_bytes_per_clk",), **_MEM_GA100,
        notes=("No FP8 tensor cores on CC 8.0 (cuda_cc Table 33).",
               "312 TFLOPS = 108 SMs x 2048 FLOP/clk x 1.41 GHz (boost clock).", _NOTE_GA100,
               "The L2 port share was measured on the 80GB part (same GA100 SMs and L2).")),
    _nv("a100-80gb", "NVIDIA A100 80GB SXM4 (Ampere GA100)", "8.0", arch="Ampere GA100",
        sources=("a100_ds", "a100_blog", "cuda_cc"), sm_count=108, l2_bytes=40 * MiB,
        hbm_bytes=80e9, hbm_bw=2039e9, clock_hz=1410e6,
        tensor_flops={"fp16": 312e12, "bf16": 312e12, "tf32": 156e12, "fp8": None},
        provenance={**_A100_PROV, "hbm_bytes": ("a100_ds",), "hbm_bw": ("a100_ds",),
                    "tensor_flops": ("a100_ds", "a100_blog"), **_PROV_GA100},
        inferred=("l2_bytes", "l2_hit_latency_clk", "dram_latency_clk"), **_MEM_GA100,
        notes=("Same GA100 SM/L2 configuration as the 40GB part; its datasheet lists memory and "
               "TFLOPS only, so the 40 MB L2 is taken from the A100 architecture table.",
               _NOTE_GA100, "The latencies were measured on the 40GB part (HBM2, not HBM2e).")),
    _nv("h100-sxm", "NVIDIA H100 SXM5 80GB (Hopper GH100)", "9.0", arch="Hopper GH100",
        sources=("h100_wp", "h100_page", "h100_blog", "cuda_cc"), sm_count=132,
        l2_bytes=50 * MiB, hbm_bytes=80e9, hbm_bw=3.35e12, clock_hz=1830e6,
        tensor_flops={"fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1979e12, "tf32": 494.5e12},
        provenance={"sm_count": ("h100_blog",), "l2_bytes": ("h100_blog",),
                    "hbm_bytes": ("h100_page",), "hbm_bw": ("h100_page",),
                    "tensor_flops": ("h100_wp", "h100_page"), "clock_hz": ("derived",),
                    **_PROV_GH100},
        inferred=_MEM_FIELDS, **_MEM_GH100,
        notes=("Clock derived: 989.4e12 / (132 SMs x 4096 FLOP/clk) = 1.83 GHz.",
               "The L2 is partitioned (h100_blog: 'partitioned crossbar'); the model treats it "
               "as one LRU cache.", _NOTE_GH100)),
    _nv("h100-pcie", "NVIDIA H100 PCIe 80GB (Hopper GH100)", "9.0", arch="Hopper GH100",
        sources=("h100_wp", "h100_blog", "h100_pcie_ds", "cuda_cc"), sm_count=114,
        l2_bytes=50 * MiB, hbm_bytes=80e9, hbm_bw=2.0e12, clock_hz=1620e6,
        tensor_flops={"fp16": 756e12, "bf16": 756e12, "fp8": 1513e12, "tf32": 378e12},
        provenance={"sm_count": ("h100_blog",), "l2_bytes": ("h100_blog",),
                    "hbm_bytes": ("h100_blog", "h100_pcie_ds"),
                    "hbm_bw": ("h100_blog", "h100_pcie_ds"),
                    "tensor_flops": ("h100_wp", "h100_pcie_ds"), "clock_hz": ("derived",),
                    **_PROV_GH100},
        inferred=_MEM_FIELDS, **_MEM_GH100,
        notes=("Clock derived: 756e12 / (114 x 4096) = 1.62 GHz.", _NOTE_GH100)),
    _nv("h200", "NVIDIA H200 SXM 141GB (Hopper GH100, HBM3e)", "9.0", arch="Hopper GH100",
        sources=("h200_page", "h100_blog", "cuda_cc"), sm_count=132, l2_bytes=50 * MiB,
        hbm_bytes=141e9, hbm_bw=4.8e12, clock_hz=1830e6,
        tensor_flops={"fp16": 989.5e12, "bf16": 989.5e12, "fp8": 1979e12, "tf32": 494.5e12},
        provenance={"sm_count": ("h100_blog",), "l2_bytes": ("h100_blog",),
                    "clock_hz": ("derived",), "hbm_bytes": ("h200_page",),
                    "hbm_bw": ("h200_page",), "tensor_flops": ("h200_page",), **_PROV_GH100},
        inferred=("sm_count", "l2_bytes", "clock_hz", *_MEM_FIELDS), **_MEM_GH100,
        notes=("NVIDIA publishes no SM count, L2 size or clock for H200; its FLOP/s equal H100 "
               "SXM's, consistent with the same 132-SM GH100 configuration and 50 MB L2 "
               "(inferred; check with torch.cuda.get_device_properties on a real H200).",
               _NOTE_GH100, "H200's HBM3e DRAM latency is not measured in these sources.")),
    _nv("b200", "NVIDIA B200 (Blackwell, per GPU of an 8-GPU system)", "10.0",
        arch="Blackwell", sources=("dgx_b200", "hgx_page", "cc_b200", "cuda_cc"), sm_count=148,
        l2_bytes=126 * MiB, hbm_bytes=180e9, hbm_bw=8.0e12, clock_hz=1.8557e9,
        tensor_flops={"fp16": 2.25e15, "bf16": 2.25e15, "fp8": 4.5e15, "tf32": 1.125e15},
        **{k: v for k, v in _MEM_GH100.items() if k != "tma_latency_clk"},
        provenance={"hbm_bytes": ("dgx_b200",), "hbm_bw": ("dgx_b200",),
                    "tensor_flops": ("hgx_page",), "sm_count": ("cc_b200",),
                    "l2_bytes": ("cc_b200",), "clock_hz": ("derived",)},
        assumed=("clock_hz", "sm_l2_bytes_per_clk", "l2_hit_latency_clk", "dram_latency_clk"),
        notes=("148 SMs (2 dies x 74 enabled) and a 126 MB L2 measured by cc_b200; NVIDIA's B200 "
               "material gives neither.",
               "Clock derived: 2.25e15 / (148 SMs x 8192 FLOP/clk) = 1.856 GHz, assuming "
               "Blackwell's SM does twice Hopper's 4096 dense fp16 FLOP per clock (assumed).",
               "HBM bandwidth 64 TB/s / 8 (DGX); the HGX page gives 62 TB/s / 8.",
               "Memory system: no B200 microbenchmark was read here, so the L2 port and the "
               "latencies are GH100's (assumed).",
               "No wgmma: FA3 (hopper/) is sm90-only; Blackwell's tcgen05 kernels (FA4) are "
               "not modelled, FA2's mma.sync kernels are.",
               "Time-model parameters: sm100 has no fit; it borrows sm90's (a warning says so).")),
    _nv("l40s", "NVIDIA L40S (Ada AD102)", "8.9", arch="Ada AD102",
        sources=("l40s_ds", "ada_wp", "ada_tuning", "cuda_cc"), sm_count=142,
        l2_bytes=96 * MiB, hbm_bytes=48e9, hbm_bw=864e9, clock_hz=2.4898e9,
        tensor_flops={"fp16": 362.05e12, "bf16": 362.05e12, "fp8": 733e12, "tf32": 183e12},
        **_MEM_AD102,
        provenance={"sm_count": ("l40s_ds", "derived"), "hbm_bytes": ("l40s_ds",),
                    "hbm_bw": ("l40s_ds",), "tensor_flops": ("l40s_ds",),
                    "l2_bytes": ("ada_wp",), "clock_hz": ("derived",),
                    "sm_l2_bytes_per_clk": ("cc_h100", "derived"),
                    "l2_hit_latency_clk": ("luo2025",), "dram_latency_clk": ("luo2025",)},
        inferred=("l2_bytes", "sm_l2_bytes_per_clk", "l2_hit_latency_clk", "dram_latency_clk"),
        notes=("SMs derived: 18,176 CUDA cores / 128 per SM = 568 Tensor Cores / 4 = 142.",
               "L2: the full AD102's 98,304 KB (ada_wp), as on the 142-SM RTX 6000 Ada; not on "
               "the L40S data sheet (inferred).",
               "Clock derived: 362.05e12 / (142 SMs x 1024 FLOP/clk, Ada's professional rate "
               "with FP32 accumulate, twice GeForce's 512) = 2.49 GHz.",
               "Memory system: the RTX 4090's (the same AD102 die; inferred).",
               "Time-model parameters: sm89 has no fit; it borrows sm80's (a warning says so).")),
    _nv("rtx4090", "NVIDIA GeForce RTX 4090 (Ada AD102)", "8.9", arch="Ada AD102",
        sources=("ada_wp", "ada_tuning", "cuda_cc"), sm_count=128, l2_bytes=72 * MiB,
        hbm_bytes=24e9, hbm_bw=1008e9, clock_hz=2520e6,
        tensor_flops={"fp16": 165.2e12, "bf16": 165.2e12, "fp8": 330.3e12, "tf32": 82.6e12},
        provenance={"sm_count": ("ada_wp",), "l2_bytes": ("ada_wp",), "hbm_bytes": ("ada_wp",),
                    "hbm_bw": ("ada_wp",), "tensor_flops": ("ada_wp",),
                    "clock_hz": ("ada_wp",), "sm_l2_bytes_per_clk": ("cc_h100", "derived"),
                    "l2_hit_latency_clk": ("luo2025",), "dram_latency_clk": ("luo2025",)},
        **_MEM_AD102,
        notes=("GDDR6X, not HBM: 'hbm' fields hold the DRAM figures.",
               "Memory system: one SM's L2 port = cc_h100's 'about 5 TB/s' of RTX 4090 L2 "
               "bandwidth / (128 SMs x 2.52 GHz) = 15.5 B/clk; L2 hit 273.0 and global memory "
               "571 cycles (luo2025 Table 3, P-chase; one L2 partition).",
               "GeForce: FP16/BF16 tensor rate with FP32 accumulate is half the FP16-accumulate "
               "rate (165.2 vs 330.3 TFLOPS); attention accumulates in FP32.",
               "Time-model parameters: sm89 has no fit; it borrows sm80's (a warning says so).")),
)

_MI300X = Device(
    name="mi300x", description="AMD Instinct MI300X (CDNA 3)", fast_bytes=64 * KiB, kind="gpu",
    vendor="AMD", arch="CDNA 3", compute_capability="gfx942", sm_count=304,
    regs_per_sm=131072, max_regs_per_thread=512, max_threads_per_sm=None, max_ctas_per_sm=None,
    smem_per_sm=64 * KiB, smem_per_block=64 * KiB, l2_bytes=32 * MiB, l2_line_bytes=128,
    l2_sector_bytes=None, hbm_bytes=192e9, hbm_bw=5.3e12, clock_hz=2100e6,
    tensor_flops={"fp16": 1307.4e12, "bf16": 1307.4e12, "fp8": 2614.9e12, "tf32": 653.7e12},
    smem_bytes_per_clk=None, sfu_per_clk=None, sm_l2_bytes_per_clk=None,
    source="mi300x_ds; rocm_specs",
    provenance={"sm_count": ("rocm_specs", "mi300x_ds"), "regs_per_sm": ("rocm_specs",),
                "smem_per_sm": ("rocm_specs",), "smem_per_block": ("rocm_specs",),
                "l2_bytes": ("rocm_specs",), "hbm_bytes": ("mi300x_ds", "rocm_specs"),
                "max_regs_per_thread": ("rocm_workload",), "l2_line_bytes": ("cdna3_wp",),
                "hbm_bw": ("mi300x_ds",), "tensor_flops": ("mi300x_ds",),
                "clock_hz": ("mi300x_ds",)},
    notes=("'SMs' are compute units (wavefront 64). The L2 is 8 private 4 MiB caches, one per "
           "XCD, behind a 256 MiB memory-side Infinity Cache: a flat L2 model does not fit it, and "
           "threads/CTAs per CU and the LDS bandwidth were not found: not scorable.",
           "regs_per_sm: the 512 KiB VGPR file as 32-bit registers; max_regs_per_thread 512 "
           "unverified."),
)

_CPUS = (
    Device("cpu-l1d", "typical CPU core L1 data cache (48 KiB, two-level model only)",
           48 * KiB, kind="cpu", vendor="Intel", arch="Golden Cove", source="intel_orm",
           provenance={"fast_bytes": ("intel_orm",)}),
    Device("cpu-l2", "typical CPU core L2 cache (2 MiB, two-level model only)", 2 * MiB,
           kind="cpu", vendor="Intel", arch="Golden Cove", source="intel_orm",
           provenance={"fast_bytes": ("intel_orm",)}),
)

_DEVICES = {d.name: d for d in (*_GPUS, _MI300X, *_CPUS)}

#: Other names accepted for a device (the first layout's presets, and common spellings).
ALIASES = {"a100": "a100-80gb", "h100": "h100-sxm", "h100-sxm5": "h100-sxm",
           "h200-sxm": "h200", "rtx-4090": "rtx4090", "4090": "rtx4090",
           "a100-sxm4-80gb": "a100-80gb", "a100-sxm4-40gb": "a100-40gb"}


def names() -> list[str]:
    """The preset names (aliases not included)."""
    return sorted(_DEVICES)


def gpu_names(scorable: bool = False) -> list[str]:
    """The GPU presets (``scorable``: only those the GPU model can score)."""
    return [d.name for d in all_devices() if d.kind == "gpu" and (not scorable or not d.missing())]


def all_devices() -> list[Device]:
    return [_DEVICES[n] for n in names()]


def get(name: str | Device) -> Device:
    """The preset called ``name`` or one of its :data:`ALIASES` (UnknownNameError lists the
    known names)."""
    if isinstance(name, Device):
        return name
    key = str(name).lower()
    key = ALIASES.get(key, key)
    try:
        return _DEVICES[key]
    except KeyError:
        raise UnknownNameError("device", str(name), [*_DEVICES, *ALIASES]) from None


def dtype_bytes(dtype: int | str) -> int:
    """Bytes per element of ``dtype`` (a name such as "float16", or a positive int)."""
    if isinstance(dtype, str):
        try:
            return DTYPE_BYTES[dtype.lower()]
        except KeyError:
            raise UnknownNameError("dtype", dtype, DTYPE_BYTES) from None
    return check_int("dtype_bytes", dtype, minimum=1, maximum=64)


def dtype_name(dtype: str) -> str:
    """The canonical element-type name of the GPU model: ``fp16``, ``bf16`` or ``fp8``."""
    key = _DTYPE_CANON.get(str(dtype).lower())
    if key not in ("fp16", "bf16", "fp8"):
        raise ParameterError(f"dtype must be fp16, bf16 or fp8 (attention kernels' element "
                             f"types), got {dtype!r}", param="dtype")
    return key


def words_for(M_bytes: int, dtype: int | str = 2) -> int:
    """Words of ``dtype`` in ``M_bytes`` bytes (at least one word must fit)."""
    M_bytes = check_int("M_bytes", M_bytes, minimum=1)
    size = dtype_bytes(dtype)
    w = M_bytes // size
    if w < 1:
        what = f"{dtype} word" if isinstance(dtype, str) else "word"
        raise ParameterError(f"M_bytes={M_bytes} is less than one {what} ({size} bytes); give "
                             f"M_bytes >= {size}", param="M_bytes")
    return w
