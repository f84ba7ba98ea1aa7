"""The GPU model's devices, kernel configs and feasibility: flash-attn's shipped tiles fit, and the
limits its source comments name are re-derived (docs/hardware.md, "tile_size.h re-derived")."""

from __future__ import annotations

import dataclasses

import pytest

import attnio
from attnio.core.workload import Shape
from attnio.hardware import devices, feasibility, kernels
from attnio.hardware.kernels import KernelConfig

H100, A100 = devices.get("h100"), devices.get("a100")
HEAD_DIMS = (64, 96, 128, 192, 256)


def _prefill(d, causal=False):
    return Shape(8192, 8192, d, batch=4, heads=32, causal=causal)


# ---------------------------------------------------------------------- devices
def test_every_model_figure_of_a_scorable_device_is_cited():
    for dev in devices.all_devices():
        if dev.kind != "gpu" or dev.missing():
            continue
        for fig in (*devices.Device.MODEL_FIELDS, "tensor_flops", "hbm_bytes"):
            assert dev.cite(fig), f"{dev.name}.{fig} has no source"
            for key in dev.cite(fig).split(", "):
                assert key in devices.SOURCES, (dev.name, fig, key)


def test_devices_missing_public_figures_are_refused_with_the_missing_figure():
    with pytest.raises(attnio.ParameterError, match="max_threads_per_sm"):
        devices.get("mi300x").require_model()
    assert "CPU preset" in devices.get("cpu-l2").missing()[0]


def test_two_level_presets_come_from_the_gpu_table():
    for name in ("a100", "h100", "a100-40gb", "h200", "rtx4090"):
        dev = devices.get(name)
        assert dev.fast_bytes == dev.smem_per_block
        assert attnio.plan(4096, 64, device=name).memory.M == dev.smem_per_block // 2
    assert devices.get("cpu-l1d").words(2) == 24 * 1024


def test_unknown_device_lists_the_known_ones():
    with pytest.raises(attnio.UnknownNameError) as e:
        devices.get("h900")
    msg = str(e.value)
    assert "h900" in msg and "h100-sxm" in msg and "a100-80gb" in msg


# ---------------------------------------------------------------------- shipped configs fit
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_shipped_forward_configs_are_feasible(d, causal):
    shp = _prefill(d, causal)
    for dev, fn in ((A100, kernels.fa2_config), (H100, kernels.fa3_config)):
        cfg = fn(dev, shp, "bf16")
        assert cfg.splits == 1
        f = feasibility.check(dev, cfg, shp)
        assert f.feasible, (dev.name, cfg.short(), f.why)
        assert f.smem_bytes <= f.smem_limit_bytes == dev.smem_per_block
        assert f.regs_per_thread <= f.regs_limit and f.ctas_per_sm >= 1


