"""The GPU model's public functions: score one kernel config, tune over many.

``score(device, workload, config)`` is pure (Timeloop's model): the device's figures, the
workload (a :class:`~attnio.core.workload.Shape`) and a :class:`~.kernels.KernelConfig` in; a
:class:`Score` out: feasibility (and why not), shared memory, registers, CTAs per SM, waves,
HBM bytes read and written after the parallel L2 replay, the compulsory bytes, the bytes the
CTAs request from the L2 (= the two-level count of the same tiles), executed tensor FLOPs, the
predicted time and the resource that binds.  ``tune`` (in :mod:`.oracle`) searches configs and
calls ``score``.

>>> from attnio.hardware import score
>>> s = score("h100", (8192, 128), "fa3")
>>> s.config.short(), s.feasible
('fa3 128x176 w12 s2 RS overlap pack splits=2', True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ParameterError
from ..core.workload import Shape, cdiv
from . import devices as _devices
from .devices import Device
from .feasibility import Feasibility, check
from .kernels import KERNELS, KernelConfig, named_config, parse_config
from .l2 import Replay, replay
from .timing import Params, Prepared, Timing, evaluate, load_params, prepare
from .traffic import Traffic, build

__all__ = ["MAX_ROWS", "MAX_WAVE_REQUESTS", "Score", "calibrated", "check_size", "prepared",
           "resolve", "score", "waves_of"]

#: Resident CTAs per SM assumed for the light kernels (split-KV combine, backward preprocessing).
LIGHT_CTAS_PER_SM = 16


@dataclass(frozen=True)
class Score(Feasibility):
    """The model's verdict on one config (see the module docstring): its resources (the
    :class:`Feasibility` fields), then its traffic and time; ``to_dict`` is the JSON of
    ``attnio gpu score --json``."""

    config: KernelConfig
    device: str
    shape: Shape
    compulsory_bytes: int
    waves: int | None = None
    hbm_read_bytes: int | None = None
    hbm_write_bytes: int | None = None
    l2_bytes: int | None = None
    flops: float | None = None
    time_s: float | None = None
    bound_by: str | None = None
    by_resource: dict[str, float] = field(default_factory=dict)
    alone: dict[str, float] = field(default_factory=dict)
    breakdown: dict[str, float] = field(default_factory=dict)
    extrapolated: bool = False
    granularity: str = "tile"

    @property
    def hbm_bytes(self) -> int | None:
        if self.hbm_read_bytes is None:
            return None
        assert self.hbm_write_bytes is not None  # set together with hbm_read_bytes
        return self.hbm_read_bytes + self.hbm_write_bytes

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": {**self.config.as_dict(), "short": self.config.short()},
            "feasible": self.feasible,
        }
        if not self.feasible:
            out["why"] = self.why
        out.update({
            "smem_bytes": self.smem_bytes, "smem_limit_bytes": self.smem_limit_bytes,
            "regs_per_thread": self.regs_per_thread, "regs_limit": self.regs_limit,
            "ctas_per_sm": self.ctas_per_sm, "waves": self.waves,
            "hbm_read_bytes": self.hbm_read_bytes, "hbm_write_bytes": self.hbm_write_bytes,
            "compulsory_bytes": self.compulsory_bytes, "l2_bytes": self.l2_bytes,
            "flops": self.flops, "time_s": self.time_s, "bound_by": self.bound_by,
            "time_by_resource_s": self.by_resource, "time_alone_s": self.alone,
            "breakdown_s": self.breakdown,
            "extrapolated": self.extrapolated, "device": self.device,
            "workload": self.shape.describe(),
        })
        return out

    def line(self) -> str:
        """One line for tables: config, time, binding resource, HBM/compulsory."""
        if not self.feasible:
            return f"{self.config.short():<40} infeasible: {self.why}"
        hbm = self.hbm_bytes
        assert hbm is not None and self.time_s is not None  # a feasible config's score has them
        ratio = hbm / self.compulsory_bytes if self.compulsory_bytes else 0.0
        return (f"{self.config.short():<40} {self.time_s * 1e6:10.1f} us  bound by "
                f"{self.bound_by:<7}  HBM {hbm / 1e6:9.2f} MB "
                f"({ratio:.2f}x compulsory)  waves {self.waves}")


def resolve(device: str | Device, workload: Any, config: Any,
            dtype: str | None = None) -> tuple[Device, Shape, KernelConfig]:
    """(device, Shape, KernelConfig) from the forms the public functions accept.

    ``config``: a KernelConfig, a named kernel (``"fa2"``, ``"fa3"``, ``"sdpa"``), a
    ``"Br=..,Bc=.."`` string or a mapping of KernelConfig fields.  ``dtype`` (default bf16)
    sets a named or parsed config's element type.
    """
    dev = _devices.get(device).require_model()
    shape = Shape.coerce(workload)
    dt = _devices.dtype_name(dtype or (config.dtype if isinstance(config, KernelConfig)
                                       else "bf16"))
    if isinstance(config, KernelConfig):
        cfg = config if dtype is None else dataclasses.replace(config, dtype=dt)
    elif isinstance(config, str) and config in KERNELS:
        cfg = named_config(config, dev, shape, dt)
    elif isinstance(config, str):
        cfg = parse_config(config, algorithm="fa3" if dev.wgmma else "fa2", dtype=dt)
        typed = [x.split("=", 1)[1].strip() for x in config.split(",")
                 if x.split("=", 1)[0].strip() == "dtype" and "=" in x]
        if typed and dtype is not None and \
                _devices.dtype_name(typed[-1]) != _devices.dtype_name(dtype):
            raise ParameterError(f"dtype={dtype} conflicts with the element type {typed[-1]} "
                                 "given inside --config; give it once", param="dtype")
    elif isinstance(config, Mapping):
        base = {"algorithm": "fa3" if dev.wgmma else "fa2", "dtype": dt}
        merged = {**base, **config}
        if merged["algorithm"] == "fa3":   # FA3's shipped mechanisms unless given
            merged.setdefault("overlap", True)
        try:
            cfg = KernelConfig(**merged)
        except TypeError as e:
            raise ParameterError(f"config: {e}", param="config") from None
    else:
        raise ParameterError(f"config must be a KernelConfig, a kernel name ({', '.join(KERNELS)})"
                             f" or 'Br=..,Bc=..', got {config!r}", param="config")
    cfg.validate(shape.d)
    return dev, shape, cfg


def waves_of(traffic: Traffic, device: Device, ctas_per_sm: int) -> list[int]:
    """CTAs resident at once in each phase: SMs x CTAs per SM."""
    assert device.sm_count is not None  # (a device that passed require_model())
    out = []
    for ph in traffic.phases:
        occ = ctas_per_sm if ph.name in ("main", "split") else LIGHT_CTAS_PER_SM
        out.append(device.sm_count * max(1, occ))
    return out


#: Tile requests the L2 replay of a named kernel's prediction (:mod:`.predict`, ``gpu
#: validate``, the calibration) may spend before the rest of its waves are extrapolated.
PREDICT_BUDGET = 60_000

#: The most tile requests one wave of the L2 replay may hold (its event arrays: about 300 MB).
MAX_WAVE_REQUESTS = 6_000_000
#: The longest sequence the model lays out per head (per-row mask arrays: 128 MiB at most).
MAX_ROWS = 1 << 24
#: The most CTAs a launch grid may have (the replay lays out the grid's launch order: a few
#: int64 arrays of this length, about 1 GB at most).
MAX_GRID_CTAS = 1 << 24


def check_size(dev: Device, shape: Shape, cfg: KernelConfig | None,
               f: Feasibility | None) -> None:
    """Refuse, before anything large is allocated, a workload whose replay would not fit in a
    few hundred MB: ParameterError naming ``N`` (``Nkv``/``Nq``).  With ``cfg`` None, the
    check of the most favourable config (256-row tiles); else of ``cfg``'s waves."""
    for name, n in (("Nq", shape.Nq), ("Nkv", shape.Nkv)):
        if n > MAX_ROWS:
            name = "N" if shape.Nq == shape.Nkv else name
            raise ParameterError(f"{name}={n:,} is over {MAX_ROWS:,} (2^24): the GPU model lays "
                                 "out every row of a head; give a shorter sequence", param=name)
    grid = shape.n_heads * cdiv(shape.Nq, 256)  # the fewest CTAs (256-row tiles) of any config
    if grid > MAX_GRID_CTAS:
        raise ParameterError.worded(
            f"{{heads}}: {shape.n_heads:,} query heads ({{batch}} x {{heads}}) of {shape.Nq:,} "
            f"rows make at least {grid:,} CTAs, more than the GPU model lays out "
            f"({MAX_GRID_CTAS:,}, 2^24); give fewer {{heads}} or a smaller {{batch}}",
            param="heads")
    assert dev.sm_count is not None
    if cfg is None:
        inner, per = 256, min(dev.sm_count, shape.n_heads * cdiv(shape.Nq, 256))
    else:
        inner = cfg.Br if not cfg.forward else cfg.Bc
        if not cfg.forward:
            ctas = shape.n_kv_heads * cdiv(shape.Nkv, cfg.Bc)
        else:
            G = shape.group if cfg.pack_gqa else 1
            units = shape.n_kv_heads if G > 1 else shape.n_heads
            ctas = units * cdiv(shape.Nq * G, cfg.Br) * cfg.splits
        per = min(ctas, dev.sm_count * max(1, f.ctas_per_sm if f is not None else 1))
    n_inner = cdiv(shape.Nq if cfg is not None and not cfg.forward else shape.Nkv,
                   inner)
    if cfg is not None and cfg.splits > 1:
        n_inner = cdiv(n_inner, cfg.splits)
    requests = per * n_inner * 2
    if requests > MAX_WAVE_REQUESTS:
        raise ParameterError(f"N={max(shape.Nq, shape.Nkv):,}: one wave of the L2 replay would "
                             f"hold about {requests:,} tile requests (the model's limit is "
                             f"{MAX_WAVE_REQUESTS:,}, a few hundred MB); give a shorter --N",
                             param="N")


