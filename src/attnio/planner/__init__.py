"""The two-level planner: the least-I/O algorithm and tiling for a workload, with its certificate.

:func:`plan` scores every registered algorithm by closed form (nothing is simulated) and returns
a :class:`Plan`: the chosen schedule, the runner-up, the best explicit lower bound and the ratio
of the two.  The fast memory may be given in words, in bytes, or as a device preset of
:mod:`attnio.hardware.devices`.
"""

from .planner import (
           Backward,
           Candidate,
           Certificate,
           CertificateFactors,
           FastMemory,
           Plan,
           backward_plan,
           certificate_factors,
           fast_memory,
           plan,
           plan_shape,
)

__all__ = ["Backward", "Candidate", "Certificate", "CertificateFactors", "FastMemory", "Plan",
           "backward_plan", "certificate_factors", "fast_memory", "plan", "plan_shape"]
