"""The bad-input catalogue of the command line and the Python API (issue 18).

Every case must be refused the same way, however absurd the size:

* CLI: exit code 2, exactly one line on stderr naming the flag the user typed, no traceback,
  nothing on stdout, no file written in the working folder;
* API: a :class:`~attnio.core.errors.ParameterError` whose message names the argument, and whose
  ``param`` (when set) is that argument.

Each case is refused before anything large is allocated; no test times it (a busy machine
must not fail the suite): the measured times are in ``benchmarks/bench_bad_inputs.py``.  The sweep and database
cases are in ``tests/cli/test_bad_inputs_experiments.py``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import attnio
from attnio.cli import main
from attnio.core.errors import AttnioError, ParameterError
from attnio.runner import Limits

HUGE = "1" + "0" * 200  # 10**200
# How fast each case is refused is measured by benchmarks/bench_bad_inputs.py (no test times it:
# a busy machine must not fail the suite).

# (argv, fragment of the one line: the flag or argument it must name)
CLI_CASES: list[tuple[list[str], str]] = [
    # ---- run: sizes
    (["run", "flash2", "--N", "0"], "--N must be an integer >= 1"),
    (["run", "flash2", "--N", "-5"], "--N must be an integer >= 1"),
    (["run", "flash2", "--N", "2.5"], "--N"),
    (["run", "flash2", "--N", "abc"], "--N"),
    (["run", "flash2", "--N", HUGE], "--N must be an integer in [1, 2**50]"),
    (["run", "flash2", "--d", "0"], "--d must be an integer >= 1"),
    (["run", "flash2", "--d", HUGE], "--d"),
    (["run", "flash2", "--M", "0"], "--M must be an integer >= 1"),
    (["run", "flash2", "--M", HUGE], "--M must be an integer in [1, 2**60]"),
    (["run", "flash2", "--d", "64", "--M", "100"], "--M=100 is too small"),
    (["run", "flash2", "--Nq", "0", "--Nkv", "4"], "--Nq"),
    (["run", "flash2", "--Nq", "8", "--Nkv", "0"], "--Nkv"),
    (["run", "flash2", "--N", "8", "--Nq", "8", "--Nkv", "8"], "--Nq"),
    (["run", "flash2", "--batch", "0"], "--batch"),
    (["run", "flash2", "--heads", "0"], "--heads"),
    (["run", "flash2", "--kv-heads", "0"], "--kv-heads"),
    (["run", "flash2", "--heads", "3", "--kv-heads", "2"], "--heads must be a multiple of --kv-heads"),
    (["run", "flash2", "--heads", HUGE], "--heads"),
    # ---- run: absurd sizes refused before allocating
    (["run", "flash2", "--N", "10000000", "--d", "4096", "--M", "8192"], "--M"),
    (["run", "flash2", "--N", "10000000", "--d", "4096", "--M", "1000000"], "--count-only"),
    (["run", "flash2", "--heads", "4096", "--batch", "4096"], "--count-only"),
    (["run", "flash2", "--N", "3000000", "--d", "128", "--M", "65536"], "--count-only"),
    (["run", "flash2", "--N", "100000", "--d", "64"], "--budget"),
    (["run", "standard", "--N", "20000", "--M", "64"], "--budget"),
    (["run", "flash2", "--N", "1000000000", "--d", "128", "--M", "65536"], "--count-only"),
    (["run", "flash2", "--N", str(2**50), "--d", "1", "--M", "64"], "--count-only"),
    (["run", "flash2", "--backward", "--N", "30000", "--d", "64"], "--budget"),
    (["run", "flash2", "--max-memory", "1k"], "--max-memory"),
    (["run", "flash2", "--max-memory", "abc"], "--max-memory"),
    (["run", "flash2", "--max-memory", "0"], "--max-memory"),
    (["run", "flash2", "--max-memory", "-5G"], "--max-memory"),
    (["run", "flash2", "--budget", "-1"], "--budget"),
    (["run", "flash2", "--budget", "nan"], "--budget"),
    (["run", "flash2", "--N", "4096", "--budget", "0.001"], "--force"),
    # ---- run: mask
    (["run", "flash2", "--window", "4"], "--window needs a causal mask: pass --causal"),
    (["run", "flash2", "--causal", "--window", "0"], "--window"),
    (["run", "flash2", "--causal", "diag"], "--causal"),
    # ---- run: fast memory
    (["run", "flash2", "--device", "nope"], "--device"),
    (["run", "flash2", "--M-bytes", "100"], "--M-bytes needs --dtype"),
    (["run", "flash2", "--M-bytes", "1", "--dtype", "fp32"], "--M-bytes"),
    (["run", "flash2", "--M-bytes", "1000", "--dtype", "fp7"], "--dtype"),
    (["run", "flash2", "--M", "100", "--device", "a100"], "--device"),
    (["run", "flash2", "--device", "cpu-l1d", "--dtype", "fp64", "--d", "4096"], "--device cpu-l1d"),
    # ---- run: algorithm and tiling
    (["run"], "algorithm"),
    (["run", "flahs2"], "did you mean 'flash2'"),
    (["run", "flash2", "--tiling", '{"Br": 1024, "Bc": 1024}'], "more than --M=16384"),
    (["run", "flash2", "--tiling", "{oops"], "--tiling is not valid JSON"),
    (["run", "flash2", "--tiling", "5"], "--tiling"),
    (["run", "flash2", "--tiling", "[1, 2]"], "must be a JSON object"),
    (["run", "flash2", "--tiling", '{"Bq": 4}'], "--tiling"),
    (["run", "flash2", "--tiling", '{"Br": 0, "Bc": 4}'], "--tiling"),
    (["run", "flash1", "--backward"], "--backward"),
    (["run", "flash2", "--m", "3"], "--m"),
    # ---- run: numerics
    (["run", "flash2", "--scale", "1e308"], "--scale"),
    (["run", "flash2", "--scale", "inf"], "--scale"),
    (["run", "flash2", "--scale", "nan"], "--scale"),
    (["run", "flash2", "--seed", "-1"], "--seed"),
    (["run", "flash2", "--count-only", "--allow-nonfinite"], "--allow-nonfinite"),
    # ---- run: approximate attention
    (["run", "approx_poly", "--N", "16", "--d", "4", "--M", "2000", "--eps", "0"], "--eps"),
    (["run", "approx_poly", "--N", "16", "--d", "4", "--M", "2000", "--eps", "1e-3",
      "--entry-bound", "-2"], "--entry-bound"),
    (["run", "approx_poly", "--N", "64", "--d", "8", "--M", "20000", "--entry-bound", "5"],
     "entry"),
    (["run", "approx_poly", "--N", "64", "--d", "8", "--M", "20000", "--entry-bound", "1e6"],
     "entry"),
    (["run", "approx_poly", "--N", "64", "--d", "8", "--M", "20000", "--count-only"],
     "--entry-bound"),
    (["run", "approx_poly", "--N", "64", "--d", "8", "--M", "20000", "--entry-bound", "1.5"],
     "--budget"),
    (["run", "flash2", "--eps", "1e-3"], "--eps"),
    # ---- run: --inputs
    (["run", "flash2", "--inputs", "/nonexistent/x.npz"], "--inputs"),
    (["run", "flash2", "--inputs", "{txt}"], "--inputs"),
    (["run", "flash2", "--inputs", "{npy}"], "--inputs"),
    (["run", "flash2", "--inputs", "{empty}"], "--inputs"),
    (["run", "approx_poly", "--inputs", "{hugeV}", "--M", "4000"], "V: entries up to"),
    (["run", "flash2", "--inputs", "{noV}"], "--inputs"),
    (["run", "flash2", "--inputs", "{dir}"], "--inputs"),
    (["run", "flash2", "--inputs", "{good}", "--N", "99"], "--N 99 conflicts with --inputs"),
    (["run", "flash2", "--inputs", "{good}", "--d", "3"], "--d 3 conflicts with --inputs"),
    (["run", "flash2", "--inputs", "{good}", "--count-only"], "--inputs"),
    (["run", "flash2", "--inputs", "{nan}", "--M", "100"], "--allow-nonfinite"),
    (["run", "flash2", "--inputs", "{badK}", "--M", "100"], "--inputs"),
    # ---- run matmul
    (["run", "matmul", "--m", "30", "--M", "100"], "--k"),
    (["run", "matmul", "--m", "0", "--k", "2", "--n", "2"], "--m"),
    (["run", "matmul", "--m", "100000", "--k", "100000", "--n", "100000", "--M", "4096"],
     "--count-only"),
    (["run", "matmul", "--m", "2000", "--k", "2000", "--n", "2000", "--M", "64", "--budget", "5"],
     "--budget (5 s)"),
    (["run", "matmul", "--m", "10", "--k", "10", "--n", "10", "--M", "0"], "--M"),
    (["run", "matmul", "--m", "10", "--k", "10", "--n", HUGE], "--n"),
    # ---- plan
    (["plan", "--N", "0", "--d", "8", "--M", "100"], "--N"),
    (["plan", "--N", HUGE, "--d", "64", "--M", "1000"], "--N"),
    (["plan", "--N", "100", "--d", "64", "--M", HUGE], "--M"),
    (["plan", "--N", "1000", "--d", HUGE, "--M", "1000"], "--d"),
    (["plan", "--d", "8", "--M", "100"], "--N"),
    (["plan", "--N", "64", "--M", "100"], "--d"),
    (["plan", "--N", "64", "--d", "8"], "--M"),
    (["plan", "--N", "64", "--d", "8", "--device", "nope"], "--device"),
    (["plan", "--N", "64", "--d", "8", "--M-bytes", "100"], "--M-bytes needs --dtype"),
    (["plan", "--N", "64", "--d", "8", "--M-bytes", "1", "--dtype", "fp32"], "--M-bytes"),
    (["plan", "--N", "64", "--d", "8", "--M", "100", "--eps", "2"], "--eps"),
    (["plan", "--N", "64", "--d", "8", "--M", "100", "--entry-bound", "1"], "--entry-bound"),
    (["plan", "--N", "64", "--d", "8", "--M", "1"], "--M"),
    (["plan", "--N", "64", "--d", "8", "--M", "100", "--heads", "3", "--kv-heads", "2"],
     "--kv-heads"),
    (["plan", "--N", "64", "--d", "8", "--M", "100", "--window", "8"], "--causal"),
    (["plan", "--N", "64", "--d", "8", "--device", "a100", "--dtype", "fp7"], "--dtype"),
    (["plan", "--N", "64", "--d", "8", "--M", "100", "--batch", "-1"], "--batch"),
    # ---- bound
    (["bound", "--N", "0", "--d", "8", "--M", "100"], "--N"),
    (["bound", "--N", HUGE, "--d", "64", "--M", "1000"], "--N"),
    (["bound", "--N", "64", "--d", "8", "--M", HUGE], "--M"),
    (["bound", "--N", "64", "--d", "8", "--M", "100", "--q", "64"], "--q"),
    (["bound", "--N", "64", "--d", "8", "--M", "100", "--binary", "--causal"], "--binary"),
    (["bound", "--N", "64", "--d", "8", "--M", "0"], "--M"),
    (["bound", "--N", "64", "--d", "8", "--M", "100", "--causal", "--window", "0"], "--window"),
    (["bound", "--N", "64", "--d", "8", "--device", "nope"], "--device"),
    (["bound", "--N", "64", "--d", "8", "--M", "100", "--heads", "4", "--kv-heads", "3"],
     "--kv-heads"),
    # ---- trace
    (["trace", "flash2", "--N", "100000", "--d", "64"], "--max-products"),
    (["trace", "flash2", "--N", "100000", "--d", "128", "--M", "8192", "--max-products", "1e30"],
     "--N"),
    (["trace", "flash2", "--N", "32", "--d", "8", "--out", "/nonexistent/t.npz"], "--out"),
    (["trace", "flash2", "--N", "32", "--d", "8", "--out", "x.bin"], "--out"),
    (["trace", "flash2", "--N", "32", "--d", "8", "--out", "{dir}"], "--out"),
    (["trace", "flash2", "--N", "32", "--d", "8", "--din", "/nonexistent/t.din"], "--din"),
    (["trace", "flash2", "--N", "32", "--word-bytes", "0"], "--word-bytes"),
    (["trace", "flahs2"], "did you mean 'flash2'"),
    (["trace", "flash2", "--N", "0"], "--N"),
    (["trace", "flash2", "--heads", "3", "--kv-heads", "2"], "--kv-heads"),
    (["trace", "flash2", "--tiling", '{"Br": 1000, "Bc": 1000}'], "--M"),
    (["trace", "flash2", "--budget", "0.000001", "--out", "t.npz"], "--budget"),
    (["trace", "flash2", "--max-memory", "1k", "--out", "t.npz"], "--max-memory"),
    # ---- verify
    (["verify", "flash2", "--N", "100000", "--d", "128", "--M", "8192"], "--N"),
    (["verify", "flash2", "--N", "2048", "--d", "64", "--M", "4096"], "--N"),
    (["verify", "flash2", "--N", "512", "--d", "64", "--M", "4096", "--budget", "10"], "--budget"),
    (["verify", "flash2", "--policies", ","], "--policies"),
    (["verify", "flash2", "--policies", "lru,xyz"], "--policies"),
    (["verify", "flash2", "--N", "0"], "--N"),
    (["verify", "flash2", "--M", "0"], "--M"),
    (["verify", "flahs2"], "did you mean 'flash2'"),
    (["verify", "flash2", "--window", "4"], "--causal"),
    (["verify", "flash2", "--max-memory", "1k"], "--max-memory"),
    (["verify", "flash2", "--device", "nope"], "--device"),
    # ---- pebble
    (["pebble", "--N", "9"], "--N"),
    (["pebble", "--d", "5"], "--d"),
    (["pebble", "--Nkv", "7"], "--Nkv"),
    (["pebble", "--M", "0"], "--M"),
    (["pebble", "--N", "2", "--d", "1", "--M", "2"], "--M"),
    (["pebble", "--time-limit", "0"], "--time-limit"),
    (["pebble", "--time-limit", "inf"], "--time-limit"),
    (["pebble", "--matmul", "5", "1", "1"], "--matmul"),
    (["pebble", "--matmul", "2", "2", "2", "--N", "2"], "--matmul"),
    # ---- issue 24's run/plan/bound failures, with their relatives
    (["run", "flash2", "--inputs", "/dev/zero", "--M", "512"], "--inputs file /dev/zero"),
    (["run", "flash2", "--inputs", "/dev/urandom", "--M", "512"], "--inputs file /dev/urandom"),
    (["run", "flash2", "--inputs", "/dev/null", "--M", "512"], "not a regular file"),
    (["run", "flash2", "--inputs", "{intQ}", "--M", "100"], "--inputs file"),
    (["run", "flash2", "--inputs", "{intQ}", "--M", "100"], "array Q has dtype int64"),
    (["run", "flash2", "--inputs", "{badDO}", "--M", "100", "--backward"], "array dO"),
    (["run", "flash2", "--inputs", "{good}", "--M", "100", "--backward"],
     "missing array(s) ['dO']"),
    (["run", "flash2", "--inputs", "{nan}", "--M", "100"], "array Q: Q has a non-finite entry"),
    (["run", "flash2", "--N", "1048576", "--d", "64", "--M", "65536", "--count-only",
      "--density", "0.1", "--force"], "--tiling"),
    (["run", "matmul", "--m", str(2**62), "--k", "4", "--n", "4", "--M", "1000",
      "--count-only"], "--m must be an integer in [1, 2**50]"),
    (["run", "matmul", "--m", "4", "--k", str(2**51), "--n", "4", "--M", "1000",
      "--count-only"], "--k must be an integer in [1, 2**50]"),
    (["run", "matmul", "--m", "4", "--k", "4", "--n", str(2**60), "--M", "1000"], "--n"),
    (["trace", "approx_poly", "--N", "64", "--d", "8", "--M", "20000"], "give --entry-bound"),
    (["verify", "approx_poly", "--N", "64", "--d", "8", "--M", "20000"], "give --entry-bound"),
    (["trace", "flash2", "--N", "64", "--d", "8", "--entry-bound", "1"],
     "--entry-bound applies to approximate algorithms"),
    (["verify", "approx_poly", "--N", "64", "--d", "8", "--entry-bound", "-1"], "--entry-bound"),
    (["run", "flash1", "--density", "0.5"], "--density: flash1 does not support"),
    (["run", "standard", "--density", "0.5", "--count-only"], "--density"),
    (["run", "flash2", "--M-bytes", str(2**70), "--dtype", "fp16"], "--M-bytes"),
    (["plan", "--N", "64", "--d", "8", "--M-bytes", str(2**70), "--dtype", "fp8"], "--M-bytes"),
    (["bound", "--N", "4096", "--d", "64", "--M", "16384", "--q", str(2**81 + 1)],
     "--q must be a prime power in (N, 2**80]"),
    (["bound", "--N", "4096", "--d", "64", "--M", "16384", "--q", str(3 * 2**61)], "--q"),
    (["bound", "--N", "4096", "--d", "64", "--M", "16384", "--q", str((2**31 - 1) * 8191)],
     "--q must be a prime power"),
    (["bound", "--N", "64", "--d", "8", "--M", "100", "--q", "64"], "--q must be > --N"),
    # ---- the command line itself
    (["nosuchverb"], "invalid choice"),
    (["run", "flash2", "--no-such-flag"], "--no-such-flag"),
]


def _files(folder) -> dict[str, str]:
    """The input files the --inputs and --out cases name."""
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((8, 4)) for _ in range(3))
    paths = {k: str(folder / v) for k, v in (("txt", "notes.txt"), ("npy", "q.npy"),
                                             ("empty", "empty.npz"), ("noV", "noV.npz"),
                                             ("good", "good.npz"), ("nan", "nan.npz"),
                                             ("badK", "badK.npz"), ("dir", "a_folder"),
                                             ("hugeV", "hugeV.npz"))}
    (folder / "notes.txt").write_text("not an array\n")
    np.save(paths["npy"], Q)
    (folder / "empty.npz").write_bytes(b"")
    np.savez(paths["noV"], Q=Q, K=K)
    np.savez(paths["good"], Q=Q, K=K, V=V)
    Qn = Q.copy()
    Qn[3, 2] = np.nan
    np.savez(paths["nan"], Q=Qn, K=K, V=V)
    np.savez(paths["badK"], Q=Q, K=K[:, :3], V=V[:, :3])
    paths["intQ"], paths["badDO"] = str(folder / "intQ.npz"), str(folder / "badDO.npz")
    np.savez(paths["intQ"], Q=Q.astype(np.int64), K=K, V=V)
    np.savez(paths["badDO"], Q=Q, K=K, V=V, dO=np.ones((3, 4)))
    np.savez(paths["hugeV"], Q=Q / 4, K=K / 4, V=np.full_like(V, 1e307))  # issue 24
    (folder / "a_folder").mkdir()
    return paths


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    paths = _files(inputs)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("ATTNIO_PROGRESS", "0")
    return work, paths


@pytest.mark.parametrize("argv,fragment", CLI_CASES,
                         ids=[" ".join(a)[:60] for a, _ in CLI_CASES])
def test_cli_refuses_in_one_line_naming_the_flag(argv, fragment, workdir, capsys):
    work, paths = workdir
    argv = [a.format(**paths) if "{" in a and "}" in a and not a.startswith("{\"")
            and a != "{oops" else a for a in argv]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert fragment in err, err
    assert "Traceback" not in err
    assert out == "", out
    assert os.listdir(work) == [], os.listdir(work)  # nothing written half-way


def _qkv(N=8, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((N, d)) for _ in range(3)]


def _nan_q():
    Q, K, V = _qkv()
    Q[1, 1] = np.nan
    return Q, K, V


def _torch_case(fn):
    def call():
        torch = pytest.importorskip("torch")
        return fn(torch)
    return call


def _poly(torch, q, **kw):
    from attnio.torch_ops import poly_attention

    return poly_attention(q, q, q, **kw)


run = attnio.run
verify = attnio.cachesim.validation.verify
# (id, call, the argument it must name)
API_CASES: list[tuple[str, object, str]] = [
    ("N zero", lambda: run("flash2", shape=(0, 4), M=100), "Nq"),
    ("N huge", lambda: run("flash2", shape=(10**200, 4), M=100), "Nq"),
    ("N beyond 2**50", lambda: run("flash2", shape=(2**50 + 1, 4), M=100), "Nq"),
    ("d float", lambda: run("flash2", shape=(8, 2.5), M=100), "d"),
    ("M zero", lambda: run("flash2", shape=(8, 4), M=0), "M"),
    ("M bool", lambda: run("flash2", shape=(8, 4), M=True), "M"),
    ("M huge", lambda: run("flash2", shape=(8, 4), M=10**200), "M"),
    ("M too small", lambda: run("flash2", shape=(8, 64), M=100), "M"),
    ("causal value", lambda: run("flash2", shape=(8, 4), M=100, causal="diag"), "causal"),
    ("window zero", lambda: run("flash2", shape=(8, 4), M=100, causal=True, window=0), "window"),
    ("window unmasked", lambda: run("flash2", shape=(8, 4), M=100, window=2), "window"),
    ("mode unknown", lambda: run("flash2", *_qkv(), M=100, mode="fast"), "mode"),
    ("count mode without shape", lambda: run("flash2", M=100), "shape"),
    ("compute mode without data", lambda: run("flash2", shape=(8, 4), M=100, mode="compute"),
     "mode"),
    ("budget negative", lambda: run("flash2", *_qkv(), M=100, limits=Limits(budget_s=-1)),
     "budget_s"),
    ("max_memory zero", lambda: run("flash2", *_qkv(), M=100, limits=Limits(max_memory=0)),
     "max_memory"),
    ("max_memory too small", lambda: run("flash2", *_qkv(), M=100,
                                         limits=Limits(max_memory=10)), "max_memory"),
    ("compute estimate over budget", lambda: run("standard", *_qkv(4096, 64), M=64,
                                                 limits=Limits(budget_s=1.0)),
     "budget_s"),
    ("scale overflows the logits", lambda: run("flash2", *_qkv(), M=100, scale=1e308), "scale"),
    ("scale inf", lambda: run("flash2", shape=(8, 4), M=100, scale=float("inf")), "scale"),
    ("scale nan", lambda: run("flash2", *_qkv(), M=100, scale=float("nan")), "scale"),
    ("huge entries overflow the logits", lambda: run(
        "flash2", *(x * 1e160 for x in _qkv()), M=100), "scale"),
    ("NaN input", lambda: run("flash2", *_nan_q(), M=100), "Q"),
    ("K V shapes", lambda: run("flash2", *_qkv()[:2], np.ones((7, 4)), M=100), "V"),
    ("Q K head dims", lambda: run("flash2", _qkv()[0], np.ones((8, 3)), np.ones((8, 3)), M=100),
     "K"),
    ("rank", lambda: run("flash2", np.ones(8), np.ones(8), np.ones(8), M=100), "Q"),
    ("integer dtype", lambda: run("flash2", np.ones((8, 4), dtype=int), *_qkv()[1:], M=100), "Q"),
    ("empty sequence", lambda: run("flash2", np.ones((0, 4)), np.ones((0, 4)), np.ones((0, 4)),
                                   M=100), "Q"),
    ("Q only", lambda: run("flash2", _qkv()[0], M=100), "Q"),
    ("shape contradicts data", lambda: run("flash2", *_qkv(), shape=(9, 4), M=100), "shape"),
    ("no backward pass", lambda: run("flash1", *_qkv(), M=100, backward=True), "backward"),
    ("backward without dO", lambda: run("flash2", *_qkv(), M=100, backward=True), "grad_output"),
    ("tiling unknown field", lambda: run("flash2", shape=(64, 16), M=1000, tiling={"Bq": 4}),
     "tiling"),
    ("tiling wrong type", lambda: run("flash2", shape=(64, 16), M=1000, tiling=5), "tiling"),
    ("approx entry bound far too large", lambda: run(
        "approx_poly", shape=(64, 8), M=20000, tiling={"entry_bound": 5.0}), "entry_bound"),
    ("approx count mode without bound", lambda: run("approx_poly", shape=(16, 4), M=2000,
                                                    tiling={"eps": 1e-3}), "entry_bound"),
    ("approx eps zero", lambda: run("approx_poly", *_qkv(16, 4), M=2000, tiling={"eps": 0.0}),
     "eps"),
    ("unknown algorithm", lambda: run("flash3", shape=(8, 4), M=100), "algorithm"),
    ("trace of an absurd size", lambda: attnio.trace("flash2", 10**5, 128, 8192), "max_memory"),
    ("trace over budget", lambda: attnio.trace("flash2", 4096, 64, 4096,
                                               limits=attnio.Limits(budget_s=1e-6)), "budget_s"),
    ("trace N zero", lambda: attnio.trace("flash2", 0, 8, 100), "N"),
    ("trace without M", lambda: attnio.trace("flash2", 8, 4), "M"),
    ("verify of an absurd size", lambda: verify("flash2", 10**5, 128, 8192),
     "max_memory"),
    ("verify no policy", lambda: verify(
        "flash2", 16, 4, 200, options=attnio.cachesim.VerifyOptions(())), "policies"),
    ("verify unknown policy", lambda: verify(
        "flash2", 16, 4, 200, options=attnio.cachesim.VerifyOptions(("xyz",))),
     "policies"),
    ("replay capacity zero", lambda: attnio.replay((np.arange(4), np.zeros(4)), 0),
     "capacity_words"),
    ("replay policy", lambda: attnio.replay((np.arange(4), np.zeros(4)), 4, "mru"), "policy"),
    ("matmul over budget", lambda: attnio.blocks.matmul.run_matmul(
        np.ones((200, 200)), np.ones((200, 200)), M=12, limits=attnio.Limits(budget_s=1e-3)),
     "budget_s"),
    ("matmul absurd memory", lambda: attnio.blocks.matmul.run_matmul(
        np.ones((2, 2)), np.ones((2, 2)), M=12, limits=attnio.Limits(max_memory=1)),
     "max_memory"),
    ("matmul shapes", lambda: attnio.blocks.matmul.run_matmul(np.ones((2, 3)), np.ones((2, 3)),
                                                               M=12), "B"),
    ("plan N huge", lambda: attnio.plan(10**200, 64, 1000), "N"),
    ("plan M huge", lambda: attnio.plan(100, 64, 10**200), "M"),
    ("plan d huge", lambda: attnio.plan(100, 10**200, 1000), "d"),
    ("plan eps", lambda: attnio.plan(64, 8, 100, approx_eps=2), "approx_eps"),
    ("plan entry bound alone", lambda: attnio.plan(64, 8, 100, entry_bound=1.0), "entry_bound"),
    ("plan device", lambda: attnio.plan(64, 8, device="nope"), "device"),
    ("plan M_bytes below a word", lambda: attnio.plan(64, 8, M_bytes=1, dtype_bytes=4),
     "M_bytes"),
    ("plan nothing fits", lambda: attnio.plan(64, 8, 1), "M"),
    ("bounds N huge", lambda: attnio.bounds.applicable(N=10**200, d=64, M=1000), "N"),
    ("bounds q", lambda: attnio.bounds.applicable(N=64, d=8, M=100, q=64), "q"),
    ("bounds heads zero", lambda: attnio.bounds.trivial(N=16, Nkv=16, d=8, heads=0), "heads"),
    ("Shape GQA", lambda: attnio.Shape(8, 8, 4, heads=3, kv_heads=2), "kv_heads"),
    ("Shape coerce a number", lambda: attnio.Shape.coerce(5), "shape"),
    ("Shape coerce mapping", lambda: attnio.Shape.coerce({"Nq": 1}), "shape"),
    ("reference window unmasked", lambda: attnio.reference.attention(*_qkv(), window=2),
     "window"),
    ("polynomial range", lambda: attnio.approx.poly.polynomial(1e-3, 1e6), "entry_bound"),
    ("polynomial eps", lambda: attnio.approx.poly.polynomial(0.0, 1.0), "eps"),
    ("pebble time limit", lambda: attnio.pebble.solve(attnio.pebble.dag.binary_tree(4), 3,
                                                      time_limit=0), "time_limit"),
    ("pebble compare time limit", lambda: attnio.pebble.compare(
        attnio.pebble.Instance("attention", (2, 2, 1)), 6, time_limit=float("inf")),
     "time_limit"),
    ("bytes text", lambda: attnio.core.resources.parse_bytes("abc"), "max_memory"),
    ("device unknown", lambda: attnio.hardware.devices.get("nope"), "device"),
    ("algorithm unknown", lambda: attnio.algorithms.get("nope"), "algorithm"),
    ("approx_poly V near the largest float", lambda: attnio.run(
        "approx_poly", *_qkv(N=16)[:2], np.full((16, 4), 1e307), M=4000), "V"),
    ("poly_attention empty sequence", _torch_case(
        lambda torch: _poly(torch, torch.zeros(0, 8, dtype=torch.float64), entry_bound=1.0)),
     "q"),
    ("poly_attention int tensor", _torch_case(
        lambda torch: _poly(torch, torch.zeros(4, 8, dtype=torch.int64), entry_bound=1.0)), "q"),
    # issue 24: types validated once (numpy scalars of the right kind pass, strings do not)
    ("scale a string", lambda: run("flash2", shape=(8, 4), M=100, scale="0.5"), "scale"),
    ("budget a string", lambda: attnio.Limits(budget_s="5"), "budget_s"),
    ("force a string", lambda: attnio.Limits(force="no"), "force"),
    ("max_memory a string", lambda: attnio.Limits(max_memory="8G"), "max_memory"),
    ("limits not Limits", lambda: run("flash2", shape=(8, 4), M=100, limits=5), "limits"),
    ("backward a string", lambda: run("flash2", shape=(8, 4), M=100, backward="yes"),
     "backward"),
    ("matmul limits not Limits", lambda: attnio.blocks.matmul.run_matmul(
        shape=(4, 4, 4), M=12, limits={"budget_s": 5}), "limits"),
    ("matmul m beyond 2**50", lambda: attnio.blocks.matmul.run_matmul(
        shape=(2**62, 4, 4), M=100), "m"),
    ("inputs a device", lambda: run("flash2", inputs="/dev/zero", M=512), "inputs"),
    ("inputs and arrays", lambda: run("flash2", *_qkv(), inputs="/dev/zero", M=512), "inputs"),
    ("random inputs without shape", lambda: run("flash2", inputs=attnio.runner.RandomInputs(),
                                                M=512), "shape"),
    ("random inputs seed", lambda: attnio.runner.RandomInputs(seed=-1), "seed"),
    ("check without data", lambda: run("flash2", shape=(8, 4), M=100, check=True), "check"),
    ("q beyond 2**80", lambda: attnio.bounds.asymptotic.fast_matmul_field(N=64, d=8, M=100,
                                                                            q=2**81 + 1),
     "q"),
    ("sparse tile map beyond 2**28", lambda: run("flash2", shape=attnio.Shape(
        2**20, 2**20, 64, block_mask=attnio.BlockMask.random(2**20, 2**20, 1024, density=0.1)),
        M=65536, mode="count"), "N"),  # no tiling was given: the size is the cause (issue 36)
    ("poly_attention is_causal", _torch_case(
        lambda torch: _poly(torch, torch.zeros(4, 8, dtype=torch.float64), entry_bound=1.0,
                            is_causal="yes")), "is_causal"),
]


@pytest.mark.parametrize("case,call,name", API_CASES, ids=[c[0] for c in API_CASES])
def test_api_refuses_naming_the_argument(case, call, name):
    with pytest.raises(ParameterError) as e:
        call()
    msg = str(e.value)
    assert isinstance(e.value, AttnioError) and isinstance(e.value, ValueError)
    assert "\n" not in msg
    param = getattr(e.value, "param", None)
    assert param == name or (param is None and name in msg), (param, msg)


def test_the_catalogue_has_at_least_110_cases():
    assert len(CLI_CASES) + len(API_CASES) >= 110
