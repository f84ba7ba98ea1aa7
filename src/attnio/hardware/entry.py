"""The calls of the ``attnio gpu`` verbs that take files (docs/api.md, "The command line uses it
too"): a workload scored with the config a verb names and a calibration file
(:func:`score_workload`), measurements validated against the model with a device file and a
calibration file (:func:`validate_file`).  Above :mod:`.model`, :mod:`.validate` and
:mod:`.calibrate`, which it joins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import ParameterError
from ..core.workload import Shape
from .calibrate import load as load_calibration
from .device_file import load as load_device
from .devices import Device, dtype_name, get
from .fits import using
from .kernels import backward_config
from .model import Score, score
from .timing import generation
from .validate import validate

__all__ = ["score_workload", "validate_file"]


def score_workload(device: str | Device, workload: Any, *, config: Any = None,
                   kernel: str | None = None, backward: bool = False, dtype: str | None = None,
                   calibration: str | os.PathLike | None = None) -> Score:
    """:func:`~.model.score` of the config ``attnio gpu score`` names: ``config`` (a
    :class:`~.kernels.KernelConfig`, a ``"Br=..,Bc=.."`` string or a mapping), or the named
    ``kernel``'s (``"fa2"``, ``"fa3"``, ``"sdpa"``; default fa3 on Hopper, else fa2), its
    backward config with ``backward`` (:func:`~.kernels.backward_config`).  ``calibration``: a
    file ``attnio gpu calibrate`` wrote (:func:`~.calibrate.load`), used in place of the stored
    fit (:func:`~.fits.using`); it must hold the device's generation.

    >>> s = score_workload("a100", Shape.make(1024, 64))
    >>> s.config.label == score("a100", Shape.make(1024, 64), "fa2").config.label
    True
    """
    dev = get(device)
    if config is not None and kernel is not None:
        raise ParameterError.worded("give {config} or {kernel}, not both", param="config")
    chosen: Any = config if config is not None else (kernel or ("fa3" if dev.wgmma else "fa2"))
    if backward:
        if config is not None:
            raise ParameterError.worded(
                "{backward} scores a named {kernel}'s backward; with {config} give "
                "algorithm=fa2_bwd or algorithm=fa3_bwd instead", param="backward")
        chosen = backward_config(chosen, dev.require_model(), Shape.coerce(workload),
                                 dtype_name(dtype or "bf16"))
    gens: Mapping[str, Any] = {}
    if calibration is not None:
        gens = load_calibration(calibration)
        if generation(dev) not in gens:
            what = (f"{os.fspath(calibration)} holds the fit of {', '.join(gens)}, but device "
                    f"{dev.name} is {generation(dev)}").replace("{", "{{").replace("}", "}}")
            raise ParameterError.worded("{calibration} " + what + ": calibrate on its "
                                        "measurements, or leave {calibration} out",
                                        param="calibration")
    with using(gens):
        return score(dev, workload, chosen, dtype=dtype)


def validate_file(measurements: str | Path, *, device_file: str | Path | None = None,
                  calibration: str | Path | None = None) -> dict[str, Any]:
    """:func:`~.validate.validate` (``attnio gpu validate``): the rows of ``measurements`` against the
    model, the rows may name the GPU ``device_file`` describes (:func:`~.device_file.load`),
    and the times use the fit of the file ``calibration`` (:func:`~.calibrate.load`,
    :func:`~.fits.using`) in place of the stored one for the generations it holds."""
    gens = load_calibration(calibration) if calibration else {}
    with using(gens):
        return validate(measurements,
                        devices=[load_device(device_file)] if device_file else [])
