"""docs/devices.md is what ``python docs/gen_devices.py`` writes: every section, the hand-written
prose included, comes from the generator, so a rerun of it loses nothing and the page cannot
drift from the device table or the calibrated fit."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_devices", ROOT / "docs" / "gen_devices.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_devices_md_is_the_generators_output():
    page = (ROOT / "docs" / "devices.md").read_text()
    made = _generator().render()
    if made != page:
        a, b = page.splitlines(), made.splitlines()
        i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        raise AssertionError(
            f"docs/devices.md differs from `python docs/gen_devices.py`'s output at line {i + 1}"
            f" (rerun the generator, or move hand-written text into it):\n  page: "
            f"{a[i][:160] if i < len(a) else '<end>'}\n  made: {b[i][:160] if i < len(b) else '<end>'}")


def test_generator_keeps_the_tile_mechanisms_section():
    made = _generator().render()
    assert "Mechanisms that decide between tiles" in made
    assert "timing.ss_operand_floor" in made
    for mech in ("Register budget", "Ping-pong partners", "Instruction shape", "Per-step costs",
                 "Stages", "Occupancy and waves"):
        assert f"**{mech}" in made
