"""CI check: vermin's minimum Python for src/ is exactly the floor that requires-python states.

Reads ``requires-python`` (">=3.X") from pyproject.toml, runs vermin with that target (any
feature newer than the floor is a violation), and compares vermin's verdict with the floor: a
lower verdict means the floor claims more than the code needs, so the two must be raised or
lowered together.  Exit status 0 when they agree.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

try:
    import tomllib  # novermin (this script runs on the CI's Python; tomli below on 3.10)
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib


def main() -> int:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    spec = meta["requires-python"]
    m = re.fullmatch(r"\s*>=\s*3\.(\d+)\s*", spec)
    if m is None:
        print(f"python_floor: requires-python must read '>=3.X', got {spec!r}", file=sys.stderr)
        return 1
    floor = f"3.{m[1]}"
    cmd = ["vermin", "--no-tips", "--violations", f"--target={floor}-", "src", "tests",
           "benchmarks"]
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print(out.stdout + out.stderr, end="")
    if out.returncode != 0:
        print(f"python_floor: code needs a newer Python than requires-python {spec!r}",
              file=sys.stderr)
        return 1
    cmd = ["vermin", "--no-tips", "src"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    found = re.search(r"Minimum required versions:\s*(?:~?2\.\d+,\s*)?(3\.\d+)", out.stdout)
    if found is None:
        print(f"python_floor: no verdict from {' '.join(cmd)}:\n{out.stdout}", file=sys.stderr)
        return 1
    if found[1] != floor:
        print(f"python_floor: vermin finds src/ needs Python {found[1]}, but requires-python "
              f"says {spec!r}: make them agree", file=sys.stderr)
        return 1
    print(f"python_floor: vermin's minimum for src/ is {found[1]} = requires-python {spec!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
