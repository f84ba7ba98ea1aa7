"""Building blocks that are not attention: schedules other schedules are made of.

* :mod:`.matmul`: blocked C = A·B (square, COSMA outer-product and searched tiles), with its own
  small API (:func:`~attnio.blocks.matmul.run_matmul`, :func:`estimate_matmul`; :data:`MATMUL`
  the schedule); it is not in the attention registry.
"""

from .matmul import (
    ALGORITHM as MATMUL,
)
from .matmul import (
    BlockedMatmul,
    MatmulCheck,
    MatmulResult,
    MatmulShape,
    MatmulTiling,
    estimate_matmul,
    matmul_check,
    run_matmul,
)

__all__ = ["MATMUL", "BlockedMatmul", "MatmulCheck", "MatmulResult", "MatmulShape",
           "MatmulTiling", "estimate_matmul", "matmul_check", "run_matmul"]
