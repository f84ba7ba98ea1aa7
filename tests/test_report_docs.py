"""The README's reproduction numbers and figures, and docs/report/, match what
docs/gen_report.py generates: the counts are recomputed here from a dry run of the paper preset
(no sweep), so a preset or an expansion that changes fails this test until the generator is
rerun."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "report"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_report", ROOT / "docs" / "gen_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_block_is_the_generators_output():
    gen = _gen()
    total, to_run, skipped = gen.preset_counts()
    print("paper preset:", total, "configurations,", to_run, "run,", skipped, "skipped")
    assert total == to_run + skipped and to_run > 0
    md = (REPORT / "REPORT.md").read_text()
    want = gen.readme_block(total, to_run, skipped, gen.claims_line(md))
    assert want in (ROOT / "README.md").read_text()


def test_docs_report_holds_the_presets_rows_and_every_claim_passes():
    gen = _gen()
    total, to_run, skipped = gen.preset_counts()
    md = (REPORT / "REPORT.md").read_text()
    assert f"Database `attnio-results.sqlite`: {total} rows ({to_run} ok, {skipped} skipped)" in md
    claims = re.findall(r"\*\*(PASS|FAIL|not available)\*\* \|$", md, re.M)
    assert claims and set(claims) == {"PASS"}
    assert "approximate attention: every measured count >= every applicable explicit" in md


def test_readme_figures_exist_in_every_format_and_the_html_embeds_them():
    gen = _gen()
    readme = (ROOT / "README.md").read_text()
    for name in gen.README_FIGURES:
        assert f"(docs/report/{name})" in readme
        assert (REPORT / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (REPORT / name.replace(".png", ".pdf")).read_bytes()[:5] == b"%PDF-"
    page = (REPORT / "index.html").read_text()
    assert page.count("src='data:image/png;base64,") == len(list(REPORT.glob("*.png")))
