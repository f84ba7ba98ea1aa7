"""``attnio report``: figures, fits and the reproduction table from a results database."""

from __future__ import annotations

NAME = "report"
HELP = "build the reproduction report (figures, fits, REPORT.md, index.html) from a results database"


def add_arguments(p) -> None:
    p.add_argument("--db", default="attnio-results.sqlite",
                   help="results database (default attnio-results.sqlite)")
    p.add_argument("--out", default="attnio-report", help="output directory (default attnio-report)")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")


def main(args) -> int:
    from ..experiments.report import build_report

    rep = build_report(args.db, args.out)
    if not args.quiet:
        for c in rep.covered:
            print(f"  {c.status.upper():4s} {c.claim}: {c.measured}")
        if rep.not_covered:
            print(f"  not covered by this grid: {len(rep.not_covered)} claims (see REPORT.md)")
        npass = sum(c.status == "pass" for c in rep.covered)
        print(f"{npass} of {len(rep.covered)} covered claims pass; {len(rep.figures)} figures, "
              f"best configurations for {len(rep.settings)} setting(s), REPORT.md, best.csv "
              f"and index.html in {rep.out}")
    return 0
