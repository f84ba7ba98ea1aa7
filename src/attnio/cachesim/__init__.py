"""The explicit model against hardware-like caches.

* :mod:`.trace`: element traces (the word addresses a schedule's arithmetic touches, in order);
* :mod:`.replay`: replay of a trace through LRU, FIFO or Belady's OPT (write-back);
* :mod:`.verify`: the explicit count next to the replays, the pycachesim cross-check, the
  validation report.
"""

from .caches import POLICIES, Cache, ReplayResult, replay
from .tracing import Trace, check_trace_size, record_trace, trace
from .validation import Verification, VerifyOptions, verify

__all__ = ["POLICIES", "Cache", "ReplayResult", "Trace", "Verification", "VerifyOptions", "replay",
           "check_trace_size", "record_trace", "trace", "verify"]
