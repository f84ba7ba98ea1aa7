"""Regenerate the paper reproduction: docs/report/ (figures, REPORT.md, index.html, best.csv,
fits.json, figures.json) and the README's numbers and figures, in one command:

    python docs/gen_report.py            # about a minute on two cores
    python docs/gen_report.py --check    # only check that the README matches (no sweep)

It runs ``attnio sweep --preset paper`` into a temporary database (the README's command writes
``attnio-results.sqlite`` in the working directory instead; the rows are the same), builds the
report into docs/report/ exactly as ``attnio report --out docs/report --figs-per-axis 3`` would,
and rewrites the README block between the ``gen_report`` markers: the number of configurations
the preset expands to (counted by :func:`attnio.experiments.sweep.dry_run`, as ``attnio sweep
--preset paper --dry-run`` prints it), how many run and how many are stored as skipped, the
claims' results, and the figures shown.  tests/test_report_docs.py recomputes the counts from a
dry run (no sweep) and the numbers behind the README's figures from a count-mode run of just
their grid points (a few seconds), and fails if the README, docs/report/REPORT.md or
docs/report/figures.json drift from them.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "report")
README = os.path.join(ROOT, "README.md")
BEGIN, END = "<!-- gen_report: begin -->", "<!-- gen_report: end -->"
FIGS_PER_AXIS = 3
#: the figures the README shows (each must be one the report draws)
README_FIGURES = ("io_vs_M_N16384_d64.png", "io_vs_N_d64_M4096.png")


def preset_counts() -> tuple[int, int, int]:
    """(configurations, to run, stored as skipped) of the paper preset: a dry run, no sweep."""
    from attnio.experiments.sweep import PRESETS, dry_run

    plan = dry_run(PRESETS["paper"], None)
    return plan.total, plan.to_run, plan.skipped


def readme_block(total: int, to_run: int, skipped: int, claims_line: str) -> str:
    figs = "\n\n".join(f"![{name[:-4]}](docs/report/{name})" for name in README_FIGURES)
    return (f"{BEGIN}\n"
            f"The preset expands to **{total:,} configurations**: {to_run:,} run and "
            f"{skipped:,} are stored as skipped rows with the reason (an approximate algorithm "
            "in a grid without an error target, or an M below an algorithm's minimum for that "
            f"d). {claims_line}\n\n{figs}\n{END}")


def claims_line(report_md: str) -> str:
    """'All N claims the grid covers pass.' from a REPORT.md (or what failed)."""
    m = re.search(r"^(\d+) of (\d+) covered claims pass\.$", report_md, re.M)
    if not m:
        raise SystemExit("gen_report: REPORT.md has no claims summary line")
    npass, n = int(m.group(1)), int(m.group(2))
    if npass == n:
        return f"All {n} claims the grid covers pass (docs/report/REPORT.md)."
    return f"{npass} of {n} claims the grid covers pass (docs/report/REPORT.md)."


def replace_block(text: str, block: str) -> str:
    i, j = text.index(BEGIN), text.index(END) + len(END)
    return text[:i] + block + text[j:]


def main(argv: list[str]) -> int:
    total, to_run, skipped = preset_counts()
    if "--check" in argv:
        with open(os.path.join(OUT, "REPORT.md")) as f:
            want = readme_block(total, to_run, skipped, claims_line(f.read()))
        with open(README) as f:
            ok = want in f.read()
        print("README matches the generator" if ok else "README drifted: run docs/gen_report.py")
        return 0 if ok else 1
    from attnio.experiments.report import ReportOptions, build_report
    from attnio.experiments.sweep import PRESETS, run_sweep

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "attnio-results.sqlite")
        summary = run_sweep(PRESETS["paper"], db, jobs=2, progress=False)
        print(summary)
        if os.path.isdir(OUT):
            shutil.rmtree(OUT)
        rep = build_report(db, OUT, options=ReportOptions(("png", "pdf"),
                                                           figs_per_axis=FIGS_PER_AXIS))
    missing = [f for f in README_FIGURES if f not in rep.figures]
    if missing:
        raise SystemExit(f"gen_report: the report drew no {', '.join(missing)}")
    if rep.rows != total:
        raise SystemExit(f"gen_report: the sweep stored {rep.rows} rows, the dry run counts {total}")
    with open(os.path.join(OUT, "REPORT.md")) as f:
        line = claims_line(f.read())
    with open(README) as f:
        text = f.read()
    with open(README, "w") as f:
        f.write(replace_block(text, readme_block(total, to_run, skipped, line)))
    print(f"{rep.rows} rows, {len(rep.figures)} figures; {line} -> {OUT} and README.md "
          f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
