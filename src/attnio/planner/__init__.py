"""The two-level planner: the least-I/O algorithm and tiling for a workload, with its certificate.

:func:`plan` scores every registered algorithm by closed form (nothing is simulated) and returns
a :class:`Plan`: the chosen schedule, the runner-up, the best explicit lower bound and the ratio
of the two.  The fast memory may be given in words, in bytes, or as a device preset of
:mod:`attnio.hardware.devices`.
"""

from typing import TYPE_CHECKING

from ..core.lazy import lazy_names
from .planner import (
           FACTOR_SEARCHES,
           Backward,
           Candidate,
           Certificate,
           FactoredPlan,
           FastMemory,
           Plan,
           backward_plan,
           fast_memory,
           plan,
           plan_shape,
           plan_with_factors,
)

if TYPE_CHECKING:
    from .factors import CertificateFactors, certificate_factors

#: The certificate's factors load on first use (a search :func:`plan` does not run).
__getattr__ = lazy_names(__name__, {"CertificateFactors": ("factors", "CertificateFactors"),
                                    "certificate_factors": ("factors", "certificate_factors")},
                         globals())

__all__ = ["FACTOR_SEARCHES", "Backward", "Candidate", "Certificate", "CertificateFactors",
           "FactoredPlan", "FastMemory", "Plan", "backward_plan", "certificate_factors",
           "fast_memory", "plan", "plan_shape", "plan_with_factors"]
