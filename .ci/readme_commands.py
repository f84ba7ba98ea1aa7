"""Print one of the README's two set-up commands, verbatim: ``install`` (the first line of the
README's first code block) or ``test`` (its second line).

.ci/run runs exactly these, so CI runs what a new user copies; tests/test_packaging.py checks that
the block has this shape (two lines: an install that runs ``attnio``, and ``python -m pytest``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commands(text: str) -> tuple[str, str]:
    """(install, test): the two lines of the first fenced code block of ``text``."""
    m = re.search(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)
    if m is None:
        raise SystemExit("readme_commands: README.md has no code block")
    lines = [line for line in m.group(1).splitlines() if line.strip()]
    if len(lines) != 2:
        raise SystemExit(f"readme_commands: README's first code block must have 2 lines, "
                         f"has {len(lines)}")
    return lines[0], lines[1]


def main(argv: list[str]) -> int:
    which = argv[1] if len(argv) == 2 else ""
    if which not in ("install", "test"):
        print("usage: readme_commands.py install|test", file=sys.stderr)
        return 2
    install, test = commands((ROOT / "README.md").read_text(encoding="utf-8"))
    print(install if which == "install" else test)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
