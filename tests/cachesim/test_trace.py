"""Element traces (attnio.trace): the tracer hook changes no count, the alias model on a hand-made
schedule, streaming in chunks, and the npz / din formats."""

from __future__ import annotations

import numpy as np
import pytest

import attnio
from attnio.algorithms import mapper
from attnio.cachesim.tracing import Event, _build, _Recorder, load
from attnio.core.errors import ParameterError
from attnio.core.memory import TwoLevelMemory
from attnio.core.workload import Shape
from conftest import exact_attention_names, random_qkv

CONFIGS = [(32, 8, 300, False), (24, 4, 700, True)]


def _fits(name, N, d, M, causal):
    return mapper.can_run(attnio.algorithms.get(name), Shape(N, N, d, causal=causal), M) is None


@pytest.mark.parametrize("name", exact_attention_names())
def test_tracing_changes_no_count_and_no_output(name):
    from attnio.runner import place_inputs as _place

    alg = attnio.algorithms.get(name)
    for N, d, M, causal in CONFIGS:
        if not _fits(name, N, d, M, causal):
            continue
        plain = attnio.run(name, shape=(N, d), M=M, mode="count", causal=causal, bulk=False)
        shp = Shape(N, N, d, causal=causal)
        t = alg.coerce_tiling(shp, M, None)
        Q, K, V = random_qkv(N, N, d, seed=3)
        mem = TwoLevelMemory(M, mode="compute", tracer=_Recorder())
        h = _place(mem, shp, (Q, K, V))
        alg.run_schedule(mem, h, shape=shp, tiling=t, scale=1.0 / np.sqrt(d))
        st = mem.stats()
        assert (st.reads, st.writes, st.peak) == (plain.io.reads, plain.io.writes, plain.io.peak)
        ref = attnio.run(name, Q, K, V, M=M, causal=causal).output
        assert np.array_equal(mem.contents(h["O"]), ref)


@pytest.mark.parametrize("name", exact_attention_names())
def test_trace_events_stay_inside_their_arrays_and_touch_every_input_and_output_word(name):
    for N, d, M, causal in CONFIGS:
        if not _fits(name, N, d, M, causal):
            continue
        t = attnio.trace(name, M=M, shape=attnio.Shape.make(N, d, causal=causal))
        addr, kind = t.to_arrays()
        assert len(addr) == len(t) > 0
        assert set(np.unique(kind).tolist()) <= {0, 1}
        per = t.counts()
        assert sum(r + w for r, w in per.values()) == len(t)
        for nm in ("Q", "K", "V"):  # inputs are only read, and every word is read
            assert per[nm][1] == 0
            seen = set()
            for c in t.chunks():
                sel = c.array_id == list(t.arrays).index(nm)
                seen.update(c.index[sel].tolist())
            if not causal or nm == "Q":
                assert seen == set(range(t.arrays[nm].size)), nm
        assert per["O"][1] >= t.arrays["O"].size  # every output word written
        assert t.arrays["O"].live_out and not any(
            a.live_out for a in t.arrays.values() if a.role == "scratch")
        ends = [a.base + a.size for a in t.arrays.values()]
        assert addr.max() < max(ends)


