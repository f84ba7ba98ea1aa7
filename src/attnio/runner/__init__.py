"""``attnio.run``: run a registered algorithm on the simulated two-level memory.

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((100, 8)) for _ in range(3))
>>> r = attnio.run("flash2", Q, K, V, M=512)
>>> bool(np.abs(r.output - attnio.reference.attention(Q, K, V)).max() < 1e-12)
True
>>> c = attnio.run("flash2", shape=(100, 8), M=512, mode="count")
>>> (c.io.reads, c.io.writes) == (r.io.reads, r.io.writes)
True
>>> r.certificate.best_bound.name, r.certificate.ratio == r.io.total / r.certificate.best_bound.value
('pv_segment', True)

Inputs are ``(N, d)`` matrices or ``(B, H, N, d)`` batches of heads, with K and V of shape
``(B, Hkv, Nkv, d)``, ``H % Hkv == 0`` (grouped-query attention).  In count mode pass
``shape=Shape(Nq=…, Nkv=…, d=…, batch=…, heads=…, kv_heads=…)`` (or ``(N, d)``, ``(Nq, Nkv, d)``).

The package: :mod:`~attnio.runner.execution` (:func:`run`, :func:`estimate`),
:mod:`~attnio.runner.inputs` (where the data comes from: arrays, an ``.npz`` file, drawn at
random; the reference check) and :mod:`~attnio.runner.certificate` (the one function that puts a
count over its best explicit bound).
"""

from ..core.resources import DEFAULT_BUDGET_S, Limits
from .certificate import Certificate, certificate
from .execution import BackwardPass, Result, estimate, estimate_compute_seconds, place_inputs, run
from .inputs import NpzInputs, RandomInputs, check_inputs, check_logits

__all__ = ["DEFAULT_BUDGET_S", "BackwardPass", "Certificate", "Limits", "NpzInputs",
           "RandomInputs", "Result", "certificate", "check_inputs", "check_logits", "estimate",
           "estimate_compute_seconds", "place_inputs", "run"]