def test_fa3_tile_table_matches_tile_size_h():
    # (d, causal) -> (Br, Bc, RS) of tile_size_fwd_sm90 at flash-attn 0251105a
    want = {(64, False): (192, 192, False), (64, True): (192, 128, True),
            (96, False): (192, 144, False), (128, False): (128, 176, True),
            (128, True): (128, 128, True), (192, False): (128, 112, True),
            (256, False): (128, 80, True), (256, True): (128, 80, True)}
    for (d, causal), (Br, Bc, rs) in want.items():
        c = kernels.fa3_config(H100, _prefill(d, causal))
        assert (c.Br, c.Bc, c.p == "regs", c.stages, c.warps) == (Br, Bc, rs, 2, 4 * (Br // 64 + 1))


def _smem_over(dev, cfg, d):
    f = feasibility.check(dev, cfg, Shape(8192, 8192, d))
    return f.why is not None and f.why.startswith("shared memory")


@pytest.mark.parametrize("d, Bc, rs", [(256, 80, True), (192, 112, True), (128, 192, True)])
def test_tile_size_h_hits_the_limit_of_smem_comments_are_re_derived(d, Bc, rs):
    """"128 x 80 hits the limit of smem" (d=256), "128 x 112" (d=192), "128 x 192 ... if
    MmaPV_is_RS" (d=128): that tile fits, the next multiple of 16 is over the per-block limit."""
    cfg = KernelConfig("fa3", 128, Bc, 12, 2, p="regs" if rs else "smem", overlap=True)
    assert feasibility.check(H100, cfg, Shape(8192, 8192, d)).feasible
    nxt = dataclasses.replace(cfg, Bc=Bc + 16)
    assert _smem_over(H100, nxt, d)


def test_tile_size_h_comment_128x144_without_rs_is_not_reproduced():
    """"128 x 144 hits the limit if !MmaPV_is_RS": the smem formula puts 128 x 144 SS at 212 KiB,
    inside 227 KiB; 128 x 160 SS is the first over (docs/hardware.md says why they differ)."""
    ss = KernelConfig("fa3", 128, 144, 12, 2, p="smem", overlap=True)
    f = feasibility.check(H100, ss, Shape(8192, 8192, 128))
    assert f.feasible and f.smem_bytes < 213 * 1024
    assert _smem_over(H100, dataclasses.replace(ss, Bc=160), 128)


def test_fa2_launch_template_comments_are_re_derived():
    shp = Shape(8192, 8192, 128)
    # "128 x 32 (48 KB smem) ... we get 2 CTAs per SM" (sm86/89, d = 128)
    c = KernelConfig("fa2", 128, 32, 4)
    assert feasibility.smem_bytes(c, shp) == 48 * 1024
    assert feasibility.check(devices.get("rtx4090"), c, shp).ctas_per_sm == 2
    # d = 256: "For A100 ... 128 x 64 (128KB smem). For H100 ... 64 x 64 (96KB smem) since then
    # we can get 2 CTAs per SM"
    s256 = Shape(8192, 8192, 256, batch=4, heads=32)
    a, h = kernels.fa2_config(A100, s256), kernels.fa2_config(H100, s256)
    assert (a.Br, a.Bc, a.warps) == (128, 64, 8) and (h.Br, h.Bc, h.warps) == (64, 64, 4)
    assert feasibility.smem_bytes(a, s256) == 128 * 1024
    assert feasibility.smem_bytes(h, s256) == 96 * 1024
    assert feasibility.check(H100, h, s256).ctas_per_sm == 2
    assert feasibility.check(A100, a, s256).ctas_per_sm == 1
    # d = 64: "Using block size (256 x 64) is 85% slower ... because of register spilling"
    spill = feasibility.check(A100, KernelConfig("fa2", 256, 64, 4), Shape(8192, 8192, 64))
    assert not spill.feasible and spill.why.startswith("registers")
    assert feasibility.check(A100, KernelConfig("fa2", 128, 128, 4), Shape(8192, 8192, 64)).feasible


def test_two_level_placement_of_o_and_s_overflows_where_registers_do_not():
    """The seeds' model keeps O (fp32) in fast memory: FA3's d = 256 tile then no longer fits."""
    real = kernels.fa3_config(H100, _prefill(256))
    assert feasibility.check(H100, real, _prefill(256)).feasible
    two_level = dataclasses.replace(real, o="smem")
    f = feasibility.check(H100, two_level, _prefill(256))
    assert not f.feasible and "over by" in f.why


# ---------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("cfg, needle", [
    (KernelConfig("fa2", 100, 64, 4), "Br=100 is not a multiple of the MMA tile"),
    (KernelConfig("fa2", 128, 72, 4), "Bc=72 is not a multiple"),
    (KernelConfig("fa3", 96, 64, 12, 2), "Br=96 is not a multiple"),
    (KernelConfig("fa3", 128, 64, 8, 2), "warps=8"),
    (KernelConfig("fa2", 128, 64, 4, stages=4), "stages must be 1, 2 or 3"),
    (KernelConfig("fa2", 128, 64, 4, splits=2), "splits=2"),
    (KernelConfig("fa2", 128, 64, 4, q="reg"), "q must be"),
])
def test_bad_configs_name_the_parameter(cfg, needle):
    with pytest.raises(attnio.ParameterError) as e:
        cfg.validate(128)
    assert needle in str(e.value)


