"""``attnio report``: figures, fits and the reproduction table from a results database."""

from __future__ import annotations

from ..core import ParameterError, Progress

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


def _dpi(text: str) -> int:
    """An argparse type: --dpi, an integer in [50, 1200]."""
    import argparse

    from ..experiments import DPI_RANGE

    lo, hi = DPI_RANGE
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"--dpi must be an integer in [{lo}, {hi}], got "
                                         f"{text[:40]!r}")
    return v


#: The files a report writes into --out besides its figures (a --db of one of these names inside
#: --out would be replaced by the report).
_REPORT_FILES = ("REPORT.md", "best.csv", "figures.json", "fits.json", "index.html")


def check_paths(db: str, out: str) -> None:
    """--db must be a regular file and --out a directory (or nothing yet), not the --db, not a
    device, a named pipe or a file; a --db inside --out that the report would replace is
    refused too.  Checked before anything is read or written."""
    import os

    from .common import check_input_file, check_output_path

    check_input_file(db, "--db", required=False)  # missing: the store says how to make one
    check_output_path(out, "--out", inputs=[("--db", db)], directory=True)
    folder, name = os.path.split(os.path.realpath(db))
    if os.path.isdir(out) and folder == os.path.realpath(out) and (
            name in _REPORT_FILES or name.endswith((".png", ".pdf", ".svg"))):
        raise ParameterError(f"--db {db} is inside --out {out}, where the report writes {name}: "
                             "writing it would destroy it: give another --out", param="db")


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
    p.add_argument("--dpi", type=_dpi, default=None, metavar="N",
                   help="resolution of the PNG figures, 50 to 1200 dots per inch (default 120)")
    p.add_argument("--all-bounds", dest="all_bounds", action="store_true",
                   help="draw every explicit lower bound by name (default: the best one)")
    p.add_argument("--no-html", dest="html", action="store_false",
                   help="do not write index.html")
    p.add_argument("--quiet", action="store_true", help="print nothing on success, no progress")


def main(args) -> int:
    from ..experiments import DEFAULT_DPI, ReportOptions, build_report
    from .common import flag_message

    try:
        check_paths(args.db, args.out)
        with Progress("attnio report: drawing figures", enabled=False if args.quiet else None,
                      unit="figures") as bar:
            options = ReportOptions(args.formats, args.html, args.figs_per_axis,
                                    args.max_figures, args.all_bounds,
                                    DEFAULT_DPI if args.dpi is None else args.dpi)
            rep = build_report(args.db, args.out, options=options, progress=bar)
    except ParameterError as e:  # the library's argument names (out, db ...) as flags
        raise ParameterError(flag_message(e), param=e.param) from None
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
