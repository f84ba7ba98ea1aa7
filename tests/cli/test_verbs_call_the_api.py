"""Each verb's computation is one function of attnio's public API (docs/api.md, "The command
line uses it too"): the function gives what the verb prints, and refuses in the API's words what
the verb refuses in its flags."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnio import Shape, blocks, bounds, cachesim, experiments, hardware, parallel, planner
from attnio.cli import main
from attnio.core import Limits, ParameterError, ResourceError


def _json(capsys, argv: list[str]) -> object:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------------- attnio bound
def test_bound_prints_bounds_listing(capsys):
    shape = Shape.make(1024, 64)
    ls = bounds.listing(shape, 4096, backward=True, eps=0.01, entry_bound=1.0)
    assert ls.best is bounds.best(ls.bounds) and ls.regime == bounds.regime_of(64, 4096)
    assert [b.name for b in ls.approximate] == ["approx_w_stationary", "alman_song_degree",
                                                "seth_entry_threshold"]
    assert ls.backward and ls.backward_best is bounds.best(ls.backward)
    out = _json(capsys, ["bound", "--N", "1024", "--d", "64", "--M", "4096", "--backward",
                         "--eps", "0.01", "--entry-bound", "1", "--json"])
    assert out["best"] == ls.best.name and out["best_value"] == ls.best.value
    assert [b["value"] for b in out["bounds"]] == [b.value for b in ls.bounds]
    assert [b["value"] for b in out["backward_bounds"]] == [b.value for b in ls.backward]
    assert [b["value"] for b in out["approximate_bounds"]] == [b.value for b in ls.approximate]


def test_bounds_listing_refuses_in_api_words():
    shape = Shape.make(256, 16)
    with pytest.raises(ParameterError, match=r"^entry_bound goes with eps") as e:
        bounds.listing(shape, 1024, entry_bound=1.0)
    assert e.value.param == "entry_bound"
    with pytest.raises(ParameterError, match=r"^eps needs entry_bound B"):
        bounds.listing(shape, 1024, eps=0.01)
    with pytest.raises(ParameterError, match=r"no causal, window, heads, batch"):
        bounds.listing(Shape.make(256, 16, causal=True), 1024, eps=0.01, entry_bound=1.0)
    assert bounds.listing(shape, 1024).approximate == ()


# ---------------------------------------------------------------------- attnio cp bound / run
@pytest.mark.parametrize("scheme,backward,memory", [(None, False, None), ("ring", False, None),
                                                    ("zigzag", True, 200_000)])
def test_cp_bound_prints_bounds_of(capsys, scheme, backward, memory):
    shape = Shape.make(4096, 64)
    r = parallel.bounds_of(shape, 8, memory=memory, backward=backward, scheme=scheme)
    b = parallel.bound(shape, 8, memory=memory, backward=backward)
    assert r.bound.value == b.value and r.busiest == parallel.busiest_bound(shape, 8,
                                                                            backward=backward)
    if scheme is not None:
        s = parallel.plan(shape, 8, scheme)
        words = (parallel.cost_backward(scheme, shape, 8, s.params).words_per_device
                 if backward else s.words_per_device)
        assert r.words_per_device == words and r.ratio == words / b.value
    argv = ["cp", "bound", "--N", "4096", "--d", "64", "--P", "8", "--json"]
    argv += (["--scheme", scheme] if scheme else []) + (["--backward"] if backward else [])
    argv += ["--memory", str(memory)] if memory else []
    assert _json(capsys, argv) == json.loads(json.dumps(r.to_dict()))


def test_bounds_of_refuses_an_unknown_scheme_first():
    with pytest.raises(ParameterError, match="unknown scheme"):
        parallel.bounds_of(Shape.make(64, 8), 4, scheme="nope", memory=1)


# ---------------------------------------------------------------------- attnio gpu
def test_gpu_kernels_prints_kernel_tables(capsys):
    t = hardware.kernel_tables(hardware.get("a100"))
    assert t.device == "a100-80gb" and t.dtype == "bf16"
    assert {r["kernel"] for r in t.rows} == {"fa2"}     # no FA3 off Hopper
    assert {r["kernel"] for r in hardware.kernel_tables(hardware.get("h100")).rows} == {"fa3",
                                                                                         "fa2"}
    assert _json(capsys, ["gpu", "kernels", "--device", "a100", "--json"]) == list(t.rows)
    with pytest.raises(ParameterError, match="no flash-attn fp8 kernel runs on a100"):
        hardware.kernel_tables(hardware.get("a100"), dtype="fp8")


def test_tune_report_refuses_fa3_off_hopper():
    with pytest.raises(ParameterError, match=r"^algorithm fa3 needs Hopper") as e:
        hardware.tune_report("a100", Shape.make(256, 64), algorithm="fa3")
    assert e.value.param == "algorithm"


def test_fit_calibration_into_checks_the_output_before_the_fit(tmp_path):
    rows = tmp_path / "m.csv"
    rows.write_text("device,kernel,pass,dtype,d,causal,N,batch,heads,tflops\n")
    with pytest.raises(ParameterError):   # the output is an input: refused, nothing fitted
        hardware.fit_calibration_into(rows, rows)
    assert rows.read_text().startswith("device,")


def test_gpu_devices_prints_device_listing(capsys):
    rtx = "docs/devices/rtx4090.toml"
    listed = hardware.device_listing(rtx)
    assert [d.name for d in listed] == [d.name for d in hardware.all_devices()] + ["my-rtx4090"]
    assert listed[-1] == hardware.load_device_file(rtx)
    assert hardware.device_listing() == hardware.all_devices()
    assert _json(capsys, ["gpu", "devices", "--device-file", rtx, "--json"]) == json.loads(
        json.dumps([d.as_dict() for d in listed]))


@pytest.mark.parametrize("argv,kw", [
    (["--device", "h100", "--kernel", "fa3"], {"kernel": "fa3"}),
    (["--device", "a100"], {}),                              # fa2 off Hopper
    (["--device", "h100", "--backward"], {"backward": True}),  # FA3's backward
    (["--config", "algorithm=fa2,Br=128,Bc=64,warps=4,stages=2"],
     {"config": "algorithm=fa2,Br=128,Bc=64,warps=4,stages=2"}),
])
def test_gpu_score_prints_score_workload(capsys, argv, kw):
    shape = Shape.make(2048, 64, heads=4)
    device = argv[1] if argv[0] == "--device" else "h100"
    s = hardware.score_workload(device, shape, **kw)
    named = kw.get("config") or kw.get("kernel") or ("fa3" if device == "h100" else "fa2")
    want = (hardware.backward_config(named, hardware.get(device), shape) if kw.get("backward")
            else named)
    assert s.to_dict() == hardware.score(device, shape, want).to_dict()
    out = _json(capsys, ["gpu", "score", "--N", "2048", "--d", "64", "--heads", "4", *argv,
                         "--json"])
    assert out == json.loads(json.dumps(s.to_dict()))


def test_score_workload_refuses_in_api_words():
    shape = Shape.make(1024, 64)
    with pytest.raises(ParameterError, match=r"^backward scores a named kernel's backward; "
                                             r"with config give algorithm=fa2_bwd") as e:
        hardware.score_workload("h100", shape, config="Br=128,Bc=64", backward=True)
    assert e.value.param == "backward"
    with pytest.raises(ParameterError, match=r"^give config or kernel, not both"):
        hardware.score_workload("h100", shape, config="Br=128,Bc=64", kernel="fa2")


@pytest.fixture(scope="module")
def h100_fit(tmp_path_factory):
    """A calibration file fitted to the example measurements (sm90 only)."""
    pytest.importorskip("scipy")
    out = tmp_path_factory.mktemp("fit") / "calib.json"
    hardware.fit_calibration_into("docs/gpu_measurements_example.csv", out)
    return out


def test_score_workload_uses_the_calibration_file(h100_fit):
    shape = Shape.make(4096, 128, heads=8)
    with hardware.using_calibration(hardware.load_calibration(h100_fit)):
        want = hardware.score("h100", shape, "fa3")
    got = hardware.score_workload("h100", shape, calibration=h100_fit)
    assert got.time_s == want.time_s and got.time_s != hardware.score("h100", shape, "fa3").time_s
    with pytest.raises(ParameterError, match=rf"^calibration {h100_fit} holds the fit of sm90, "
                                             r"but device a100-80gb is sm80") as e:
        hardware.score_workload("a100", shape, calibration=h100_fit)
    assert e.value.param == "calibration"


def test_gpu_validate_prints_validate_file(capsys, h100_fit):
    rows = "docs/gpu_measurements_example.csv"
    res = hardware.validate_file(rows)
    assert res == hardware.validate_measurements(rows)
    assert _json(capsys, ["gpu", "validate", "--measurements", rows, "--json"]) == res
    fitted = hardware.validate_file(rows, calibration=h100_fit)
    with hardware.using_calibration(hardware.load_calibration(h100_fit)):
        assert fitted == hardware.validate_measurements(rows)
    assert fitted["mean_abs_err"] < res["mean_abs_err"]   # the fit is to these rows
    assert _json(capsys, ["gpu", "validate", "--measurements", rows, "--calibration",
                          str(h100_fit), "--json"]) == fitted


# ---------------------------------------------------------------------- attnio run matmul
def test_run_matmul_prints_matmul_check(capsys):
    chk = blocks.matmul_check((32, 16, 24), 300, seed=3)
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((32, 16)), rng.standard_normal((16, 24))
    assert chk.result.output is not None
    assert chk.max_abs_err == float(np.abs(chk.result.output - A @ B).max()) < 1e-12
    count = blocks.matmul_check((32, 16, 24), 300, mode="count")
    assert count.max_abs_err is None and count.result.io.total == chk.result.io.total
    out = _json(capsys, ["run", "matmul", "--m", "32", "--k", "16", "--n", "24", "--M", "300",
                         "--seed", "3", "--json"])
    assert out["max_abs_err"] == chk.max_abs_err and out["total"] == chk.result.io.total


def test_matmul_check_is_refused_under_limits_before_drawing():
    with pytest.raises(ResourceError):
        blocks.matmul_check((4096, 4096, 4096), 4096, limits=Limits(budget_s=0.001))


# ---------------------------------------------------------------------- attnio run (approx)
def test_run_prints_the_approximate_tilings_description(capsys):
    assert main(["run", "approx_poly", "--N", "64", "--d", "4", "--M", "512", "--eps", "0.01",
                 "--entry-bound", "1"]) == 0
    text = capsys.readouterr().out
    import attnio

    res = attnio.run("approx_poly", shape=Shape.make(64, 4), M=512, mode="count",
                     tiling={"eps": 0.01, "entry_bound": 1.0})
    assert f"  approx   {res.tiling.describe()}" in text
    assert res.tiling.describe().startswith(f"degree {res.tiling.degree} ")


# ---------------------------------------------------------------------- attnio trace
def test_check_trace_size():
    shape = Shape.make(64, 8)
    assert cachesim.check_trace_size(shape, 1e9) == 64 * 64 * 8
    with pytest.raises(ParameterError, match=r"^N 64 d 8: the trace would hold more than "
                                             r"32,768 events") as e:
        cachesim.check_trace_size(shape, 100)
    assert e.value.param == "N" and "max_products 100" in str(e.value)


def test_trace_prints_record_trace(capsys):
    shape = Shape.make(64, 16, causal=True)
    t = cachesim.record_trace("flash2", 1024, shape=shape)
    want = cachesim.trace("flash2", M=1024, shape=shape)
    assert len(t) == len(want) and t.meta == want.meta
    out = _json(capsys, ["trace", "flash2", "--N", "64", "--d", "16", "--M", "1024", "--causal",
                         "--json"])
    assert out["events"] == len(t) and out["explicit"] == t.meta["explicit"]
    with pytest.raises(ParameterError, match=r"^N 64 d 16: the trace would hold more than"):
        cachesim.record_trace("flash2", 1024, shape=shape, max_products=100)
    with pytest.raises(ParameterError, match=r"^max_products must be"):
        cachesim.record_trace("flash2", 1024, shape=shape, max_products=0)


# ---------------------------------------------------------------------- attnio plan
def test_plan_report_places_the_factors_under_the_ratio():
    p = planner.plan_shape(Shape.make(1024, 64), planner.fast_memory(4096))
    f = p.factors(cheap=8)
    text = p.report(f).split("\n")
    at = next(k for k, ln in enumerate(text) if ln.lstrip().startswith("Ratio total/bound"))
    assert text[at + 1:at + 1 + len(f.lines())] == f.lines()
    assert p.report() == repr(p)


@pytest.mark.parametrize("factors", [None, "quick"])
def test_plan_prints_plan_with_factors(capsys, factors):
    shape, mem = Shape.make(1024, 64), planner.fast_memory(4096)
    fp = planner.plan_with_factors(shape, mem, factors=factors)
    assert fp.plan is planner.plan_shape(shape, mem)
    if factors is None:
        assert fp.factors is None and fp.report() == fp.plan.report()
    else:
        cheap, budget_s, loop_search = planner.FACTOR_SEARCHES[factors]
        f = fp.plan.factors(cheap=cheap, budget_s=budget_s, loop_search=loop_search)
        assert (fp.factors.total, fp.factors.bound) == (f.total, f.bound)
        assert fp.report() == fp.plan.report(fp.factors)
    argv = ["plan", "--N", "1024", "--d", "64", "--M", "4096", "--json"]
    out = _json(capsys, argv + (["--no-factors"] if factors is None else []))
    want = json.loads(json.dumps(fp.to_dict(), sort_keys=True, default=str))
    got_factors, want_factors = out.pop("factors"), want.pop("factors")
    assert out == want
    assert (got_factors is None) == (want_factors is None)
    if factors is not None:    # (a quick search's reach may depend on the time: its count not)
        assert got_factors["total"] == want_factors["total"]


def test_plan_with_factors_refuses_an_unknown_search_and_skips_approximate_picks():
    with pytest.raises(ParameterError, match=r"^factors must be 'quick' or 'full', got 'all'"):
        planner.plan_with_factors(Shape.make(256, 16), 1024, factors="all")
    fp = planner.plan_with_factors(Shape.make(1024, 64), 4096)
    assert fp.factors is not None and fp.to_dict()["factors"] == fp.factors.to_dict()


def test_plan_help_states_the_quick_search_budget(capsys):
    assert main(["plan", "--help"]) == 0
    cheap, budget_s, _ = planner.FACTOR_SEARCHES["quick"]
    assert f"quick one (<= {cheap} rows, capped at {budget_s:g} s)" in " ".join(
        capsys.readouterr().out.split())


# ---------------------------------------------------------------------- attnio sweep
def test_override_grid_reads_flags_as_grid_values():
    g = experiments.override_grid(experiments.Grid(), {"N": "64,128", "algo": "flash2,standard",
                                                       "causal": "true", "window": "16",
                                                       "mode": "count"})
    assert g.N == (64, 128) and g.algorithms == ("flash2", "standard") and g.mode == "count"
    assert g.causal == experiments.parse_causal("true")
    assert g.window == experiments.parse_window("16")


# ---------------------------------------------------------------------- attnio cp figure
def test_cp_db_figure_is_cp_figure_of_the_rows(tmp_path):
    pytest.importorskip("matplotlib")
    db = str(tmp_path / "cp.sqlite")
    experiments.cp_sweep(db, Shape.make(4096, 64), (2, 4, 8), ("ring", "ulysses"))
    got = experiments.cp_db_figure(db, str(tmp_path / "a.png"), lo=2, hi=8)
    want = experiments.cp_figure(experiments.cp_rows(db), str(tmp_path / "b.png"), lo=2, hi=8)
    assert got == want and (tmp_path / "a.png").is_file()


def test_export_target_infers_the_format_and_the_file():
    et = experiments.export_target
    assert et(None, None) == ("csv", "attnio-results.csv")
    assert et("json", None) == ("json", "attnio-results.json")
    assert et(None, None, latex=True) == ("latex", "attnio-results.tex")
    assert et(None, "t.TEX", latex=True) == ("latex", "t.TEX")
    assert et(None, "t.csv", latex=True) == (None, "t.csv")   # the verb refuses it, in flags
    assert et(None, "r.parquet") == (None, "r.parquet")       # the export reads the extension
