"""Sweeps over real workloads (batch x heads, grouped-query attention, both causal alignments,
sliding windows) and the opt-in verify columns (LRU/OPT replays of each schedule's trace)."""

from __future__ import annotations

import pytest

import attnio
from attnio.bounds import applicable
from attnio.cachesim.caches import replay
from attnio.cachesim.tracing import trace
from attnio.cli import main as cli_main
from attnio.core.errors import ParameterError
from attnio.core.workload import Shape
from attnio.experiments.store import ResultsStore
from attnio.experiments.sweep import (
    Config,
    Grid,
    expand,
    parse_causal,
    parse_window,
    run_config,
    run_sweep,
)


def test_parse_causal_alignments_and_windows():
    assert parse_causal("both") == (False, True)
    assert parse_causal("all") == (False, True, "top_left")
    assert parse_causal("none,top_left") == (False, "top_left")
    assert parse_causal("bottom_right") == (True,)
    assert parse_window("none,16:64:x2") == (None, 16, 32, 64)
    assert parse_window(8) == (8,)
    with pytest.raises(ParameterError, match="window"):
        parse_window("0")


def test_default_workload_keeps_single_head_hashes():
    a = Config("flash2", Shape(64, 64, 8, causal=True), 256)
    assert a.key() == {"algorithm": "flash2", "Nq": 64, "Nkv": 64, "d": 8, "M": 256,
                       "causal": True, "mode": "count"}
    assert a.hash() == Config("flash2", Shape(64, 64, 8, causal="bottom_right", heads=1,
                                              kv_heads=1), 256).hash()
    assert a.hash() == Config("flash2", Shape(64, 64, 8, causal=True), 256, verify=True).hash()
    others = [Config("flash2", Shape(64, 64, 8, causal="top_left"), 256),
              Config("flash2", Shape(64, 64, 8, causal=True, heads=2), 256),
              Config("flash2", Shape(64, 64, 8, causal=True, heads=2, kv_heads=1), 256),
              Config("flash2", Shape(64, 64, 8, causal=True, batch=2), 256),
              Config("flash2", Shape(64, 64, 8, causal=True, window=16), 256)]
    assert len({a.hash()} | {o.hash() for o in others}) == 6


def test_expand_generates_meaningful_workloads_only():
    """A window pairs with the causal masks only, kv_heads with the heads it divides: no
    "needs a causal mask" or "multiple of kv_heads" rows; the window support of an algorithm
    is still a skip reason."""
    g = Grid(N=(64,), d=(8,), M=(1024,), algorithms=("flash2", "square_tiling"),
             causal=(False, True), heads=(4, 6), kv_heads=(2, 3), window=(None, 16))
    exp = expand(g)
    assert {r for _, r in exp.skipped} == {
        "square_tiling does not support a sliding window (supports_window is False)"}
    got = {(c.algorithm, c.shape.heads, c.shape.kv_heads, c.shape.window, c.shape.causal)
           for c in exp.configs}
    pairs = [(4, 2), (6, 2), (6, 3)]
    masks = [(None, False), (None, True), (16, True)]
    assert got == {("flash2", h, k, w, c) for h, k in pairs for w, c in masks} | {
        ("square_tiling", h, k, None, c) for h, k in pairs for c in (False, True)}
    assert len(exp) == 2 * 3 * 3


@pytest.mark.parametrize("fields, name", [
    ({"heads": (4,), "kv_heads": (1, 3)}, "kv_heads"),
    ({"window": (None, 16)}, "window"),
    ({"window": (16,), "causal": (False,)}, "window"),
    ({"N": (2**51,)}, "N"),
    ({"M": (2**61,)}, "M"),
])
def test_a_value_that_pairs_with_nothing_or_is_out_of_range_is_refused(fields, name):
    g = Grid(**{"N": (64,), "d": (8,), "M": (1024,), "algorithms": ("flash2",), **fields})
    with pytest.raises(ParameterError, match=name) as e:
        expand(g)
    assert e.value.param == name


@pytest.mark.parametrize("causal, window", [(False, None), (True, None), ("top_left", None),
                                            (True, 24), ("top_left", 24)])
