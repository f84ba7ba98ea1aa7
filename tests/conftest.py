"""Shared helpers of the test suite."""

from __future__ import annotations

import numpy as np
import pytest

import attnio


def exact_attention_names() -> list[str]:
    """Every registered exact attention algorithm (new schedules join the tests automatically)."""
    return [a.name for a in attnio.algorithms.all_algorithms(exact=True)]


def random_qkv(Nq: int, Nkv: int, d: int, seed: int = 0, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((Nq, d)) * scale
    K = rng.standard_normal((Nkv, d)) * scale
    V = rng.standard_normal((Nkv, d))
    return Q, K, V


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
