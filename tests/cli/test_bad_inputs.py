"""The bad-input catalogue: every case names the parameter and its allowed range.

Through the Python API each case raises the library's own error type (a ParameterError is also a
ValueError); through the CLI it prints one line on stderr and exits with code 2, with no traceback
unless ``--debug``.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import attnio
from attnio import CapacityError, ParameterError, UnknownNameError
from attnio.cli import main
from attnio.core.workload import Shape
from attnio.runner import BackwardPass, Limits


def qkv(N=8, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((N, d)) for _ in range(3)]


def _nan_at(i, j, which=0):
    arrs = qkv()
    arrs[which][i, j] = np.nan
    return arrs


def _inf_at(i, j, which=2):
    arrs = qkv()
    arrs[which][i, j] = -np.inf
    return arrs


API_CASES = [
    # (id, call, error type, message fragment)
    ("N zero", lambda: attnio.run("flash2", shape=(0, 4), M=100), ParameterError,
     "Nq must be an integer >= 1, got 0"),
    ("N negative", lambda: attnio.run("flash2", shape=(-3, 4), M=100), ParameterError,
     "Nq must be an integer >= 1, got -3"),
    ("N non-integer", lambda: attnio.run("flash2", shape=(2.5, 4), M=100), ParameterError,
     "Nq must be an integer >= 1, got 2.5"),
    ("d zero", lambda: attnio.run("flash2", shape=(8, 0), M=100), ParameterError,
     "d must be an integer >= 1, got 0"),
    ("M zero", lambda: attnio.run("flash2", shape=(8, 4), M=0), ParameterError,
     "M must be an integer >= 1, got 0"),
    ("M non-integer", lambda: attnio.run("flash2", shape=(8, 4), M=100.5), ParameterError,
     "M must be an integer >= 1, got 100.5"),
    ("M bool", lambda: attnio.run("flash2", shape=(8, 4), M=True), ParameterError,
     "M must be an integer >= 1"),
    ("M below the least tiling flash2", lambda: attnio.run("flash2", shape=(8, 4), M=19),
     ParameterError, "it needs M >= 20 words"),
    ("M below the least tiling flash1", lambda: attnio.run("flash1", shape=(8, 4), M=20),
     ParameterError, "it needs M >= 21 words"),
    ("Q K mismatched d", lambda: attnio.run("flash2", qkv()[0], np.ones((8, 3)), np.ones((8, 3)),
                                             M=100), ParameterError, "same head dimension d"),
    ("K V mismatched", lambda: attnio.run("flash2", *qkv()[:2], np.ones((7, 4)), M=100),
     ParameterError, "K and V must have the same shape"),
    ("wrong rank", lambda: attnio.run("flash2", np.ones(8), np.ones(8), np.ones(8), M=100),
     ParameterError, "must be 2-D (N, d) or 4-D"),
    ("rank mismatch", lambda: attnio.run("flash2", np.ones((1, 1, 8, 4)), np.ones((8, 4)),
                                          np.ones((8, 4)), M=100), ParameterError,
     "must both be 2-D or both 4-D"),
    ("d = 0 array", lambda: attnio.run("flash2", np.ones((8, 0)), np.ones((8, 0)),
                                        np.ones((8, 0)), M=100), ParameterError,
     "head dimension d >= 1"),
    ("integer dtype", lambda: attnio.run("flash2", np.ones((8, 4), dtype=int), *qkv()[1:],
                                          M=100), ParameterError, "must have a floating dtype"),
    ("NaN entry", lambda: attnio.run("flash2", *_nan_at(3, 2), M=100), ParameterError,
     "Q has a non-finite entry nan at index (3, 2)"),
    ("inf entry", lambda: attnio.run("flash2", *_inf_at(5, 1), M=100), ParameterError,
     "V has a non-finite entry -inf at index (5, 1)"),
    ("tiling overflows M", lambda: attnio.run("flash2", shape=(64, 16), M=1000,
                                               tiling={"Br": 64, "Bc": 64}), CapacityError,
     "M=1000"),
    ("tiling unknown field", lambda: attnio.run("flash2", shape=(64, 16), M=1000,
                                                 tiling={"Bq": 4}), ParameterError,
     "unknown field(s) ['Bq']"),
    ("tiling non-positive", lambda: attnio.run("flash2", shape=(64, 16), M=1000,
                                                tiling={"Br": 0, "Bc": 4}), ParameterError,
     "tiling.Br must be an integer >= 1, got 0"),
    ("unknown algorithm", lambda: attnio.run("flash3", shape=(8, 4), M=100), UnknownNameError,
     "did you mean 'flash2'"),
    ("compute budget", lambda: attnio.run("standard", *qkv(4096, 64), M=64,
                                          limits=Limits(budget_s=1.0)),
     ParameterError, "would take about"),
    ("causal value", lambda: attnio.run("flash2", shape=(8, 4), M=100, causal="diag"),
     ParameterError, "causal must be True, False, 'bottom_right' or 'top_left'"),
    ("window zero", lambda: attnio.run("flash2", shape=(8, 4), M=100, causal=True, window=0),
     ParameterError, "window must be an integer >= 1, got 0"),
    ("heads not divisible", lambda: Shape(8, 8, 4, heads=3, kv_heads=2), ParameterError,
     "heads must be a multiple of kv_heads"),
    ("scale not finite", lambda: attnio.run("flash2", shape=(8, 4), M=100, scale=float("inf")),
     ParameterError, "scale must be a finite real number"),
    ("mode unknown", lambda: attnio.run("flash2", *qkv(), M=100, mode="fast"), ParameterError,
     "mode must be 'compute' or 'count'"),
    ("no data no shape", lambda: attnio.run("flash2", M=100), ParameterError,
     "give Q, K, V"),
    ("approx eps zero", lambda: attnio.run("approx_poly", *qkv(16, 4), M=2000,
                                            tiling={"eps": 0.0}), ParameterError,
     "eps must be in [1e-12, 0.5]"),
    ("approx entry bound negative", lambda: attnio.run("approx_poly", *qkv(16, 4), M=2000,
                                                        tiling={"eps": 1e-3, "entry_bound": -1}),
     ParameterError, "entry_bound must be a finite real number > 0"),
    ("approx entries beyond the bound", lambda: attnio.run(
        "approx_poly", *qkv(16, 4), M=2000, tiling={"eps": 1e-3, "entry_bound": 0.1}),
     ParameterError, "outside the precondition |entries| <= entry_bound"),
    ("approx count mode without a bound", lambda: attnio.run(
        "approx_poly", shape=(16, 4), M=2000, tiling={"eps": 1e-3}), ParameterError,
     "needs the entry bound B"),
    # block-sparse layouts and backward requests (issue 17)
    ("block mask wrong dtype", lambda: attnio.BlockMask(np.full((2, 2), 0.5), 4), ParameterError,
     "block_mask must be a boolean array"),
    ("block mask wrong shape", lambda: attnio.run(
        "flash2", shape=Shape(16, 16, 4, block_mask=attnio.BlockMask(np.ones((3, 4), bool), 4)),
        M=200, mode="count"), ParameterError, "block_mask has 3x4 blocks of 4x4"),
    ("block mask 1-D", lambda: attnio.BlockMask(np.ones(4, bool), 4), ParameterError,
     "block_mask must be a 2-D boolean array"),
    ("block mask keeps nothing", lambda: attnio.BlockMask(np.zeros((2, 2), bool), 4),
     ParameterError, "keeps no block: at least one entry must be True"),
    ("block-sparse count over budget", lambda: attnio.run(
        "flash2", shape=Shape(65536, 65536, 64, block_mask=attnio.BlockMask.random(
            65536, 65536, 64, density=0.5)), M=4096, mode="count"), ParameterError,
     "more than budget_s (300 s); use attnio.plan (closed forms)"),
    ("block size beyond any sequence", lambda: attnio.BlockMask([[1]], 2 ** 70), ParameterError,
     "block_mask.bq must be an integer in [1, 2**40]"),
    ("density zero", lambda: attnio.BlockMask.random(16, 16, 4, density=0.0), ParameterError,
     "density must be a real number in (0, 1]"),
    ("density above one", lambda: attnio.BlockMask.random(16, 16, 4, density=1.5),
     ParameterError, "density must be a real number in (0, 1]"),
    ("backward for an algorithm with none", lambda: attnio.run(
        "standard", shape=(16, 4), M=200, mode="count", backward=True), ParameterError,
     "standard has no backward pass"),
    ("backward algorithm unknown", lambda: attnio.run(
        "flash2", shape=(16, 4), M=200, mode="count",
        backward=BackwardPass("flash3_backward")), UnknownNameError, "backward_algorithm"),
    ("backward not a bool", lambda: attnio.run(
        "flash2", shape=(16, 4), M=200, mode="count", backward="flash2_backward"),
     ParameterError, "backward must be True, False or a BackwardPass"),
    ("backward algorithm without block-sparse support", lambda: attnio.run(
        "flash2", shape=Shape(16, 16, 4, block_mask=attnio.BlockMask.random(16, 16, 4,
                                                                           density=0.5)),
        M=200, mode="count", backward=BackwardPass("small_cache_backward")),
     ParameterError, "no block-sparse support"),
    ("plan backward algorithm without backward", lambda: attnio.plan(
        16, 4, 200, backward_algorithm="small_cache_backward"), ParameterError,
     "backward_algorithm applies to the backward pass"),
]


@pytest.mark.parametrize("case,call,exc,fragment", API_CASES, ids=[c[0] for c in API_CASES])
def test_api_catalogue(case, call, exc, fragment):
    with pytest.raises(exc) as e:
        call()
    assert fragment in str(e.value)
    assert isinstance(e.value, attnio.AttnioError)


def test_nonfinite_inputs_propagate_as_the_reference_does_when_allowed():
    for which, (i, j) in ((0, (3, 2)), (1, (5, 0)), (2, (1, 1))):
        Q, K, V = qkv()
        [Q, K, V][which][i, j] = np.nan
        for name in [a.name for a in attnio.algorithms.all_algorithms() if a.exact]:
            for causal in (False, True):
                res = attnio.run(name, Q, K, V, M=200, causal=causal, allow_nonfinite=True)
                ref = attnio.reference.attention(Q, K, V, causal=causal)
                bad, ref_bad = ~np.isfinite(res.output), ~np.isfinite(ref)
                np.testing.assert_array_equal(bad.any(axis=1), ref_bad.any(axis=1),
                                              err_msg=f"{name} causal={causal} which={which}")
                ok = ~ref_bad.any(axis=1)
                if ok.any():
                    assert np.abs(res.output[ok] - ref[ok]).max() <= 1e-10


def test_force_runs_beyond_the_budget():
    res = attnio.run("flash2", *qkv(64, 4), M=100, limits=Limits(budget_s=1e-9, force=True))
    assert res.output.shape == (64, 4)


CLI_CASES = [
    (["run", "flash2", "--N", "0"], "--N must be an integer >= 1, got 0"),
    (["run", "flash2", "--N", "-5"], "--N must be an integer >= 1, got -5"),
    (["run", "flash2", "--N", "2.5"], "argument --N: invalid int value: '2.5'"),
    (["run", "flash2", "--d", "0"], "--d must be an integer >= 1, got 0"),
    (["run", "flash2", "--M", "0"], "--M must be an integer >= 1, got 0"),
    (["run", "flash2", "--d", "64", "--M", "100"], "--M=100 is too small for flash2"),
    (["run", "flahs2"], "did you mean 'flash2'"),
    (["run", "flash2", "--tiling", '{"Br": 1024, "Bc": 1024}'], "more than --M=16384"),
    (["run", "flash2", "--tiling", "{oops"], "--tiling is not valid JSON"),
    (["run", "standard", "--N", "20000", "--M", "64"], "would take about"),
    (["run", "flash2", "--heads", "3", "--kv-heads", "2"],
     "--heads must be a multiple of --kv-heads"),
    (["run", "flash2", "--window", "4"], "window needs a causal mask"),
    (["run", "flash2", "--inputs", "/nonexistent/x.npz"], "cannot read it"),
    (["run", "flash1", "--backward"], "no backward pass"),
    (["run", "approx_poly", "--N", "16", "--d", "4", "--M", "2000", "--eps", "0"],
     "eps must be in [1e-12, 0.5]"),
    (["run", "approx_poly", "--N", "16", "--d", "4", "--M", "2000", "--eps", "1e-3",
      "--entry-bound", "-2"], "--entry-bound must be a finite real number > 0"),
    (["run", "flash2", "--eps", "1e-3"], "apply to approximate algorithms"),
    (["trace", "flash2", "--N", "100000", "--d", "64"], "--max-products"),
    (["trace", "flash2", "--N", "32", "--d", "8", "--out", "/nonexistent/t.npz"],
     "--out /nonexistent/t.npz: its folder"),
    (["trace", "flash2", "--N", "32", "--word-bytes", "0"], "--word-bytes must be an integer >= 1"),
    (["verify", "flash2", "--policies", ","], "--policies must name at least one"),
    (["run", "flash2", "--density", "0"], "--density must be a real number in (0, 1]"),
    (["plan", "--N", "256", "--d", "16", "--M", "2048", "--density", "1.5"],
     "--density must be a real number in (0, 1]"),
    (["bound", "--N", "256", "--d", "16", "--M", "2048", "--density", "-1"],
     "--density must be a real number in (0, 1]"),
    (["run", "flash2", "--density", "0.5", "--block-size", "0"],
     "--block-size must be an integer in [1, 1024]"),
    (["bound", "--N", "64", "--d", "8", "--M", "512", "--density", "0.5", "--block-size",
      "1000000000000000000000"], "--block-size must be an integer in [1, 64]"),
    (["run", "flash2", "--block-size", "64"], "--block-size applies to a block layout"),
    (["run", "flash2", "--density", "0.5", "--causal"], "--density cannot be combined with"),
    (["run", "flash2", "--N", "1000000000", "--density", "0.5", "--block-size", "1",
      "--count-only"], "raise --block-size"),
    # the default block grows with N to keep the layout small; counting a billion-row layout
    # tile by tile is refused for its tile map, before it is drawn
    (["run", "flash2", "--N", "1000000000", "--density", "0.5", "--count-only"],
     "tiles in a block-sparse count, more than 2**28"),
    (["run", "flash2", "--N", "65536", "--d", "64", "--M", "4096", "--density", "0.5",
      "--count-only"], "more than --budget (300 s); use `attnio plan` (closed forms)"),
    (["run", "standard", "--density", "0.5"], "standard does not support block-sparse"),
    (["run", "standard", "--backward"], "--backward: standard has no backward pass"),
    (["run", "flash2", "--backward-algorithm", "small_cache_backward"],
     "--backward-algorithm applies to the backward pass"),
    (["plan", "--N", "256", "--d", "16", "--M", "2048", "--backward", "--backward-algorithm",
      "nope"], "--backward-algorithm: unknown backward_algorithm 'nope'"),
    (["plan", "--N", "256", "--d", "16", "--M", "2048", "--backward", "--backward-algorithm",
      "small_cache_backward", "--density", "0.5"], "no block-sparse support"),
]


@pytest.mark.parametrize("layout,extra,fragment", [
    (np.ones((3, 4), bool), [], "--block-mask"),  # blocks would not be square
    (np.ones((4, 4), bool), ["--block-size", "32"], "--block-mask has 4x4 blocks"),
    (np.full((4, 4), 0.5), [], "--block-mask must be a boolean array"),
    (np.ones(4, bool), [], "--block-mask must be a 2-D boolean array"),
    (np.ones((2, 2, 2), bool), [], "got an array of dimensions (2, 2, 2)"),
    (np.zeros((4, 4), bool), [], "keeps no block: at least one entry must be True"),
    (np.ones((512, 512), bool), [], "more than the Nq x Nkv"),
    (None, [], "does not exist"),
    ("npz", [], "an .npz archive"),
    ("text", [], "is not a .npy array"),
], ids=["not-square", "wrong-shape", "float", "1-D", "3-D", "empty", "too-many", "missing", "npz",
        "text"])
def test_cli_block_mask_files(layout, extra, fragment, tmp_path, capsys):
    path = tmp_path / "layout.npy"
    if isinstance(layout, np.ndarray):
        np.save(path, layout)
    elif layout == "npz":
        np.savez(tmp_path / "layout.npz", a=np.ones((4, 4), bool))
        path = tmp_path / "layout.npz"
    elif layout == "text":
        path.write_text("not an array")
    for verb in (["run", "flash2"], ["plan"], ["bound"]):
        argv = verb + ["--N", "256", "--d", "16", "--M", "2048", "--block-mask", str(path)] + extra
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert fragment in err and "--block-mask" in err, (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv,fragment", CLI_CASES, ids=[" ".join(c[0][1:]) for c in CLI_CASES])
def test_cli_catalogue(argv, fragment, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_nonfinite_inputs_file(tmp_path, capsys):
    Q, K, V = _nan_at(3, 2)
    path = tmp_path / "in.npz"
    np.savez(path, Q=Q, K=K, V=V)
    assert main(["run", "flash2", "--inputs", str(path), "--M", "100"]) == 2
    err = capsys.readouterr().err
    assert "Q has a non-finite entry nan at index (3, 2)" in err and err.count("\n") == 1
    assert main(["run", "flash2", "--inputs", str(path), "--M", "100", "--allow-nonfinite"]) == 0
    np.savez(path, Q=Q, K=K)
    assert main(["run", "flash2", "--inputs", str(path), "--M", "100"]) == 2
    assert "missing array(s) ['V']" in capsys.readouterr().err
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    assert main(["run", "flash2", "--inputs", str(empty), "--M", "100"]) == 2
    err = capsys.readouterr().err
    assert "not an .npz file" in err and err.count("\n") == 1


def test_cli_debug_shows_the_traceback_and_plain_run_does_not():
    cmd = [sys.executable, "-m", "attnio", "run", "flash2", "--N", "0"]
    plain = subprocess.run(cmd, capture_output=True, text=True)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().count("\n") == 0
    debug = subprocess.run(cmd[:3] + ["--debug"] + cmd[3:], capture_output=True, text=True)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
