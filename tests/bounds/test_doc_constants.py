"""The leading constants the documentation states for the explicit bounds are the code's: each
is recomputed from the bound function at a large N (where the lower-order terms vanish) and must
agree with the printed figure to within one unit of its last digit, in every page that prints it
(issue 36: the README and docs/bounds.md once disagreed on Theorem B′'s 3.1 / 3.2)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from attnio import bounds as B

ROOT = Path(__file__).resolve().parents[2]

#: (what the docs print before the constant, the unit after it, the bound, the point)
CASES = [
    ("pv_segment", "N²d²/M", lambda: B.pv_segment(N=10**8, d=32, M=16 * 32 * 32).value
     / (1e16 * 32 * 32 / (16 * 32 * 32))),
    ("qkpv_pooled", "N²d/√M", lambda: B.qkpv_pooled(N=10**7, d=1024, M=64).value
     / (1e14 * 1024 / 8)),
    ("qkpv_levelled", "N²d/√M", lambda: B.qkpv_levelled(N=10**7, d=1024, M=64).value
     / (1e14 * 1024 / 8)),
    ("qkpv_levelled", "N²d²/M at M = d²", lambda: B.qkpv_levelled(N=10**8, d=64, M=4096).value
     / (1e16 * 64 * 64 / 4096)),
]

PAGES = {"docs/planner.md": None, "docs/bounds.md": None}


def _stated(text: str, name: str, unit: str) -> list[str]:
    """The constants printed as ``C·unit`` between a mention of the bound (```name``) and the
    next bound named in backticks (or the end of the line)."""
    out = []
    for m in re.finditer(r"`" + re.escape(name) + r"[`(]", text):
        rest = text[m.end():]
        nxt = re.search(r"`[a-z_]+[`(]|\n\|", rest)
        seg = rest[:nxt.start()] if nxt else rest
        out += re.findall(r"(\d+\.\d+)·" + re.escape(unit), seg)
    return out


@pytest.mark.parametrize("name,unit,value", CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def test_documented_constants_are_the_codes(name, unit, value):
    computed = value()
    seen = 0
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for c in _stated(text, name, unit):
            digits = len(c.split(".")[1])
            assert math.isclose(float(c), computed, abs_tol=10.0 ** -digits), \
                f"{page} states {c}·{unit} for {name}; the code gives {computed:.4f}"
            seen += 1
    assert seen, f"no page states {name}'s constant ·{unit}"
