"""Shared helpers of the test suite."""

from __future__ import annotations

import importlib
import os
import shutil
import sqlite3
import sys
import tempfile
from types import ModuleType

import numpy as np
import pytest

import attnio
from attnio.algorithms import mapper
from attnio.core.errors import MissingExtraError
from attnio.core.extras import EXTRAS, available

#: the run's calibration folder (pytest_configure), in the controller's stash
_CACHE_DIR = pytest.StashKey[str]()
#: the thread pools of the numerical libraries the tests use (OpenMP: torch; OpenBLAS, MKL: numpy)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def pytest_configure(config):
    """With xdist workers (``-n``), share the cores between them: each worker's numerical
    libraries get cores // workers threads (set here, in the controller, before the workers
    start, so that they read it when they load the libraries; a value already set is kept).
    Two workers on two cores each spinning up two torch/OpenMP threads oversubscribe the
    machine: their busy-waiting threads cost several times the CPU of one thread (a float32
    gradient test: 7 s of CPU against 0.4 s)."""
    # the PyTorch kernel's per-machine calibration (torch_ops: a micro-benchmark of 1-2 s of CPU
    # per dtype and thread count) goes to a folder of this run's own, shared by its xdist workers
    # as the library shares it between the processes of a machine (one worker measures, the
    # other reads), removed at the end: the suite writes nothing under the user's ~/.cache (a
    # test that checks the file sets its own folder)
    if "ATTNIO_CACHE_DIR" not in os.environ and not hasattr(config, "workerinput"):
        folder = tempfile.mkdtemp(prefix="attnio-tests-")
        os.environ["ATTNIO_CACHE_DIR"] = folder
        config.stash[_CACHE_DIR] = folder
    workers = getattr(config.option, "numprocesses", None)
    if workers and not hasattr(config, "workerinput"):
        threads = str(max(1, (os.cpu_count() or 1) // int(workers)))
        for var in THREAD_VARS:
            os.environ.setdefault(var, threads)


def pytest_unconfigure(config):
    """Remove the run's calibration folder (:func:`pytest_configure`)."""
    folder = config.stash.get(_CACHE_DIR, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("ATTNIO_CACHE_DIR", None)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Name the shuffled order's seed (also under ``-q``), so a failure that depends on the order
    can be replayed with ``--random-order-seed``."""
    opt = config.option
    bucket = str(getattr(opt, "random_order_bucket", "default:"))
    seed = str(getattr(opt, "random_order_seed", "default:"))
    if not bucket.startswith("default:") or not seed.startswith("default:"):
        bucket, seed = bucket.removeprefix("default:"), seed.removeprefix("default:")
        if bucket == "none":
            return
        terminalreporter.write_line(f"test order: shuffled by {bucket} "
                                    f"(replay it with --random-order-seed={seed})")


def _missing_reason(modules: tuple[str, ...]) -> str | None:
    """The library's own message for the first of ``modules`` that is not installed, or None."""
    for m in modules:
        if not available(m):
            top = m.split(".")[0]
            return str(MissingExtraError(top, EXTRAS.get(top, f"{top}_extra"), "this test"))
    return None


def needs(*modules: str) -> pytest.MarkDecorator:
    """Skip the test, with the extra and its pip command as the reason, unless every optional
    package in ``modules`` (import names: ``"torch"``, ``"cachesim"``, ...) is installed.

    >>> @needs("torch")          # or, for a whole module: pytestmark = needs("torch")
    ... def test_something(): ...
    """
    reason = _missing_reason(modules)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def block_parquet_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make pyarrow and fastparquet look not installed for one test (None in ``sys.modules``);
    pandas, when installed, is imported first so that it does not remember them missing."""
    if available("pandas"):
        importlib.import_module("pandas")
    for engine in ("pyarrow", "fastparquet"):
        monkeypatch.setitem(sys.modules, engine, None)


def stored_rows(db) -> int:
    """Rows of a results database's ``results`` table, read-only (0 when the file or its schema
    does not exist yet): what a test watching a running sweep polls."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def need(module: str) -> ModuleType:
    """Import the optional ``module`` or skip (the test, or the whole test module when called at
    its top level) with the same reason as :func:`needs`."""
    reason = _missing_reason((module,))
    if reason is not None:
        pytest.skip(reason, allow_module_level=True)
    return importlib.import_module(module)


def exact_attention_names() -> list[str]:
    """Every registered exact attention algorithm (new schedules join the tests automatically)."""
    return [a.name for a in attnio.algorithms.all_algorithms(exact=True)]


def gqa_shapes(n_max: int):
    """A hypothesis strategy of small attention shapes for schedule tests: (Nq, Nkv, d, causal,
    batch, heads, kv_heads), Nq and Nkv up to ``n_max``, both causal alignments, GQA groups."""
    from hypothesis import strategies as st

    @st.composite
    def draw_shape(draw):
        Nq, Nkv = draw(st.integers(1, n_max)), draw(st.integers(1, n_max))
        d = draw(st.integers(1, 6))
        causal = draw(st.sampled_from([False, True, "top_left"]))
        kvh, g, batch = (draw(st.sampled_from(v)) for v in ([1, 2], [1, 2, 3], [1, 2]))
        return Nq, Nkv, d, causal, batch, kvh * g, kvh

    return draw_shape()


def gqa_reference(Q, K, V, causal):
    """The float64 reference for stacked (batch, heads, N, d) inputs, K/V heads shared by
    consecutive query heads (grouped-query attention)."""
    from attnio.core.reference import attention

    B, Hq, _, _ = Q.shape
    g = Hq // K.shape[1]
    out = np.zeros_like(Q)
    for b in range(B):
        for h in range(Hq):
            out[b, h] = attention(Q[b, h], K[b, h // g], V[b, h // g], causal=causal)
    return out


def check_run_equals_closed_form(name: str, shape: attnio.Shape, M: int, tiling, seed: int) -> None:
    """Run schedule ``name`` on random inputs of ``shape`` (its mask, heads and batch) with
    ``tiling``: the output within 1e-10 of the float64 reference; the compute, bulk-count and
    step-by-step counts equal to the closed form (``cost``), bulk and step alike in peak, steps
    and per-array words; the peak within the footprint; the count at or above every explicit
    bound."""
    from attnio import bounds
    from attnio.core.reference import attention

    alg = attnio.algorithms.get(name)
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((shape.batch, shape.heads, shape.Nq, shape.d))
    K = rng.standard_normal((shape.batch, shape.kv_heads, shape.Nkv, shape.d))
    V = rng.standard_normal((shape.batch, shape.kv_heads, shape.Nkv, shape.d))
    res = attnio.run(name, Q, K, V, M=M, tiling=tiling, shape=shape)
    ref = attention(Q, K, V, causal=shape.causal and shape.causal_align, window=shape.window)
    err = np.abs(res.output - ref).max()
    assert err <= 1e-10, err
    pred = alg.cost(shape, tiling).io
    bulk = attnio.run(name, shape=shape, M=M, mode="count", tiling=tiling)
    step = attnio.run(name, shape=shape, M=M, mode="count", tiling=tiling, bulk=False)
    for io in (res.io, bulk.io, step.io):
        assert (io.reads, io.writes) == (pred.reads, pred.writes)
    assert (bulk.io.peak, bulk.io.steps, bulk.io.per_array) == (
        step.io.peak, step.io.steps, step.io.per_array)
    assert res.io.peak <= alg.footprint(shape, tiling) <= M
    for b in bounds.applicable_to(shape, M):
        if b.explicit:
            assert pred.total >= b.value, (b.name, pred.total, b.value)


def random_qkv(Nq: int, Nkv: int, d: int, seed: int = 0, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((Nq, d)) * scale
    K = rng.standard_normal((Nkv, d)) * scale
    V = rng.standard_normal((Nkv, d))
    return Q, K, V


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def least_count(shape: attnio.Shape, M: int, *, backward: bool = False) -> int | None:
    """The least closed-form count over every exact registered algorithm (``backward``: every
    registered backward schedule) that can run ``shape`` with M words, each at its least
    candidate tiling: the mapper's :func:`~attnio.algorithms.mapper.least_over` (the bound tests
    hold every explicit bound below it); None when none can."""
    schedules = (attnio.algorithms.all_backwards() if backward else
                 attnio.algorithms.all_algorithms(exact=True))
    best = mapper.least_over(schedules, shape, M)
    return None if best is None else best[0]


def least_forward_count(shape: attnio.Shape, M: int) -> int | None:
    """:func:`least_count` of the forward schedules."""
    return least_count(shape, M)


def least_backward_count(shape: attnio.Shape, M: int) -> int | None:
    """:func:`least_count` of the backward schedules."""
    return least_count(shape, M, backward=True)


def load_script(relpath: str) -> ModuleType:
    """A script of the repository that is not part of the package (``benchmarks/bound_values.py``,
    ``.ci/readme_commands.py``), loaded from its file: no install provides it, so it is never
    imported by name (test_packaging holds every imported name to the installed extras)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
