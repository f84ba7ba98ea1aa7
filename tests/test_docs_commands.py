"""Every command in the README and the docs runs, so the documentation cannot drift from the
program (issue 18).

* every ``attnio ...`` line of a code block (``$ attnio`` in console blocks), and every inline
  ``attnio ...`` span that is a whole command, runs through the CLI and must exit 0 (or 2 when
  the documented output is an error line, which must then match);
* the output a console block shows under a command must appear in what the command prints
  (lines marked ``...`` are elided; a float error ``max |...| =`` varies with the BLAS);
* every verb the prose names answers ``--help``;
* every ``python`` block runs (with Q, K, V and q, k, v defined as the prose assumes).

Commands that take long are marked slow (``pytest -m slow``); the rest run in the fast suite.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from attnio.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Commands documented as long (the prose says so): run only with ``-m slow``.
SLOW = (
    "attnio sweep --preset paper",
    "attnio report --out docs/report",
    "attnio sweep --N 256:16384:x2",
    "attnio sweep export",
    "attnio pebble --N 2 --d 1 --M 4",
    "attnio pebble --N 2 --d 1 --M 6",
    # the moves of an optimal pebbling (1.5 s of A*; tests/pebble runs the verb and the moves)
    "attnio pebble --matmul 2 2 2 --M 5 --moves",
    "attnio run window_square --N 4096",  # 4 s of compute (tests/algorithms runs it smaller)
    "attnio cp run",  # launches torchrun (tests/parallel runs it on P = 2 in the fast suite)
    # the windowed study of docs/bounds.md §13.3, 80 workloads planned (3 s; the claims it
    # feeds are tested on a smaller grid in tests/experiments/test_window_claims.py)
    "attnio sweep --N 1024:65536:x4 --d 64,128 --M 4096:1048576:x4 --causal true --window",
)

#: Documented commands that exit non-zero on purpose (the doc's comment says why), and the code.
EXIT_CODES = {
    # docs/hardware.md: "-> infeasible, why" (gpu score exits 1 on an infeasible config)
    "attnio gpu score --N 8192 --d 256 --config Br=128,Bc=96,stages=2,warps=12": 1,
}

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"`(attnio [^`]+)`")


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            break
        out.append(ch)
    return "".join(out).strip()


def collect() -> tuple[list[tuple[str, str, list[str]]], list[str], list[tuple[str, str]]]:
    """(commands, verbs named in prose, python blocks): each command as (where, text, the
    output lines the doc shows under it)."""
    commands: list[tuple[str, str, list[str]]] = []
    verbs: set[str] = set()
    python: list[tuple[str, str]] = []
    for path in DOCS:
        text = path.read_text()
        where = path.name
        for lang, body in _FENCE.findall(text):
            if lang == "python":
                python.append((where, body))
                continue
            lines = body.splitlines()
            if lang == "console":
                i = 0
                while i < len(lines):
                    if lines[i].startswith("$ attnio "):
                        out = []
                        j = i + 1
                        while j < len(lines) and not lines[j].startswith("$ "):
                            out.append(lines[j])
                            j += 1
                        commands.append((where, lines[i][2:].strip(), out))
                        i = j
                    else:
                        i += 1
                continue
            for line in lines:
                for part in _strip_comment(line).split("&&"):
                    part = part.strip()
                    if part.startswith("attnio "):
                        commands.append((where, part, []))
        prose = _FENCE.sub("", text).replace("\n", " ")
        for span in _INLINE.findall(prose):
            span = re.sub(r"\s+", " ", span).strip()
            words = span.split()
            if len(words) > 1 and not words[1].startswith("-"):
                verbs.add(words[1])
            whole = re.search(r"--[\w-]+ [^-\s]", span) or span.endswith(("--list", "--help"))
            if whole and not any(t in span for t in ("...", "[", "|", "FILE", "COMMAND")):
                commands.append((where, span, []))
    best: dict[str, tuple[str, str, list[str]]] = {}
    for c in commands:  # one test per command (spacing aside); the copy showing its output wins
        key = " ".join(c[1].split())
        if key not in best or (c[2] and not best[key][2]):
            best[key] = c
    return list(best.values()), sorted(verbs - {"COMMAND"}), python


COMMANDS, VERBS, PYTHON = collect()


def _marks(cmd: str):
    return [pytest.mark.slow] if cmd.startswith(SLOW) else []


def test_the_docs_have_commands_to_run():
    assert len(COMMANDS) >= 20 and "run" in VERBS and len(PYTHON) >= 3


def _check_output(shown: list[str], out: str, err: str, code: int, expect: int = 0) -> None:
    errors = [ln for ln in shown if re.match(r"attnio \w+: error:", ln)]
    if errors:
        assert code == 2, (code, out, err)
        assert err.strip() == errors[0].strip()
        return
    assert code == expect, (code, out[-2000:], err[-2000:])
    for ln in shown:
        if not ln.strip() or "max |" in ln:
            continue
        if ln.lstrip().startswith("{") and "..." in ln:  # an elided JSON object: its pairs
            got = json.loads(out.strip().splitlines()[-1])
            for key, value in re.findall(r'"(\w+)": ("[^"]*"|\{[^}]*\}|[-\w.]+)', ln):
                assert got[key] == json.loads(value), (key, got[key], value)
            continue
        assert " ".join(ln.split()) in " ".join(out.split()), ln


@pytest.fixture(scope="module")
def doc_folder(tmp_path_factory):
    folders: dict[str, Path] = {}

    def get(where: str) -> Path:
        if where not in folders:
            folders[where] = tmp_path_factory.mktemp(where.replace(".", "_"))
        return folders[where]

    return get


@pytest.mark.parametrize(
    "where,cmd,shown",
    [pytest.param(w, c, s, marks=_marks(c), id=f"{w}: {c[:70]}") for w, c, s in COMMANDS])
def test_documented_command_runs(where, cmd, shown, doc_folder, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(doc_folder(where))  # one folder per document: later commands see earlier files
    monkeypatch.setenv("ATTNIO_PROGRESS", "0")
    argv = shlex.split(cmd)[1:]
    earlier = _writers_of_its_db(where, cmd, argv)
    if earlier:  # the suite runs in a shuffled order: the sweeps it reads, in a folder of its own
        monkeypatch.chdir(tmp_path)
        for c in earlier:
            assert main(shlex.split(c)[1:]) == 0, c
    capsys.readouterr()
    code = main(argv)  # (timing claims live in benchmarks/, never in a test)
    out, err = capsys.readouterr()
    _check_output(shown, out, err, code, EXIT_CODES.get(cmd, 0))


def _writers_of_its_db(where: str, cmd: str, argv: list[str]) -> list[str]:
    """The document's earlier ``sweep`` commands into the database ``cmd`` reads (``--db X``):
    the tests run in a shuffled order, the document in its own (a sweep resumes: run again, it
    computes nothing it has)."""
    if "--db" not in argv[:-1] or "sweep" in argv[:2]:
        return []
    db = argv[argv.index("--db") + 1]
    mine = [c for w, c, _ in COMMANDS if w == where]
    earlier = mine[:mine.index(cmd)] if cmd in mine else []
    return [c for c in earlier if "sweep" in shlex.split(c)[1:3]
            and f"--db {db}" in c and "--dry-run" not in c]


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_the_docs_name_answers_help(verb, capsys):
    assert main([verb, "--help"]) == 0
    assert "usage: attnio " + verb in capsys.readouterr().out


def _namespace() -> dict:
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((128, 64)) for _ in range(3))
    ns = {"np": np, "Q": Q, "K": K, "V": V}
    try:
        import torch

        g = torch.Generator().manual_seed(0)
        ns.update({k: torch.rand(2, 64, 4, generator=g, dtype=torch.float64) * 1.2 - 0.6
                   for k in ("q", "k", "v")})
    except ImportError:
        pass
    return ns


@pytest.mark.parametrize("where,code", PYTHON, ids=[f"{w} block {i}" for i, (w, _) in
                                                    enumerate(PYTHON)])
def test_documented_python_runs(where, code, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ns = _namespace()
    if "torch" in code and "q" not in ns:
        pytest.skip("torch is not installed (pip install 'attnio[torch]')")
    exec(compile(code, where, "exec"), ns)  # noqa: S102 - the documentation's own code
