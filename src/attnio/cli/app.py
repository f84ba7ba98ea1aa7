"""The ``attnio`` command line: argument parsing and printing only.

Each verb lives in a module of this package that defines ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``main(args) -> int`` (and, when its flags name parameters
beyond :data:`~attnio.cli.common.FLAGS`, ``flag_names(args) -> dict``); it parses its flags,
calls attnio's public API (for most verbs one function) and prints the result.  The verbs are
listed in :data:`COMMANDS`.  Errors of the library print one line on stderr, in the flags the
user typed (:func:`~attnio.cli.common.flag_message`), and exit with code 2 (``--debug``
shows the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType

from ..core import AttnioError, __version__
from . import bound, cp, gpu, pebble, plan, report, run, sweep, trace, verify
from .common import flag_message, memory_note

#: The verbs, in the order ``attnio --help`` lists them.
COMMANDS: tuple[ModuleType, ...] = (bound, cp, gpu, pebble, plan, report, run, sweep, trace,
                                    verify)


#: Verbs whose errors are worded for where the value came from (a TOML key, a database file),
#: printed as they are rather than rewritten in flags.
OWN_WORDS = frozenset({"sweep", "report"})


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="attnio", description="I/O complexity of attention: simulate, bound, plan.")
    parser.add_argument("--version", action="version", version=f"attnio {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for mod in COMMANDS:
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP))
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks on errors")
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main, _flag_names=getattr(mod, "flag_names", None))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # usage errors (exit 2), --help and --version (exit 0)
        return int(e.code or 0)
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    try:
        return int(args._main(args) or 0)
    except BrokenPipeError:  # `attnio ... | head`: the reader left; not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except (AttnioError, ValueError, OSError, MemoryError) as e:
        # the library's own errors, the file system's and an estimate that fell short; a
        # ValueError only from the verbs that word their own input errors (a TOML file's); any
        # other exception is a bug and shows its traceback
        if getattr(args, "debug", False):
            raise
        if isinstance(e, ValueError) and not isinstance(e, AttnioError) \
                and args.command not in OWN_WORDS:
            raise
        if isinstance(e, MemoryError):  # an estimate fell short: say so, in one line
            msg = ("ran out of memory; try --count-only or a smaller --N (--debug shows where)")
        elif args.command in OWN_WORDS:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        else:
            names = getattr(args, "_flag_names", None)  # the verb's own flags, if it has any
            msg = flag_message(e, names(args) if names is not None else None)
        if "--M " in msg or "--M:" in msg or "--M=" in msg:
            note = memory_note(args)  # --M came from --device or --M-bytes
            if note:
                msg += f" ({note})"
        print(f"attnio {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"attnio {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
