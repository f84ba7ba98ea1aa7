"""The leading constants the documentation states for the explicit bounds are the code's: each
is recomputed from the bound function at a large N (where the lower-order terms vanish) and must
agree with the printed figure to within one unit of its last digit, in every page that prints it
(issue 36: the README and docs/bounds.md once disagreed on Theorem B′'s 3.1 / 3.2).

Two checks: the constants printed after a bound's name in backticks (``_stated``, every page), and
the constants printed in the theorems' own prose (``PROSE``: a pattern per statement).  Then every
constant of the form ``C·N²d²/M``, ``C·N²d/√M`` or ``C·mnk/√M`` in the README and docs/*.md must be
one of those, or listed in ``NOT_A_BOUND_CONSTANT`` with what it is instead, so a new figure cannot
be printed unchecked."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from attnio import bounds as B

ROOT = Path(__file__).resolve().parents[2]


def _large(f, d=32, x=16):  # the constant of N²d²/M at M = x·d², N = 10⁸
    M = x * d * d
    return f(N=10**8, d=d, M=M).value / (1e16 * d * d / M)


def _small(f, d=1024, M=64):  # the constant of N²d/√M at M = d²/2¹⁴, N = 10⁷
    return f(N=10**7, d=d, M=M).value / (1e14 * d / math.sqrt(M))


def _at_d2(f, d=64):  # the constant of N²d²/M (= N²d/√M) at M = d²
    return f(N=10**8, d=d, M=d * d).value / (1e16 * d * d / (d * d))


def _mnk():  # Theorem C: the constant of mnk/√M
    return B.matmul_potential(m=10**7, k=10**7, n=10**7, M=65536).value / (1e21 / 256)


#: (what the docs print before the constant, the unit after it, the bound, the point)
CASES = [
    ("pv_segment", "N²d²/M", lambda: _large(B.pv_segment)),
    ("pv_segment", "N²d/√M", lambda: _small(B.pv_segment, d=4096)),
    ("qkpv_pooled", "N²d/√M", lambda: _small(B.qkpv_pooled)),
    ("qkpv_levelled", "N²d/√M", lambda: _small(B.qkpv_levelled)),
    ("qkpv_levelled", "N²d²/M at M = d²", lambda: _at_d2(B.qkpv_levelled)),
    ("backward_accum", "N²d²/M", lambda: _large(B.backward_accum, x=256)),
    ("backward_pooled", "N²d/√M", lambda: _small(B.backward_pooled)),
    ("matmul_potential", "mnk/√M", _mnk),
]

#: (page, a pattern whose group 1 is a constant the theorems' prose states, the code's value)
PROSE = [
    ("docs/bounds.md", r"M ≫ d²: \*\*Q ≥ (\d+\.\d+)·N²d²/M", lambda: _large(B.pv_segment, x=256)),
    ("docs/bounds.md", r"M ≪ d²: Q ≥ (\d+\.\d+)·N²d/√M", lambda: _small(B.pv_segment, d=4096)),
    ("docs/bounds.md", r"M ≪ d²: \*\*Q ≥ (\d+\.\d+)·N²d/√M", lambda: _small(B.qkpv_pooled)),
    ("docs/bounds.md", r"\*\*Q ≥ (\d+\.\d+)·N²d²/M − O\(M\)\*\* for M ≫ d² \(was",
     lambda: _large(B.backward_accum, x=256)),
    ("docs/bounds.md", r"at M = d² (\d+\.\d+)·N²d/√M \(was", lambda: _at_d2(B.backward_accum)),
    ("docs/bounds.md", r"M ≪ d²: (\d+\.\d+)·N²d/√M \(was", lambda: _small(B.backward_accum)),
    ("docs/bounds.md", r"Value: \*\*Q ≥ (\d+\.\d+)·N²d/√M", lambda: _small(B.backward_pooled)),
    ("docs/bounds.md", r"6\.21 → (\d+\.\d+)·N²d²/M", lambda: _large(B.backward_accum, x=256)),
    ("docs/bounds.md", r"(\d+\.\d+)·mnk/√M", _mnk),
]

#: Constants of that form which are not a bound's leading constant, and what they are.
NOT_A_BOUND_CONSTANT = {
    ("docs/bounds.md", "0.64·N²d²/M"): "one term of the first-generation bound at K = 4M (§3)",
    ("docs/bounds.md", "3.10·N²d/√M"): "a measured range of Theorem B′ at x = 4..32 (§13.1)",
}

PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
UNIT = r"(N²d²/M|N²d/√M|mnk/√M)"


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


def _close(stated: str, computed: float) -> bool:
    return math.isclose(float(stated), computed, abs_tol=10.0 ** -len(stated.split(".")[1]))


@pytest.mark.parametrize("name,unit,value", CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def test_documented_constants_are_the_codes(name, unit, value):
    computed = value()
    seen = 0
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for c in _stated(text, name, unit):
            assert _close(c, computed), \
                f"{page} states {c}·{unit} for {name}; the code gives {computed:.4f}"
            seen += 1
    assert seen, f"no page states {name}'s constant ·{unit}"


@pytest.mark.parametrize("page,pattern,value", PROSE, ids=[p[1][:40] for p in PROSE])
def test_the_theorems_prose_states_the_codes_constants(page, pattern, value):
    got = re.findall(pattern, (ROOT / page).read_text(encoding="utf-8"))
    assert got, f"{page}: no statement matches {pattern!r} (reworded? update PROSE)"
    computed = value()
    for c in got:
        assert _close(c, computed), \
            f"{page} states {c} ({pattern!r}); the code gives {computed:.4f}"


def test_every_printed_constant_is_checked():
    checked: set[tuple[str, str]] = set()
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for name, unit, _ in CASES:
            unit0 = unit.split(" ")[0]
            checked |= {(page, f"{c}·{unit0}") for c in _stated(text, name, unit0)}
        for pg, pattern, _ in PROSE:
            if pg == page:
                for m in re.finditer(pattern, text):
                    checked.add((page, text[m.start(1):m.end(1)] + "·"
                                 + re.match(UNIT, text[m.end(1) + 1:]).group(1)))
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for m in re.finditer(r"(?<![\d.])(\d+\.\d+)·" + UNIT, text):
            key = (page, m.group(0))
            assert key in checked or key in NOT_A_BOUND_CONSTANT, \
                f"{page} prints {m.group(0)}, which no check recomputes from the code"
