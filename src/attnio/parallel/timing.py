"""A time estimate for a context-parallel scheme: link presets, compute at the device's peak, and
whether communication hides behind compute.  A bandwidth model, not validated against runs.

Per processor p: ``comm_p = max(sent_p, received_p)·bytes / bandwidth`` (links are full duplex:
what a processor sends and receives move at once, each direction at the link's per-direction
bandwidth; latency is not charged) and ``compute_p = 4·d·work_p / peak`` (two matrix products,
2 FLOP a multiply-add, per visible score pair; the device's dense tensor-core peak for the
dtype, from :mod:`attnio.hardware.devices`).  At the peak the compute time is the least any
kernel can take, so "communication hides behind compute" (``comm <= compute`` on the busiest
processor) is claimed only where it would hide even behind the fastest kernel.  The step time is
``max_p max(comm_p, compute_p)`` with overlap (the ring and grid overlap the next block's
transfer with the current block's compute) and ``max_p (comm_p + compute_p)`` without.

Link presets (bytes/s per direction per GPU):

* ``nvlink4``: NVLink 4 on H100 SXM, 900 GB/s per GPU in both directions together (NVIDIA H100
  Tensor Core GPU datasheet), so 450e9 a direction; inside an HGX H100 node every GPU reaches
  every other through NVSwitch at this rate (``nvswitch`` is the same figure);
* ``nvlink5``: NVLink 5 on B200, 1.8 TB/s per GPU (NVIDIA Blackwell datasheet): 900e9 a direction;
* ``ib-ndr``: InfiniBand NDR, 400 Gb/s per port (NVIDIA ConnectX-7), one port per GPU as in a
  DGX H100: 50e9 a direction, between nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import ParameterError
from ..core.workload import Shape
from .base import CommCost

__all__ = ["LINKS", "Link", "predict"]


@dataclass(frozen=True)
class Link:
    name: str
    bytes_per_s: float  # per direction, per GPU
    source: str


LINKS: dict[str, Link] = {
    "nvlink4": Link("nvlink4", 450e9, "NVIDIA H100 datasheet: NVLink 900 GB/s per GPU (both "
                                      "directions)"),
    "nvswitch": Link("nvswitch", 450e9, "HGX H100: NVSwitch gives every GPU its full NVLink 4 "
                                        "bandwidth to every other"),
    "nvlink5": Link("nvlink5", 900e9, "NVIDIA B200 datasheet: NVLink 5, 1.8 TB/s per GPU"),
    "ib-ndr": Link("ib-ndr", 50e9, "InfiniBand NDR 400 Gb/s per port (ConnectX-7), one per GPU"),
}


def get_link(name: str) -> Link:
    if name not in LINKS:
        raise ParameterError(f"link must be one of {', '.join(LINKS)}, got {name!r}",
                             param="link")
    return LINKS[name]


def predict(shape: Shape, cost: CommCost, link: str, device: str = "h100",
            dtype: str = "bf16") -> dict[str, Any]:
    """The time estimate of ``cost`` (a closed form with its work) on ``link`` and ``device``."""
    from ..hardware import devices

    lk = get_link(link)
    dev = devices.get(device)
    nbytes = devices.dtype_bytes(dtype)
    peak = dev.flops(dtype)
    if cost.work is None:
        raise ParameterError("predict needs the work per processor (cost(..., work=True))",
                             param="work")
    comm = [max(s, r) * nbytes / lk.bytes_per_s for s, r in zip(cost.sent, cost.received)]
    comp = [4.0 * shape.d * w / peak for w in cost.work]
    overlapped = max(max(c, k) for c, k in zip(comm, comp))
    serial = max(c + k for c, k in zip(comm, comp))
    busiest = max(range(cost.P), key=lambda p: comm[p] + comp[p])
    return {"link": lk.name, "device": dev.name, "dtype": dtype,
            "comm_s": max(comm), "compute_s": max(comp), "time_s": overlapped,
            "time_serial_s": serial, "hidden": comm[busiest] <= comp[busiest],
            "bound_by": "communication" if comm[busiest] > comp[busiest] else "compute"}
