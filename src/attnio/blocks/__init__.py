"""Building blocks that are not attention: schedules other schedules are made of.

* :mod:`.matmul`: blocked C = A·B (square, COSMA outer-product and searched tiles), with its own
  small API (:func:`~attnio.blocks.matmul.run_matmul`); it is not in the attention registry.
"""

from .matmul import BlockedMatmul, MatmulResult, MatmulShape, MatmulTiling, run_matmul

__all__ = ["BlockedMatmul", "MatmulResult", "MatmulShape", "MatmulTiling", "run_matmul"]
