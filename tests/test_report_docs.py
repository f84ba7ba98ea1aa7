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
    claims = re.findall(r"\*\*(PASS|FAIL|not covered)\*\* \|$", md, re.M)
    assert claims and set(claims) == {"PASS"}
    # the exponents in their stated asymptotic ranges, and FlashAttention-2 against the bounds
    assert "| flash2: I/O ∝ 1/M for 4d² <= M <= N·d/4 |" in md
    assert "| flash2 ÷ best explicit bound <= 3 for M >= d² |" in md
    assert "approximate attention: every measured count >= every applicable explicit" in md


def test_readme_figures_exist_in_every_format_and_the_html_embeds_them():
    gen = _gen()
    readme = (ROOT / "README.md").read_text()
    # the README's command draws what the generator draws
    assert f"attnio report --out docs/report --figs-per-axis {gen.FIGS_PER_AXIS}" in readme
    for name in gen.README_FIGURES:
        assert f"(docs/report/{name})" in readme
        assert (REPORT / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (REPORT / name.replace(".png", ".pdf")).read_bytes()[:5] == b"%PDF-"
    page = (REPORT / "index.html").read_text()
    assert page.count("src='data:image/png;base64,") == len(list(REPORT.glob("*.png")))


def test_readme_figures_plot_what_a_small_count_run_gives_now(tmp_path):
    """The numbers behind the README's figures (docs/report/figures.json) equal those a
    count-mode run of just their grid points gives now: a change to a count, a bound or the
    preset that the committed figures do not show fails here (no figure is drawn)."""
    import dataclasses
    import json

    from attnio.experiments.report import for_report
    from attnio.experiments.report.figures import figure_data
    from attnio.experiments.report.plan import _count_rows, _groups
    from attnio.experiments.report.rows import _DEFAULT_SETTING, _setting
    from attnio.experiments.store import ResultsStore
    from attnio.experiments.sweep import PRESETS, run_sweep

    gen = _gen()
    wanted = {"io_vs_M_N16384_d64.png": ("M", (16384, 64)),
              "io_vs_N_d64_M4096.png": ("N", (64, 4096))}
    assert set(wanted) == set(gen.README_FIGURES)
    n_grid, m_grid = PRESETS["paper"][0], PRESETS["paper"][2]
    assert 4096 in n_grid.M and 64 in m_grid.d and 16384 in m_grid.N
    db = tmp_path / "p.sqlite"
    run_sweep([dataclasses.replace(n_grid, M=(4096,)), dataclasses.replace(m_grid, d=(64,))],
              db, jobs=1, progress=False)
    with ResultsStore(db, readonly=True) as st:
        rows = for_report(st.rows(decode=True))
    rows = _count_rows([r for r in rows if r["status"] == "ok" and r.get("total")
                        and _setting(r) == _DEFAULT_SETTING])
    committed = {f["name"]: f for f in json.loads((REPORT / "figures.json").read_text())}
    for name, (axis, fixed) in wanted.items():
        now = json.loads(json.dumps(figure_data(_groups(rows, axis)[fixed], axis)))
        print(name, {k: len(v) for k, v in now.items()})
        assert now == committed[name]["data"], name
        assert "best explicit lower bound" in now and len(now) >= 6
