"""The benchmarks' write-back into docs: a generated block between two markers replaced.

Imported by the benchmark scripts as ``from _docs import rewrite_block`` (a script's own folder is
on ``sys.path`` when it runs as ``python benchmarks/NAME.py``).
"""

from __future__ import annotations

import pathlib
import re


def rewrite_block(doc: pathlib.Path, start: str, end: str, text: str) -> None:
    """Replace what lies between the markers ``start`` and ``end`` in ``doc`` by ``text``; exit
    with one line if the markers are missing."""
    body = doc.read_text()
    pat = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pat.search(body):
        raise SystemExit(f"markers {start} .. {end} not found in {doc}")
    doc.write_text(pat.sub(lambda _m: start + "\n" + text + "\n" + end, body, count=1))
    print("rewrote", doc)