def test_workload_row_equals_the_run_api_and_its_bounds(causal, window):
    shape = Shape(40, 72, 8, causal=causal, batch=2, heads=4, kv_heads=2, window=window)
    cfg = Config("flash2", shape, 512)
    row = run_config(cfg)
    unmasked = attnio.Shape(40, 72, 8, batch=2, heads=4, kv_heads=2)
    res = attnio.run("flash2", shape=unmasked, M=512, mode="count", causal=causal, window=window)
    assert row["status"] == "ok", row["reason"]
    assert (row["reads"], row["writes"]) == (res.io.reads, res.io.writes)
    assert (row["predicted_reads"], row["predicted_writes"]) == (row["reads"], row["writes"])
    assert (row["batch"], row["heads"], row["kv_heads"], row["window"]) == (2, 4, 2, window)
    assert row["causal"] == (causal is not False)
    assert row["causal_align"] == {False: None, True: "bottom_right", "top_left": "top_left"}[causal]
    want = applicable(N=40, d=8, M=512, Nkv=72, causal=causal, heads=8, kv_heads=4, window=window)
    assert {k: v["value"] for k, v in row["bounds"].items()} == {b.name: b.value for b in want}
    assert row["total"] >= row["bound"]
    # compute mode: the batched GQA output against the float64 reference
    comp = run_config(Config("flash2", shape, 512, mode="compute", seed=1))
    assert comp["status"] == "ok" and comp["max_err"] < 1e-12
    assert (comp["reads"], comp["writes"]) == (row["reads"], row["writes"])


def test_cli_workload_flags_and_verify(tmp_path):
    db = tmp_path / "w.sqlite"
    argv = ["sweep", "--db", str(db), "--N", "32", "--d", "4", "--M", "128", "--algo",
            "flash2,square_tiling", "--heads", "2", "--kv-heads", "1,2", "--window", "none,8",
            "--causal", "none,top_left", "--quiet", "--jobs", "1"]
    assert cli_main(argv) == 0
    with ResultsStore(db, readonly=True) as st:
        rows = st.rows(decode=True)
    ok = [r for r in rows if r["status"] == "ok"]
    skipped = [r for r in rows if r["status"] == "skipped"]
    # flash2: 2 kv_heads x (none + top_left + top_left/window 8); square_tiling: 2 x 2
    assert len(ok) == 6 + 4 and all(r["lru_M"] is None for r in ok)
    # no window without a causal mask is generated: the only skip is an algorithm's own limit
    assert {r["reason"] for r in skipped} == {
        "square_tiling does not support a sliding window (supports_window is False)"}
    assert len(skipped) == 2 and all(r["causal"] or r["window"] is None for r in rows)
    # rerun with --verify fills in the replay columns of the same rows (no duplicates)
    assert cli_main([*argv, "--verify"]) == 0
    with ResultsStore(db, readonly=True) as st:
        again = st.rows(decode=True)
    assert len(again) == len(rows)
    assert all(r["opt_M"] is not None for r in again if r["status"] == "ok")
    assert cli_main([*argv, "--verify"]) == 0  # nothing left to do: the rows stay as they are
    with ResultsStore(db, readonly=True) as st:
        assert st.rows(decode=True) == again


@pytest.mark.parametrize("algorithm, causal", [("flash2", False), ("standard", True),
                                               ("square_tiling", False), ("flash1", True)])
def test_verify_columns_equal_direct_replays(algorithm, causal):
    row = run_config(Config(algorithm, Shape(48, 48, 8, causal=causal), 512, verify=True))
    assert row["status"] == "ok" and row["verify_reason"] is None
    tr = trace(algorithm, shape=Shape(48, 48, 8, causal=causal), M=512)
    assert row["trace_events"] == len(tr)
    for cap, tag in ((512, "M"), (1024, "2M")):
        for p in ("lru", "opt"):
            assert row[f"{p}_{tag}"] == replay(tr, cap, p).total
    assert row["opt_M"] <= row["total"]  # the explicit schedule is one replacement strategy
    assert row["opt_2M"] <= row["opt_M"] and row["opt_M"] <= row["lru_M"]
    assert row["lru_2M"] <= 2 * row["opt_M"] + 512  # Sleator-Tarjan


def test_verify_limits_are_recorded_as_reasons(monkeypatch):
    import attnio.experiments.row as row_module

    monkeypatch.setattr(row_module, "VERIFY_MAX_EVENTS", 1000)
    big = run_config(Config("flash2", Shape(64, 64, 8), 512, verify=True))
    assert big["status"] == "ok" and big["lru_M"] is None
    assert "VERIFY_MAX_EVENTS=1,000" in big["verify_reason"]
    comp = run_config(Config("flash2", Shape(16, 16, 4), 256, mode="compute", verify=True))
    assert comp["opt_M"] is None and "count mode only" in comp["verify_reason"]
    approx = run_config(Config("approx_poly", Shape(16, 16, 4), 20000, eps=1e-2, entry_bound=1.0,
                               verify=True))
    assert approx["opt_M"] is None and "exact algorithms only" in approx["verify_reason"]


def test_run_sweep_with_verify_grid_field(tmp_path):
    g = Grid(N=(32,), d=(4,), M=(64, 128), algorithms=("flash2",), verify=True)
    s = run_sweep(g, tmp_path / "v.sqlite", jobs=1)
    assert s.errors == 0
    with ResultsStore(tmp_path / "v.sqlite", readonly=True) as st:
        rows = st.rows()
    assert len(rows) == 2 and all(r["opt_M"] <= r["total"] for r in rows)