def test_head_dim_no_table_covers_is_refused():
    with pytest.raises(attnio.ParameterError, match="d=512: no kernel table covers"):
        kernels.fa3_config(H100, Shape(1024, 1024, 512))
    with pytest.raises(attnio.ParameterError, match="d=300"):
        KernelConfig("fa2", 128, 64, 4).validate(300)


def test_infeasible_config_names_the_resource_and_the_amount_over():
    cfg = KernelConfig("fa3", 128, 96, 12, 2, overlap=True)
    f = feasibility.check(H100, cfg, Shape(8192, 8192, 256))
    assert not f.feasible
    assert f.why == ("shared memory: 262,336 B (256.2 KiB) > 232,448 B (227.0 KiB) per block, "
                     "over by 29,888 B")
    regs = feasibility.check(H100, KernelConfig("fa3", 128, 224, 12, 1, overlap=True),
                             Shape(8192, 8192, 128))
    assert regs.why.startswith("registers: 256 per thread > the 240")


def test_parse_config_keys_and_errors():
    c = kernels.parse_config("Br=128,Bc=176,stages=2,warps=12,p=smem,pack=1", algorithm="fa3")
    assert (c.Br, c.Bc, c.stages, c.warps, c.p, c.pack_gqa) == (128, 176, 2, 12, "smem", True)
    assert kernels.parse_config("Br=192,Bc=64", algorithm="fa3").warps == 16
    with pytest.raises(attnio.ParameterError, match="config key 'foo' is unknown"):
        kernels.parse_config("Br=128,foo=1")
    with pytest.raises(attnio.ParameterError, match="not key=value"):
        kernels.parse_config("Br")


def test_fa3_register_budget_admits_every_shipped_tile_and_does_not_separate_192x128():
    """A consumer thread holds O (64 rows x dv / 128 threads), S (64 x Bc / 128) and, with P in
    registers and the intra-warp-group overlap, P (half of S's registers: it stays live
    across the next QK^T, which the RS PV GEMM follows); SS writes P to shared memory right
    after converting it.  Every fp16/bf16 forward tile of hopper/tile_size.h fits its
    setmaxnreg budget (240 with two consumer groups, 160 with three); the d = 64 tiles fill
    the three-group budget exactly, and so does 192 x 128 SS at d = 128, the tile flash-attn
    calls "quite good too": registers do not rule it out, only its RS form with the overlap
    (P live)."""
    for d in (64, 96, 128, 192, 256):
        for causal in (False, True):
            for dtype in ("bf16", "fp16"):
                cfg = kernels.fa3_config(H100, _prefill(d, causal), dtype)
                f = feasibility.check(H100, cfg, _prefill(d, causal))
                assert f.feasible and f.regs_per_thread <= f.regs_limit, (d, causal, cfg)
    d64 = feasibility.check(H100, kernels.fa3_config(H100, _prefill(64)), _prefill(64))
    assert (kernels.fa3_config(H100, _prefill(64)).p, d64.regs_per_thread) == ("smem", 160)
    ss = feasibility.check(H100, KernelConfig("fa3", 192, 128, 16, 2, p="smem", overlap=True),
                             _prefill(128))
    assert ss.feasible and ss.regs_per_thread == ss.regs_limit == 160
    rs = feasibility.check(H100, KernelConfig("fa3", 192, 128, 16, 2, overlap=True), _prefill(128))
    assert not rs.feasible and rs.why.startswith("registers: 192 per thread > the 160")