def _infeasible(dev: Device, shape: Shape, cfg: KernelConfig, f: Feasibility,
                compulsory: int) -> Score:
    return Score(**vars(f), config=cfg, device=dev.name, shape=shape,
                 compulsory_bytes=compulsory)


def score(device: str | Device, workload: Any, config: Any, *, dtype: str | None = None,
          l2_bytes: int | None = None, granularity: str = "tile",
          budget: int | None = 400_000) -> Score:
    """Score ``config`` running ``workload`` on ``device`` (module docstring).

    Parameters
    ----------
    device : str or Device
        A preset name of :mod:`attnio.hardware.devices` (``"h100"``, ``"a100"``, ...) or a
        :class:`~attnio.hardware.devices.Device` with the model's figures.
    workload : Shape or tuple
        The attention workload: a :class:`~attnio.core.workload.Shape` (heads, GQA and mask
        included), ``(N, d)`` or ``(Nq, Nkv, d)``.
    config : KernelConfig, str or mapping
        A :class:`~attnio.hardware.kernels.KernelConfig`, a named kernel (``"fa2"``, ``"fa3"``,
        ``"sdpa"``), a ``"Br=..,Bc=.."`` string or a mapping of KernelConfig fields.
    dtype : str, optional
        The element type (``"bf16"``, ``"fp16"``, ``"fp32"``, ...); default: the config's, else
        bf16.
    l2_bytes : int, optional
        Overrides the device's L2 size (what-if studies; the monotonicity test).
    granularity : {"tile", "sector"}
        ``"sector"`` replays 32-byte sectors instead of tiles (validation, slow).
    budget : int or None
        Caps the requests replayed before the remaining waves are extrapolated (None: replay
        every request).

    Returns
    -------
    Score
        Feasibility (and why not), resources, waves, HBM bytes after the L2 replay, the
        compulsory bytes, FLOPs, the predicted time (the calibrated model of :mod:`.timing`)
        and the binding resource.
    """
    dev, shape, cfg = resolve(device, workload, config, dtype)
    f = check(dev, cfg, shape)
    from .traffic import compulsory_bytes

    check_size(dev, shape, None if not f.feasible else cfg, f)
    if not f.feasible:
        return _infeasible(dev, shape, cfg, f, compulsory_bytes(cfg, shape))
    tr = build(cfg, shape, dev, f.ctas_per_sm)
    wv = waves_of(tr, dev, f.ctas_per_sm)
    assert dev.l2_bytes is not None and dev.l2_sector_bytes is not None  # require_model()
    cap = dev.l2_bytes if l2_bytes is None else int(l2_bytes)
    rep = replay(tr, cap, wv, granularity=granularity, sector=dev.l2_sector_bytes,
                 budget=budget)
    return _scored(dev, shape, cfg, f, tr, rep, calibrated(tr, dev, f, rep, wv))


