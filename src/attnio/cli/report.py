"""``attnio report``: figures, fits and the reproduction table from a results database."""

from __future__ import annotations

NAME = "report"
HELP = "build the reproduction report (figures, fits, REPORT.md, index.html) from a results database"


def _count(flag: str):
    """An argparse type: an integer >= 0, or one line naming ``flag``."""
    import argparse

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = -1
        if v < 0:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer >= 0, got {text!r}")
        return v

    return parse


def add_arguments(p) -> None:
    p.add_argument("--db", default="attnio-results.sqlite",
                   help="results database (default attnio-results.sqlite)")
    p.add_argument("--out", default="attnio-report", help="output directory (default attnio-report)")
    p.add_argument("--formats", default="png,pdf",
                   help="figure formats besides PNG, a comma list of png, pdf, svg "
                        "(default png,pdf)")
    p.add_argument("--max-figures", dest="max_figures", type=_count("--max-figures"),
                   default=None, metavar="N",
                   help="draw at most N figures (default: no cap); REPORT.md lists every "
                        "figure left out")
    p.add_argument("--figs-per-axis", dest="figs_per_axis", type=_count("--figs-per-axis"),
                   default=2, metavar="N",
                   help="figures per setting and swept axis, the fixed values with the most "
                        "points first (default 2); the others are listed in REPORT.md")
    p.add_argument("--all-bounds", dest="all_bounds", action="store_true",
                   help="draw every explicit lower bound by name (default: the best one)")
    p.add_argument("--no-html", dest="html", action="store_false",
                   help="do not write index.html")
    p.add_argument("--quiet", action="store_true", help="print nothing on success, no progress")


def main(args) -> int:
    from ..core.progress import Progress
    from ..experiments.report import build_report

    with Progress("attnio report: drawing figures", enabled=False if args.quiet else None,
                  unit="figures") as bar:
        rep = build_report(args.db, args.out, formats=args.formats, html_page=args.html,
                           figs_per_axis=args.figs_per_axis, max_figures=args.max_figures,
                           all_bounds=args.all_bounds, progress=bar)
    if not args.quiet:
        for c in rep.covered:
            print(f"  {c.status.upper():4s} {c.claim}: {c.measured}")
        if rep.not_covered:
            print(f"  not covered by this grid: {len(rep.not_covered)} claims (see REPORT.md)")
        npass = sum(c.status == "pass" for c in rep.covered)
        left = (f" ({len(rep.not_drawn)} more listed in REPORT.md, not drawn)"
                if rep.not_drawn else "")
        print(f"{npass} of {len(rep.covered)} covered claims pass; {len(rep.figures)} figures"
              f"{left}, best configurations for {len(rep.settings)} setting(s), REPORT.md, "
              f"best.csv{' and index.html' if args.html else ''} in {rep.out}")
    return 0
