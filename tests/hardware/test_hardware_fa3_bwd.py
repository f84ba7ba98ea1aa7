"""FA3's backward in the calibrated GPU model: flash-attn's shipped Hopper backward configs
(``hopper/flash_bwd_launch_template.h``) are feasible, its predicted speed-up over FA2's
backward is in a sane range (a prediction: the calibration set has no FA3 backward rows),
causal is faster than non-causal, HBM never below compulsory, and sm80 refuses it."""

from __future__ import annotations

import pytest

from attnio.core.errors import ParameterError
from attnio.core.workload import Shape
from attnio.hardware import devices, kernels
from attnio.hardware.feasibility import check, smem_bytes
from attnio.hardware.model import score
from attnio.hardware.predict import flash_flops, pass_configs, predict, prepare_row
from attnio.hardware.traffic import compulsory_rw

H100 = devices.get("h100")
A100 = devices.get("a100")


def _bench(N, d, causal=False):
    """flash-attn's benchmark setting: batch = 16384/N, heads = 2048/d."""
    return Shape(N, N, d, causal=causal, batch=16384 // N, heads=2048 // d)


def _tflops(kernel, shape, pass_="bwd"):
    return flash_flops(shape, pass_) / predict(H100, shape, kernel, pass_, "bf16") / 1e12


@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_shipped_fa3_backward_configs_are_feasible_on_h100(d, causal):
    shape = _bench(4096, d, causal)
    cfg = kernels.fa3_bwd_config(H100, shape)
    row = kernels.FA3_BWD_SM90[d][causal]
    assert (cfg.algorithm, cfg.Br, cfg.Bc, cfg.stages) == ("fa3_bwd", row["Br"], row["Bc"],
                                                           row["Stages_dO"])
    assert cfg.consumer_wgs == row["NumMmaWarpGroups"] and cfg.warps == 4 * (cfg.consumer_wgs + 1)
    f = check(H100, cfg, shape)
    assert f.feasible, f.why
    assert f.smem_bytes <= H100.smem_per_block and f.ctas_per_sm == 1


def test_the_table_is_flash_attns():
    """Spot checks against hopper/flash_bwd_launch_template.h (sm90 branch)."""
    t = kernels.FA3_BWD_SM90
    assert (t[128][False]["Br"], t[128][False]["Bc"]) == (80, 128)   # non-causal hdim128
    assert (t[128][True]["Br"], t[128][True]["Bc"]) == (64, 128)     # causal hdim128
    assert t[192][False]["NumMmaWarpGroups"] == 3 and t[192][False]["warps"] == 16
    assert t[64][False]["Mma_dKV_is_RS"] and not t[256][False]["Mma_dKV_is_RS"]
    assert all(r["Stages_dO"] == r["Stages_dS"] for rows in t.values() for r in rows.values())


def test_fa3_backward_faster_than_fa2_backward_on_h100_d128_16k():
    """The FA3 paper reports 1.5-1.75x; the model predicts this (docs/hardware.md)."""
    shape = _bench(16384, 128)
    r = _tflops("fa3", shape) / _tflops("fa2", shape)
    assert 1.0 < r < 2.5, r


def test_fa3_fwd_bwd_uses_fa3s_backward():
    shape = _bench(4096, 128)
    algs = [c.algorithm for c in pass_configs("fa3", H100, shape, "fwd+bwd", "bf16")]
    assert algs == ["fa3", "fa3_bwd"]
    row = prepare_row(H100, shape, "fa3", "bwd", "bf16")
    assert [k.name for k in row.extra] == ["convert dQ"]
    fwd = predict(H100, shape, "fa3", "fwd", "bf16")
    bwd = predict(H100, shape, "fa3", "bwd", "bf16")
    assert predict(H100, shape, "fa3", "fwd+bwd", "bf16") == pytest.approx(fwd + bwd)


def test_causal_fa3_backward_is_faster_than_non_causal():
    full = predict(H100, _bench(8192, 128), "fa3", "bwd", "bf16")
    causal = predict(H100, _bench(8192, 128, causal=True), "fa3", "bwd", "bf16")
    assert causal < 0.7 * full


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_fa3_backward_hbm_never_below_compulsory(d, causal):
    shape = Shape(1536, 1536, d, causal=causal, batch=2, heads=4)
    cfg = kernels.fa3_bwd_config(H100, shape)
    s = score(H100, shape, cfg, budget=None)
    r, w = compulsory_rw(cfg, shape)
    assert s.hbm_bytes >= r + w and s.hbm_read_bytes >= r


def test_sm80_refuses_fa3_backward():
    shape = _bench(4096, 128)
    for pass_ in ("bwd", "fwd+bwd"):
        with pytest.raises(ParameterError, match="needs Hopper"):
            predict(A100, shape, "fa3", pass_, "bf16")
    cfg = kernels.fa3_bwd_config(H100, shape)
    f = check(A100, cfg, shape)
    assert not f.feasible and f.why.startswith("wgmma")


def test_fa3_bwd_config_validation_names_the_field():
    with pytest.raises(ParameterError, match="warps"):
        kernels.KernelConfig("fa3_bwd", 64, 128, 8, 2).validate(128)
    with pytest.raises(ParameterError, match="pack_gqa"):
        kernels.KernelConfig("fa3_bwd", 64, 128, 12, 2, pack_gqa=True).validate(128)
    # P in shared memory costs its stages of Br x Bc
    a = kernels.KernelConfig("fa3_bwd", 64, 128, 12, 2, p="regs")
    b = kernels.KernelConfig("fa3_bwd", 64, 128, 12, 2, p="smem")
    assert smem_bytes(b, _bench(4096, 128)) - smem_bytes(a, _bench(4096, 128)) == 2 * 64 * 128 * 2


def test_cli_score_backward(capsys):
    from attnio.cli import main

    assert main(["gpu", "score", "--N", "4096", "--d", "128", "--kernel", "fa3",
                 "--backward"]) == 0
    assert "fa3_bwd 80x128 w12 s2" in capsys.readouterr().out
    assert main(["gpu", "score", "--device", "a100", "--N", "4096", "--d", "128", "--kernel",
                 "fa3", "--backward"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--kernel fa3 needs Hopper" in err[0]