def calibrated(tr: Traffic, dev: Device, f: Feasibility, rep: Replay, wv: list[int],
               params: Params | None = None) -> Timing:
    """The calibrated time (:mod:`.timing`) of built traffic and its replay."""
    pr = _prepare(tr, dev, f, rep)
    split: dict[str, float] = {}
    t, _, by, alone = evaluate(pr, params or load_params(dev), breakdown=split)
    waves = sum(-(-ph.n // P) for ph, P in zip(tr.phases, wv) if ph.n)
    return Timing(t, bound_of(split), waves, by, alone, split)


def bound_of(breakdown: dict[str, float]) -> str:
    """What binds: the largest term of the additive split (:data:`~.timing.BREAKDOWN`)."""
    return max(breakdown, key=lambda r: breakdown[r]) if breakdown else "none"


def _prepare(tr: Traffic, dev: Device, f: Feasibility, rep: Replay) -> Prepared:
    hbm = [float(r.sum() + w.sum()) for r, w in zip(rep.wave_read, rep.wave_write)]
    return prepare(tr, dev, f.ctas_per_sm, hbm, LIGHT_CTAS_PER_SM)


def prepared(device: str | Device, workload: Any, config: Any) -> Prepared | None:
    """The parameter-free amounts :func:`~.timing.evaluate` times (None: infeasible)."""
    dev, shape, cfg = resolve(device, workload, config)
    f = check(dev, cfg, shape)
    if not f.feasible:
        return None
    check_size(dev, shape, cfg, f)
    tr = build(cfg, shape, dev, f.ctas_per_sm)
    wv = waves_of(tr, dev, f.ctas_per_sm)
    assert dev.l2_bytes is not None and dev.l2_sector_bytes is not None  # require_model()
    rep = replay(tr, dev.l2_bytes, wv, sector=dev.l2_sector_bytes, budget=PREDICT_BUDGET,
                 min_waves=1)
    return _prepare(tr, dev, f, rep)


def _scored(dev: Device, shape: Shape, cfg: KernelConfig, f: Feasibility, tr: Traffic,
            rep: Replay, t: Timing) -> Score:
    flops = float(sum(float(ph.flops.sum()) for ph in tr.phases))
    rd, wr = rep.hbm_read, rep.hbm_write
    if rep.extrapolated:   # an estimate past the replay budget: never below the compulsory bytes
        from .traffic import compulsory_rw

        cr, cw = compulsory_rw(cfg, shape)
        rd, wr = max(rd, cr), max(wr, cw)
    return Score(**vars(f), config=cfg, device=dev.name, shape=shape,
                 compulsory_bytes=tr.compulsory, waves=t.waves, hbm_read_bytes=rd,
                 hbm_write_bytes=wr, l2_bytes=tr.two_level, flops=flops,
                 time_s=t.time_s, bound_by=t.bound_by, by_resource=t.by_resource, alone=t.alone,
                 breakdown=t.breakdown,
                 extrapolated=rep.extrapolated, granularity=rep.granularity)


def finish(dev: Device, shape: Shape, cfg: KernelConfig, f: Feasibility, tr: Traffic,
           wv: list[int], *, budget: int | None = 400_000) -> Score:
    """Replay and time a config whose traffic is already built (the oracle's finalists)."""
    assert dev.l2_bytes is not None and dev.l2_sector_bytes is not None  # require_model()
    rep = replay(tr, dev.l2_bytes, wv, sector=dev.l2_sector_bytes, budget=budget)
    return _scored(dev, shape, cfg, f, tr, rep, calibrated(tr, dev, f, rep, wv))
