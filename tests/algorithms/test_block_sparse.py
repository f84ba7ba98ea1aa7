"""Block-sparse attention: layouts, the masked float64 reference, flash2's forward and backward
skipping masked blocks (outputs and gradients equal the masked reference, simulated counts equal
the closed forms), and the certificate wherever a count is printed (plan, run --json)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnio
from attnio.algorithms import get_backward
from attnio.cli import main
from attnio.core import default_block_size, reference
from attnio.core.blockmask import BlockMask
from attnio.core.workload import Shape
from attnio.runner import BackwardPass

FA2 = attnio.algorithms.get("flash2")
FA2B = get_backward("flash2_backward")


def _layouts(Nq: int, Nkv: int, b: int):
    """A random layout of each density, causal and windowed block layouts, a user layout."""
    out = [BlockMask.random(Nq, Nkv, b, density=s, seed=i) for i, s in
           enumerate((0.1, 0.5, 1.0))]
    out.append(BlockMask.causal(Nq, Nkv, b))
    out.append(BlockMask.window(Nq, Nkv, 2 * b, b, align="top_left"))
    tq, tk = -(-Nq // b), -(-Nkv // b)
    user = np.zeros((tq, tk), bool)
    user[:, 0] = True  # a "global" first key block
    user[np.arange(tq), np.arange(tq) % tk] = True
    out.append(BlockMask(user, b))
    return out


def _dense_reference(Q, K, V, bm: BlockMask, dO=None):
    """The masked attention by brute force: -inf outside the kept blocks, in float64."""
    Nq, Nkv = Q.shape[-2], K.shape[-2]
    seen = bm.layout[np.arange(Nq) // bm.bq][:, np.arange(Nkv) // bm.bk]
    S = (Q @ K.T) / np.sqrt(Q.shape[-1])
    S = np.where(seen, S, -np.inf)
    m = np.max(S, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    P = np.exp(S - m)
    l_ = P.sum(-1, keepdims=True)
    P = np.where(l_ > 0, P / np.where(l_ > 0, l_, 1), 0.0)
    return P @ V


def test_the_chunked_reference_masks_by_the_layout(monkeypatch):
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((50, 8)) for _ in range(3))
    for bm in _layouts(50, 50, 8):
        want = _dense_reference(Q, K, V, bm)
        got = reference.attention(Q, K, V, block_mask=bm)
        assert np.abs(got - want).max() <= 1e-12
        monkeypatch.setattr(reference, "CHUNK_ELEMENTS", 7 * 50)  # chunks of 7 rows
        assert np.abs(reference.attention(Q, K, V, block_mask=bm) - want).max() <= 1e-12
        monkeypatch.undo()
    # a causal block layout at block size 1 is the causal mask
    for align in ("bottom_right", "top_left"):
        bm = BlockMask.causal(30, 50, 1, align=align)
        np.testing.assert_allclose(reference.attention(Q[:30], K, V, block_mask=bm),
                                   reference.attention(Q[:30], K, V, causal=align), atol=1e-13)


def test_grouped_query_reference_masks_every_query_head():
    rng = np.random.default_rng(1)
    Q = rng.standard_normal((2, 4, 24, 4))
    K, V = rng.standard_normal((2, 2, 24, 4)), rng.standard_normal((2, 2, 24, 4))
    bm = BlockMask.random(24, 24, 4, density=0.4, seed=3)
    out = reference.attention(Q, K, V, block_mask=bm)
    for b in range(2):
        for h in range(4):
            want = _dense_reference(Q[b, h], K[b, h // 2], V[b, h // 2], bm)
            assert np.abs(out[b, h] - want).max() <= 1e-12


@pytest.mark.parametrize("Nq,Nkv,b", [(37, 50, 8), pytest.param(64, 64, 8, marks=pytest.mark.slow),
                                      pytest.param(50, 29, 4, marks=pytest.mark.slow)])
def test_flash2_forward_and_backward_equal_the_masked_reference_and_closed_forms(Nq, Nkv, b):
    rng = np.random.default_rng(Nq + Nkv)
    d = 8
    Q, dO = rng.standard_normal((Nq, d)), rng.standard_normal((Nq, d))
    K, V = rng.standard_normal((Nkv, d)), rng.standard_normal((Nkv, d))
    for bm in _layouts(Nq, Nkv, b):
        shape = Shape(Nq, Nkv, d, block_mask=bm)
        ref = reference.attention(Q, K, V, block_mask=bm)
        refg = reference.attention_backward(Q, K, V, dO, block_mask=bm)
        for M in (max(FA2.min_M(shape), FA2B.min_M(shape)), 3 * b * d + b * b, 40 * d * d):
            res = attnio.run("flash2", Q, K, V, M=M, shape=shape, grad_output=dO,
                             backward=BackwardPass("flash2_backward"))
            assert np.abs(res.output - ref).max() <= 1e-10, (bm, M)
            for k, g in zip(("dQ", "dK", "dV"), refg):
                assert np.abs(res.grads[k] - g).max() <= 1e-10, (bm, M, k)
            fwd = FA2.cost(shape, res.tiling, lse=True).io
            assert (res.io.reads, res.io.writes) == (fwd.reads, fwd.writes), (bm, M)
            bwd = FA2B.cost(shape, res.backward_tiling).io
            assert (res.backward_io.reads, res.backward_io.writes) == (bwd.reads, bwd.writes)
            assert res.io.peak <= M and res.backward_io.peak <= M


def test_closed_forms_equal_the_simulation_on_every_candidate_tiling():
    shape = Shape(96, 80, 8, block_mask=BlockMask.random(96, 80, 16, density=0.3, seed=5))
    for M in (300, 2000):
        for t in FA2.candidate_tilings(shape, M):
            if FA2.footprint(shape, t) > M:
                continue
            res = attnio.run("flash2", shape=shape, M=M, mode="count", tiling=t)
            p = FA2.cost(shape, t).io
            assert (res.io.reads, res.io.writes) == (p.reads, p.writes), (M, t)
        for t in FA2B.candidate_tilings(shape, M):
            if FA2B.footprint(shape, t) > M:
                continue
            res = attnio.run("flash2", shape=shape, M=max(M, FA2.min_M(shape)), mode="count",
                             backward=BackwardPass(tiling=t))
            p = FA2B.cost(shape, t).io
            assert (res.backward_io.reads, res.backward_io.writes) == (p.reads, p.writes), t


def test_skipped_blocks_are_not_counted():
    """With tiles equal to the blocks, the reads of K and V are exactly 2d per kept block key."""
    N, d, b = 256, 16, 32
    dense = Shape(N, N, d)
    t = FA2.Tiling(b, b, 1)
    M = FA2.footprint(dense, t)
    full = attnio.run("flash2", shape=dense, M=M, mode="count", tiling=t).io
    for s in (0.25, 0.5):
        bm = BlockMask.random(N, N, b, density=s, seed=2)
        io = attnio.run("flash2", shape=Shape(N, N, d, block_mask=bm), M=M, mode="count",
                        tiling=t).io
        kv = 2 * d * b * bm.kept
        seen_rows = int(bm.layout.any(axis=1).sum()) * b
        assert io.reads == seen_rows * d + kv
        assert io.reads < full.reads


def test_default_block_size_follows_the_flash2_tile():
    assert default_block_size(4096, 4096, 64, 16384) == 64
    assert default_block_size(4096, 4096, 64, 16384 + 100) == 64
    assert default_block_size(100, 100, 64, 10 ** 6) == 128  # at most N's power of two
    assert default_block_size(100, 100, 64, 100) == 1


def test_plan_and_run_json_carry_the_certificate(capsys):
    assert main(["run", "flash2", "--N", "128", "--d", "16", "--M", "600", "--density", "0.5",
                 "--backward", "--json"]) == 0
    o = json.loads(capsys.readouterr().out)
    assert o["density"] == 0.5 and o["max_abs_err"] <= 1e-10
    assert o["backward"]["max_abs_grad_err"] <= 1e-10
    assert o["ratio"] == o["total"] / o["bound"] >= 1
    assert o["backward_ratio"] == o["backward"]["total"] / o["backward_bound"] >= 1
    assert o["bound_name"] and o["backward_bound_name"] and o["backward_algorithm"]
    assert main(["run", "flash2", "--N", "128", "--d", "16", "--M", "600", "--count-only"]) == 0
    text = capsys.readouterr().out
    assert "bound " in text and "ratio" in text
    # plan: forward and backward, the explicit bound and the ratio, text and JSON
    assert main(["plan", "--N", "256", "--d", "32", "--M", "256", "--backward"]) == 0
    text = capsys.readouterr().out
    for line in ("Best lower bound:", "Ratio total/bound:", "Backward bound:",
                 "Backward ratio:"):
        assert line in text
    assert main(["plan", "--N", "256", "--d", "32", "--M", "256", "--backward", "--json",
                 "--backward-algorithm", "flash2_backward"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["backward"]["algorithm"] == "flash2_backward"
    assert p["ratio"] == p["total"] / p["best_bound"]["value"]
    assert p["backward"]["ratio"] == p["backward"]["total"] / p["backward"]["best_bound"]["value"]
    # block-sparse plans score only the schedules that support a layout
    assert main(["plan", "--N", "256", "--d", "16", "--M", "2048", "--density", "0.25",
                 "--block-size", "32", "--backward", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["algorithm"] == "flash2" and p["backward"]["algorithm"] == "flash2_backward"
    assert main(["bound", "--N", "256", "--d", "16", "--M", "2048", "--density", "0.25",
                 "--backward", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert b["density"] == 0.25 and b["backward_best"] and b["best_value"] > 0


def test_a_block_mask_file_runs_as_given(tmp_path, capsys):
    layout = np.eye(4, dtype=bool)
    layout[:, 0] = True
    path = tmp_path / "layout.npy"
    np.save(path, layout)
    assert main(["run", "flash2", "--N", "64", "--d", "8", "--M", "400", "--block-mask",
                 str(path), "--json"]) == 0
    o = json.loads(capsys.readouterr().out)
    assert o["block_mask"] == "block_mask=4x4/16x16 s=0.4375" and o["max_abs_err"] <= 1e-10
