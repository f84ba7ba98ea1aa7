"""Real workloads: batch x heads, grouped-query attention, decoding, masks, the backward pass."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import attnio
from attnio.algorithms import mapper
from attnio.algorithms.protocol import NO_WINDOW
from attnio.core.errors import ParameterError
from attnio.core.workload import Shape
from attnio.runner import BackwardPass
from conftest import exact_attention_names, need

ALGS = exact_attention_names()
WINDOWED = [n for n in ALGS if mapper.supports(attnio.algorithms.get(n), NO_WINDOW)]


def qkv4(B, Hq, Hkv, Nq, Nkv, d, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, Hq, Nq, d)), rng.standard_normal((B, Hkv, Nkv, d)),
            rng.standard_normal((B, Hkv, Nkv, d)), rng.standard_normal((B, Hq, Nq, d)))


MASKS = [(False, None), (True, None), ("top_left", None), (True, 5)]


#: 4 query heads on 1 K/V head (a group of 4) and on 4 (no grouping) in the default run; on 2
#: (groups of 2, the same code path as 4) with ``-m slow``
@pytest.mark.parametrize("name", ALGS)
@pytest.mark.parametrize("Hkv", [1, pytest.param(2, marks=pytest.mark.slow), 4])
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("Nq,Nkv", [(19, 33), (33, 19)])
def test_batched_gqa_outputs_and_counts(name, Hkv, causal, window, Nq, Nkv):
    alg = attnio.algorithms.get(name)
    if mapper.can_run(alg, Shape.make(Nq=Nq, Nkv=Nkv, d=8, causal=causal, window=window)) == NO_WINDOW:
        with pytest.raises(ParameterError, match="does not support window"):
            attnio.run(name, shape=(Nq, Nkv, 8), M=4000, mode="count", causal=causal,
                       window=window)
        return
    Q, K, V, _ = qkv4(2, 4, Hkv, Nq, Nkv, 8, seed=Hkv + Nq)
    M = max(1200, 4 * alg.min_M(Shape(Nq, Nkv, 8)))
    res = attnio.run(name, Q, K, V, M=M, causal=causal, window=window)
    ref = attnio.reference.attention(Q, K, V, causal=causal, window=window)
    assert res.output.shape == Q.shape
    assert np.abs(res.output - ref).max() <= 1e-10
    pred = alg.predicted_io(res.shape, M, tiling=res.tiling, causal=bool(causal))
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
    cnt = attnio.run(name, shape=res.shape, M=M, mode="count", causal=causal, window=window,
                     tiling=res.tiling, bulk=False)
    assert (cnt.io.reads, cnt.io.writes, cnt.io.peak) == (res.io.reads, res.io.writes, res.io.peak)
    assert res.io.peak <= M


@pytest.mark.parametrize("Hkv", [1, 2, 4])
@pytest.mark.parametrize("causal,window", MASKS)
def test_backward_gradients_equal_reference(Hkv, causal, window):
    Q, K, V, dO = qkv4(2, 4, Hkv, 21, 30, 8, seed=Hkv)
    res = attnio.run("flash2", Q, K, V, M=3000, causal=causal, window=window, backward=True,
                     grad_output=dO)
    ref = attnio.reference.attention_backward(Q, K, V, dO, causal=causal, window=window)
    for name, g in zip(("dQ", "dK", "dV"), ref):
        assert res.grads[name].shape == g.shape
        assert np.abs(res.grads[name] - g).max() <= 1e-10, name
    bwd = attnio.algorithms.get_backward(res.backward_algorithm)
    pred = bwd.cost(res.shape, res.backward_tiling).io
    assert (res.backward_io.reads, res.backward_io.writes) == (pred.reads, pred.writes)
    assert res.backward_io.peak <= 3000
    fwd = attnio.algorithms.get("flash2").cost(res.shape, res.tiling, lse=True).io
    assert (res.io.reads, res.io.writes) == (fwd.reads, fwd.writes)
    cnt = attnio.run("flash2", shape=res.shape, M=3000, mode="count", causal=causal,
                     window=window, tiling=res.tiling,
                     backward=BackwardPass(tiling=res.backward_tiling))
    assert cnt.backward_io.total == res.backward_io.total and cnt.io.total == res.io.total


def test_reference_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    Q, K, V, dO = (rng.standard_normal((5, 3)) for _ in range(4))
    dQ, dK, dV = attnio.reference.attention_backward(Q, K, V, dO, causal=True)
    f = lambda Q, K, V: float(np.sum(attnio.reference.attention(Q, K, V, causal=True) * dO))  # noqa: E731
    h = 1e-6
    for X, G, i in ((Q, dQ, 0), (K, dK, 1), (V, dV, 2)):
        num = np.zeros_like(X)
        for idx in np.ndindex(X.shape):
            args = [Q.copy(), K.copy(), V.copy()]
            args[i][idx] += h
            up = f(*args)
            args[i][idx] -= 2 * h
            num[idx] = (up - f(*args)) / (2 * h)
        assert np.abs(num - G).max() < 1e-7


#: ragged Nq < Nkv, and Nq > Nkv with rows that see no key; the largest (1023 x 1024, 2.4 s of
#: CPU for both alignments: the same multi-tile path as 128 x 217) with ``-m slow``
ODD = [(113, 203), (128, 217), pytest.param(1023, 1024, marks=pytest.mark.slow), (239, 1),
       (799, 3)]


@pytest.mark.filterwarnings("ignore:Lower right causal bias")
@pytest.mark.parametrize("Nq,Nkv", ODD)
@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
def test_against_pytorch_sdpa(Nq, Nkv, align):
    torch = need("torch")
    from torch.nn.attention.bias import causal_lower_right

    d, Hq, Hkv = 8, 4, 2
    Q, K, V, _ = qkv4(2, Hq, Hkv, Nq, Nkv, d, seed=Nq)
    res = attnio.run("flash2", Q, K, V, M=max(8192, 40 * d), causal=align)
    q, k, v = (torch.from_numpy(x) for x in (Q, K, V))
    if align == "top_left":
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                               enable_gqa=True)
    else:
        ref = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_lower_right(Nq, Nkv), enable_gqa=True)
    ref = ref.numpy()
    # a row that sees no key (bottom-right, Nq > Nkv): flash-attn and attnio give 0; PyTorch
    # warns that SDPA may give NaN there, so compare the rows where it is finite
    finite = np.isfinite(ref).all(axis=-1)
    assert np.abs(res.output[finite] - ref[finite]).max() <= 1e-10
    blind = np.zeros(Nq, dtype=bool)
    if align == "bottom_right" and Nq > Nkv:
        blind[: Nq - Nkv] = True
    assert np.all(res.output[:, :, blind] == 0.0)
    assert finite[:, :, ~blind].all()


def test_gqa_shared_tiles_read_kv_group_times_less():
    shape = Shape(512, 512, 32, batch=2, heads=8, kv_heads=2)
    for causal in (False, True):
        shared = attnio.run("flash2", shape=shape, M=20000, mode="count", causal=causal,
                            tiling={"Br": 32, "Bc": 16, "group": 4})
        naive = attnio.run("flash2", shape=shape, M=20000, mode="count", causal=causal,
                           tiling={"Br": 32, "Bc": 16, "group": 1})
        for arr in ("K", "V"):
            assert naive.io.per_array[arr].reads == 4 * shared.io.per_array[arr].reads
        assert naive.io.per_array["Q"].reads == shared.io.per_array["Q"].reads
        assert naive.io.writes == shared.io.writes


def test_default_tiling_credits_gqa_sharing():
    shape = Shape(2048, 2048, 64, heads=8, kv_heads=1)
    res = attnio.run("flash2", shape=shape, M=65536, mode="count")
    naive = attnio.algorithms.get("flash2").default_tiling(Shape(2048, 2048, 64, heads=8), 65536)
    assert res.io.total <= attnio.algorithms.get("flash2").cost(shape, naive).io.total


@pytest.mark.parametrize("Nkv", [1, 1000, 65536, 2**20])
@pytest.mark.parametrize("d", [16, 64, 128])
def test_decoding_one_token_costs_reading_the_cache_once(Nkv, d):
    floor = d + 2 * Nkv * d + d  # read q, K, V once, write o once
    alg = attnio.algorithms.get("flash2")
    for M in (alg.min_M(Shape(1, Nkv, d)), 4 * d + 64, 64 * d, 1 << 17):
        io = attnio.run("flash2", shape=(1, Nkv, d), M=M, mode="count").io
        assert floor <= io.total <= 1.05 * floor
        io = attnio.run("flash2", shape=(1, Nkv, d), M=M, mode="count", causal=True).io
        assert floor <= io.total <= 1.05 * floor


def test_decoding_few_tokens_within_5_percent_when_a_query_block_fits():
    for Nq in range(1, 17):
        d, Nkv = 64, 2**16
        M = 2 * Nq * d + 2 * d + Nq + 3 * Nq + 64 * d
        io = attnio.run("flash2", shape=(Nq, Nkv, d), M=M, mode="count", causal=True).io
        assert io.total <= 1.05 * (2 * Nq * d + 2 * Nkv * d)


@pytest.mark.parametrize("Nq,Nkv,d", [(1, 4096, 64), (4, 100000, 64), (16, 2**20, 128)])
@pytest.mark.parametrize("splits", [1, 2, 8, 16])
def test_split_kv_extra_io_is_exactly_its_partials(Nq, Nkv, d, splits):
    tile = {"Br": Nq, "Bc": 32}
    M = 1 << 17
    f2 = attnio.run("flash2", shape=(Nq, Nkv, d), M=M, mode="count", tiling=tile).io
    fd = attnio.run("flash_decoding", shape=(Nq, Nkv, d), M=M, mode="count",
                    tiling=dict(tile, splits=splits)).io
    if splits == 1:
        assert (fd.reads, fd.writes) == (f2.reads, f2.writes)
    else:
        extra_q = (splits - 1) * Nq * d
        partials = 2 * splits * Nq * (d + 1)
        # K/V words can differ by the Bc blocks cut at split boundaries
        assert fd.total - f2.total - extra_q - partials == fd.per_array["K"].reads * 2 - \
            f2.per_array["K"].reads * 2
        assert fd.total - f2.total <= extra_q + partials + 2 * splits * 32 * d
        assert (fd.total - f2.total) / f2.total < 0.01  # negligible while s·Nq << Nkv


def _slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def _backward_total(N, d, M):
    return attnio.run("flash2", shape=(N, d), M=M, mode="count",
                      backward=BackwardPass("flash2_backward")).backward_io.total


def test_backward_scaling_follows_N2d2_over_M():
    d, N = 64, 16384
    Ms = [d * d * k for k in (1, 2, 4, 8, 16)]
    floor = 5 * N * d + N  # read Q, K, V, O, dO once; write dQ, dK, dV once (+ L)
    tots = [_backward_total(N, d, M) for M in Ms]
    assert all(floor < 0.1 * t for t in tots)
    assert abs(_slope(Ms, tots) + 1) <= 0.05
    Ns = [4096, 8192, 16384, 32768]
    tots = [_backward_total(n, d, 8 * d * d) for n in Ns]
    assert all(5 * n * d + n < 0.1 * t for n, t in zip(Ns, tots))
    assert abs(_slope(Ns, tots) - 2) <= 0.05


@pytest.mark.parametrize("N,d,M,causal", list(itertools.product((1, 7, 100, 513), (1, 8, 64),
                                                                 (1000, 20000), (False, True))))
def test_backward_never_below_its_trivial_bound(N, d, M, causal):
    if M < 7 * d + 4:
        return
    io = attnio.run("flash2", shape=(N, d), M=M, mode="count", causal=causal,
                    backward=True).backward_io
    # inputs Q, K, V, O, dO (N·d each) and L (N) read; dQ, dK, dV written
    assert io.reads >= 5 * N * d + N and io.writes >= 3 * N * d


def test_bad_inputs_name_the_parameter():
    Q, K, V, _ = qkv4(1, 3, 2, 4, 4, 8)
    with pytest.raises(ParameterError, match="heads must be a multiple of kv_heads"):
        attnio.run("flash2", Q, K, V, M=1000)
    with pytest.raises(ParameterError, match="heads must be a multiple of kv_heads"):
        Shape(4, 4, 8, heads=3, kv_heads=2)
    Q, K, V, _ = qkv4(1, 2, 2, 4, 4, 8)
    with pytest.raises(ParameterError, match="same head dimension d"):
        attnio.run("flash2", Q, K[..., :4], V[..., :4], M=1000)
    with pytest.raises(ParameterError, match="window must be an integer >= 1"):
        attnio.run("flash2", Q, K, V, M=1000, causal=True, window=0)
    with pytest.raises(ParameterError, match="window needs a causal mask"):
        attnio.run("flash2", Q, K, V, M=1000, window=3)
    with pytest.raises(ParameterError, match="causal must be"):
        attnio.run("flash2", Q, K, V, M=1000, causal="diagonal")
    with pytest.raises(ParameterError, match="no backward pass"):
        attnio.run("flash1", shape=(8, 8), M=1000, mode="count", backward=True)
    with pytest.raises(ParameterError, match="grad_output"):
        attnio.run("flash2", Q, K, V, M=1000, backward=True)
    with pytest.raises(ParameterError, match="tiling.group must divide"):
        attnio.run("flash2", shape=Shape(8, 8, 8, heads=4, kv_heads=2), M=4000, mode="count",
                   tiling={"Br": 4, "Bc": 4, "group": 4})


def test_cli_heads_window_backward(capsys):
    import json

    from attnio.cli import main

    assert main(["run", "flash2", "--N", "40", "--d", "8", "--M", "2000", "--batch", "2",
                 "--heads", "4", "--kv-heads", "1", "--causal", "top_left", "--window", "7",
                 "--backward", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["max_abs_err"] < 1e-12 and obj["backward"]["max_abs_grad_err"] < 1e-12
    assert obj["kv_heads"] == 1 and obj["causal_align"] == "top_left"
    assert main(["run", "flash2", "--heads", "3", "--kv-heads", "2"]) == 2
    assert "heads must be a multiple" in capsys.readouterr().err


def _explicit(shape: Shape, M: int, causal, window):
    from attnio import bounds

    return [b for b in bounds.applicable(
        N=shape.Nq, d=shape.d, M=M, Nkv=shape.Nkv, causal=causal, heads=shape.n_heads,
        kv_heads=shape.batch * shape.kv_heads, window=window) if b.explicit]


@pytest.mark.parametrize("Nq,Nkv", [(64, 64), (48, 200), (200, 48), (1, 500)])
@pytest.mark.parametrize("causal,window", MASKS + [("top_left", 9)])
@pytest.mark.parametrize("heads,kv_heads", [(1, 1), (4, 1), (4, 2)])
def test_every_count_respects_every_explicit_bound_with_masks_and_gqa(Nq, Nkv, causal, window,
                                                                      heads, kv_heads):
    shape = Shape(Nq, Nkv, 16, batch=2, heads=heads, kv_heads=kv_heads)
    for name in ALGS:
        alg = attnio.algorithms.get(name)
        if mapper.can_run(alg, shape.with_mask(causal, window)) == NO_WINDOW:
            continue
        for M in (alg.min_M(shape), 300, 5000, 100000):
            if mapper.can_run(alg, shape, M) is not None:
                continue
            io = attnio.run(name, shape=shape, M=M, mode="count", causal=causal,
                            window=window).io
            for b in _explicit(shape, M, causal, window):
                assert io.total >= b.value, (name, M, b.name, io.total, b.value)


@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("backward", [False, True])
def test_planner_covers_heads_masks_and_backward(causal, window, backward):
    p = attnio.plan(300, 16, 4000, Nkv=500, batch=2, heads=4, kv_heads=2, causal=causal,
                    window=window, backward=backward)
    res = p.run()  # the chosen algorithm and tiling (and backward schedule) on the planned shape
    assert res.io.total == p.chosen.predicted.total
    if backward:
        assert res.backward_io.total == p.backward.predicted.total
    for alg in attnio.algorithms.all_algorithms():
        if not alg.exact or mapper.can_run(alg, p.shape, p.memory.M, backward=backward):
            continue
        own = attnio.run(alg.name, shape=p.shape, M=p.memory.M, mode="count", causal=causal,
                         window=window, backward=backward)
        own_total = own.io.total + (own.backward_io.total if backward else 0)
        mine = p.chosen.predicted.total + (p.backward.predicted.total if backward else 0)
        assert mine <= own_total


def test_mask_carried_by_the_shape_is_honoured():
    w = attnio.run("flash2", shape=Shape(64, 64, 4, causal=True, window=2), M=500, mode="count")
    assert w.io.total == attnio.run("flash2", shape=(64, 4), M=500, mode="count", causal=True,
                                    window=2).io.total
    t = attnio.run("flash2", shape=Shape(40, 64, 4, causal_align="top_left"), M=500,
                   mode="count", causal=True)
    assert t.shape.causal_align == "top_left"
    with pytest.raises(ParameterError, match="conflicts with the shape's window"):
        attnio.run("flash2", shape=Shape(64, 64, 4, causal=True, window=2), M=500, mode="count",
                   window=3)
    with pytest.raises(ParameterError, match="conflicts with the shape's causal mask"):
        attnio.run("flash2", shape=Shape(64, 64, 4, causal=True), M=500, mode="count",
                   causal=False)
    with pytest.raises(ParameterError, match="does not support window"):
        attnio.run("square_tiling", shape=Shape(64, 64, 4, causal=True, window=2), M=500,
                   mode="count")


def test_approx_measured_radius_pass_is_counted_and_4d_guarantee_holds():
    rng = np.random.default_rng(9)
    Q = rng.uniform(-0.5, 0.5, (2, 2, 64, 4))
    K = rng.uniform(-0.5, 0.5, (2, 1, 64, 4))
    V = rng.standard_normal((2, 1, 64, 4))
    res = attnio.run("approx_poly", Q, K, V, M=4000, tiling={"eps": 1e-3})
    assert res.tiling.radius_pass  # no bound given: R was measured, the pass is paid
    alg = attnio.algorithms.get("approx_poly")
    pred = alg.predicted_io(res.shape, 4000, tiling=res.tiling)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
    bounded = attnio.run("approx_poly", Q, K, V, M=4000,
                         tiling={"eps": 1e-3, "radius": res.tiling.radius})
    assert not bounded.tiling.radius_pass
    # each head of the per-head schedule measures its own Q and K rows: (Nq + Nkv)·d a head
    assert res.io.reads - bounded.io.reads == res.shape.n_heads * (64 + 64) * 4
    err = np.abs(res.output - attnio.reference.attention(Q, K, V)).max()
    assert 0 < err <= res.tiling.error_bound_for(V)


def test_split_kv_bound_is_below_every_split_count_and_the_search_the_plain_loop():
    """flash_decoding's bound under a mask (one split, Bc = 1, the same Br; plus the partials'
    least words with more splits) is at most the count of every (Br, Bc, splits), causal and
    windowed, and its search by it is the plain loop's: choice, count, steps and tried."""
    import random

    from attnio.algorithms.flash_decoding import SplitKVTiling

    alg = attnio.algorithms.get("flash_decoding")
    rng = random.Random(5)
    for _ in range(120):
        Nq = rng.choice([1, rng.randint(1, 40), rng.randint(1, 3000)])
        Nkv = rng.choice([Nq, rng.randint(1, 5000)])
        d = rng.choice([1, 4, 32, 64])
        causal = rng.choice([True, "top_left"])
        window = rng.choice([None, rng.randint(1, 400)])
        shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, window=window, heads=2)
        lower = alg._lower_total(shape)
        assert lower is not None
        for _ in range(6):
            t = SplitKVTiling(rng.randint(1, Nq + 3), rng.randint(1, 300),
                              rng.randint(1, min(Nkv, 20)))
            assert lower(t) <= alg.cost(shape, t).io.total, (shape, t)
        M = rng.choice([rng.randint(4 * d + 8, 3000), rng.randint(3000, 10**6)])
        if mapper.can_run(alg, shape, M) is not None:
            continue
        tilings = list(alg.candidate_tilings(shape, M))
        for t in tilings:
            assert lower(t) <= alg.cost(shape, t).io.total
        assert mapper.search(alg, shape, M) == mapper._least(alg, shape, M, tilings)
    assert alg._lower_total(Shape.make(64, 8)) is None
