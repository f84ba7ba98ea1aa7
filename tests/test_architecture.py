"""The README's Architecture section is true of the tree, and the documentation is indexed.

* the layer diagram names every package of ``src/attnio`` once, in the order of the import-linter
  ``layers`` contract of pyproject.toml (top to bottom, siblings on one line), and the bullet
  list describes each package as ``name/``;
* the README stays short (at most 250 lines: the detail lives in docs/);
* docs/index.md links every page of docs/.
"""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib  # novermin (guarded: the tomli backport below on 3.10)
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "attnio"


def _section(text: str, title: str) -> str:
    m = re.search(rf"(?ms)^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text)
    assert m, f"README has no '## {title}' section"
    return m.group(1)


def _packages() -> set[str]:
    return {p.parent.name for p in SRC.glob("*/__init__.py")}


def _contract_layers() -> list[set[str]]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = conf["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    return [{name.strip() for name in layer.split("|")} for layer in layers]


def test_architecture_diagram_is_the_layer_contract_and_the_tree():
    arch = _section((ROOT / "README.md").read_text(encoding="utf-8"), "Architecture")
    diagram = re.search(r"```\n(.*?)```", arch, re.S).group(1)
    rows = []
    for line in diagram.splitlines():
        # "name  what it is", or "a │ b │ c  (independent ...)": the first word of each part
        rows.append({part.split()[0] for part in line.replace("└", "").split("│")})
    assert rows == _contract_layers(), "the diagram's rows are not the contract's layers"
    assert set().union(*rows) == _packages(), "the diagram does not name every package"


def test_architecture_list_describes_every_package():
    arch = _section((ROOT / "README.md").read_text(encoding="utf-8"), "Architecture")
    described = set(re.findall(r"^- \*\*`(\w+)/`\*\*", arch, re.M))
    assert described == _packages()


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_docs_index_links_every_page():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages <= linked, f"docs/index.md misses {sorted(pages - linked)}"


def test_tests_mirror_the_package_tree():
    """Every folder of tests/ (but data/) is a package of src/attnio, and no test file is left at
    the top but the project-wide checks."""
    tests = ROOT / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders - {"data"} <= _packages(), sorted(folders - {"data"} - _packages())
    top = {p.name for p in tests.glob("test_*.py")}
    assert top <= {"test_architecture.py", "test_docs_commands.py", "test_doctests.py",
                   "test_packaging.py", "test_report_docs.py"}, sorted(top)
