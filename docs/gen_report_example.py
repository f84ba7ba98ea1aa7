"""Generate docs/report-example/: the report of a small user sweep (an example of what
``attnio report`` makes of a grid that is not the paper's).

    python docs/gen_report_example.py

The sweep is the TOML grid below (written next to the report as ``grid.toml``), run in count mode
into a temporary database exactly as ``attnio sweep --config docs/report-example/grid.toml`` would:
two algorithms, two head dimensions, a few N and M, with and without the causal mask, plus a
grouped-query setting (8 query heads sharing 2 KV heads).  The report keeps one figure per setting
and swept axis, PNG only, no HTML page (``attnio report`` writes both by default), so that the
committed example stays small; its REPORT.md, best.csv and fits.json are as the command writes
them.  Everything in the directory is regenerated: nothing in it is typed by hand.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from attnio.experiments.report import ReportOptions, build_report
from attnio.experiments.sweep import grids_from_toml, run_sweep

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "report-example")
GRID = """\
# a user's own sweep: two algorithms, two head dimensions, a few N and M, both masks
algo = "flash2,standard"
N = "512:4096:x2"
d = "32,64"
M = "1024:65536:x4"
causal = "both"

# grouped-query attention: 8 query heads share 2 key/value heads, causal
[[grid]]
algo = "flash2,standard"
N = "512:4096:x2"
d = "64"
M = "4096,65536"
causal = "true"
heads = 8
kv_heads = 2
"""


def main() -> None:
    t0 = time.perf_counter()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    grid_path = os.path.join(OUT, "grid.toml")
    with open(grid_path, "w") as f:
        f.write(GRID)
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "example.sqlite")
        summary = run_sweep(grids_from_toml(grid_path), db, jobs=2)
        print(summary)
        rep = build_report(db, OUT, options=ReportOptions(("png",), html_page=False,
                                                           figs_per_axis=1))
    print(f"{len(rep.figures)} figures, {len(rep.best)} best configurations in "
          f"{len(rep.settings)} settings, {sum(c.status == 'pass' for c in rep.covered)} of "
          f"{len(rep.covered)} covered claims pass -> {OUT} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