def test_alias_model_on_a_hand_made_schedule():
    rec = _Recorder()
    mem = TwoLevelMemory(16, mode="count", tracer=rec)
    X = mem.slow("X", (2, 2))
    Y = mem.slow("Y", (2, 2))
    a = mem.load(X)                      # alias of X[0..3]: no event
    acc = mem.alloc((2,), 0.0, label="acc")  # fill: writes of ~acc (dies with free)
    mem.compute(lambda x, y: None, acc, a, writes=1)  # reads acc, a (X); writes acc
    mem.compute(lambda x: None, a, writes=1)  # a's epoch ends with a store to Y: reads X, writes Y
    mem.store(a, Y)                      # already in Y's words: no event
    mem.free(a, acc)
    t = _build(rec, {})
    ev = list(t)
    assert ev[:2] == [Event("~acc", 0, "write"), Event("~acc", 1, "write")]
    assert ev[2:4] == [Event("~acc", 0, "read"), Event("~acc", 1, "read")]
    assert [e.array for e in ev[4:8]] == ["X"] * 4 and {e.kind for e in ev[4:8]} == {"read"}
    assert [e.kind for e in ev[8:10]] == ["write"] * 2
    assert [(e.array, e.index, e.kind) for e in ev[10:14]] == [("X", i, "read") for i in range(4)]
    assert [(e.array, e.index, e.kind) for e in ev[14:18]] == [("Y", i, "write") for i in range(4)]
    assert len(ev) == len(t) == 18
    assert t.arrays["Y"].base % 64 == 0 and t.arrays["~acc"].size == 2


def test_unchanged_tile_stored_elsewhere_is_a_copy_and_unfilled_alloc_reads_nothing():
    rec = _Recorder()
    mem = TwoLevelMemory(16, mode="count", tracer=rec)
    X = mem.slow("X", (4,))
    Y = mem.slow("Y", (4,))
    a = mem.load(X, slice(1, 3))
    mem.store(a, Y, slice(0, 2))
    u = mem.alloc((2,), None, label="u")
    mem.compute(lambda x: None, u, writes=1)  # uninitialised: no reads, two writes
    mem.free(a, u)
    ev = [(e.array, e.index, e.kind) for e in _build(rec, {})]
    assert ev == [("X", 1, "read"), ("X", 2, "read"), ("Y", 0, "write"), ("Y", 1, "write"),
                  ("~u", 0, "write"), ("~u", 1, "write")]


def test_chunks_of_any_size_concatenate_to_the_same_trace():
    t = attnio.trace("flash2", 24, 4, 200)
    a, k = t.to_arrays()
    for size in (1, 7, 1000, len(t) + 5):
        parts = list(t.chunks(size))
        assert all(len(p) <= size for p in parts)
        assert np.array_equal(np.concatenate([p.addr for p in parts]), a)
        assert np.array_equal(np.concatenate([p.kind for p in parts]), k)


def test_npz_round_trip_and_din_format(tmp_path):
    t = attnio.trace("standard", M=64, shape=attnio.Shape.make(16, 4, causal=True))
    t.save(tmp_path / "t.npz")
    back = load(tmp_path / "t.npz")
    assert len(back) == len(t) and back.arrays == t.arrays and back.meta == t.meta
    assert attnio.replay(back, 64, "opt").total == attnio.replay(t, 64, "opt").total
    n = t.write_din(tmp_path / "t.din", word_bytes=8)
    lines = (tmp_path / "t.din").read_text().split("\n")[:-1]
    a, k = t.to_arrays()
    assert n == len(lines) == len(t)
    assert lines[:50] == [f"{kk} {aa * 8:x}" for kk, aa in zip(k[:50], a[:50])]


def test_cli_trace_writes_both_formats(tmp_path, capsys):
    from attnio.cli import main

    assert main(["trace", "flash2", "--N", "16", "--d", "4", "--M", "200",
                 "--out", str(tmp_path / "x.npz"), "--din", str(tmp_path / "x.din")]) == 0
    assert (tmp_path / "x.npz").exists() and (tmp_path / "x.din").exists()
    assert "events" in capsys.readouterr().out
    assert main(["trace", "flash2", "--N", "16", "--d", "4", "--M", "200", "--out", "x.bin"]) == 2


def test_trace_parameters_are_checked():
    with pytest.raises(ParameterError, match="M"):
        attnio.trace("flash2", 16, 4, None)
    with pytest.raises(ParameterError, match="N"):
        attnio.trace("flash2", 0, 4, 100)
    with pytest.raises(ParameterError, match="M=10"):
        attnio.trace("flash2", 16, 4, 10)
