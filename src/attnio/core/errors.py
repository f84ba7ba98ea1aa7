"""The library's exceptions.

Every error attnio raises on purpose derives from :class:`AttnioError`, so callers can catch the
library's own failures in one clause.  Bad parameters raise :class:`ParameterError`, which is also
a :class:`ValueError`, and its message names the parameter, the value given and the allowed range.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable


class AttnioError(Exception):
    """Base class of every error raised by attnio on purpose."""


class ParameterError(AttnioError, ValueError):
    """A parameter is outside its allowed range (names the parameter, the value and the range).

    ``param`` (optional) is the argument's API name (``"kv_heads"``); the command line uses it to
    print the flag the user typed (``--kv-heads``) instead.  A message that names other
    parameters too is built with :meth:`worded` from a template whose ``{fields}`` are parameter
    names, so that the command line can render each with its flag (:meth:`render`) without
    reading the wording.

    >>> e = ParameterError.worded("{window} needs a causal mask: pass {causal}", param="window",
    ...                           causal="causal=True")
    >>> str(e), e.render({"window": "--window", "causal": "--causal"}.get)
    ('window needs a causal mask: pass causal=True', '--window needs a causal mask: pass --causal')
    """

    template: str | None = None
    api: dict[str, str] | None = None

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.param = param

    @classmethod
    def worded(cls, template: str, *, param: str | None = None, **api: str) -> ParameterError:
        """An error whose message is ``template`` with each ``{name}`` field the parameter's
        API name, or the API phrase ``api[name]`` that sets it (``causal="causal=True"``).
        Literal braces in the template are doubled."""
        err = cls(template.format_map(_Names(api.get)), param=param)
        err.template, err.api = template, dict(api)
        return err

    def render(self, name_of: Callable[[str], str | None]) -> str:
        """The message with each parameter named by ``name_of(name)`` (None: its API word)."""
        if self.template is None:
            return str(self)
        api = self.api or {}
        return self.template.format_map(_Names(lambda k: name_of(k) or api.get(k)))

    def prefixed(self, prefix: str, *, param: str | None) -> ParameterError:
        """This error, ``prefix`` first (literal text), about ``param``."""
        esc = prefix.replace("{", "{{").replace("}", "}}")
        if self.template is None:
            return ParameterError(prefix + str(self), param=param)
        return ParameterError.worded(esc + self.template, param=param, **(self.api or {}))


class _Names(dict[str, str]):
    """``{name}`` fields of a template: ``lookup(name)``, or the name itself."""

    def __init__(self, lookup: Callable[[str], str | None]):
        super().__init__()
        self.lookup = lookup

    def __missing__(self, key: str) -> str:
        return self.lookup(key) or key


class CapacityError(AttnioError):
    """A step would make fast memory hold more than M words.

    Attributes
    ----------
    step : str
        The step that was refused (e.g. ``"load K[0:64, 0:64]"``).
    occupancy : int
        Words resident in fast memory before the step.
    needed : int
        Words the step would add.
    M : int
        The capacity of fast memory in words.
    """

    param = "M"  # the capacity it concerns (the command line names its flag)
    template: str

    def __init__(self, step: str, occupancy: int, needed: int, M: int):
        self.step = step
        self.occupancy = occupancy
        self.needed = needed
        self.M = M
        self.template = self._template(step.replace("{", "{{").replace("}", "}}"))
        super().__init__(self.render(lambda k: None))

    def _template(self, step: str) -> str:
        if self.occupancy == 0:  # refused up front: nothing is resident yet
            return f"{step} needs {self.needed:,} words of fast memory, more than {{M}}={self.M}"
        return (f"{step} needs {self.needed:,} more words but fast memory already holds "
                f"{self.occupancy:,} of {{M}}={self.M} words ({self.occupancy + self.needed:,} > "
                f"{self.M})")

    def render(self, name_of: Callable[[str], str | None]) -> str:
        """The message with M named by ``name_of("M")`` (None: ``M``)."""
        return self.template.format_map(_Names(name_of))


class ScheduleError(AttnioError):
    """A schedule broke a rule of the simulator (use after free, a bulk loop that leaks tiles, ...)."""


class UnknownNameError(ParameterError, KeyError):
    """An unknown name (algorithm, bound, device); the message suggests the closest known ones.

    ``param`` is the argument that took the name (default: ``kind``)."""

    def __init__(self, kind: str, name: str, known: Iterable[str], *, param: str | None = None):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        self.name = name
        self.known = known
        self.param = param or kind
        msg = f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})"
        ValueError.__init__(self, msg)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class MissingExtraError(AttnioError, ImportError):
    """An optional dependency is not installed; the message names the extra and the pip command."""

    def __init__(self, module: str, extra: str, purpose: str):
        self.module, self.extra, self.purpose = module, extra, purpose
        super().__init__(
            f"{purpose} needs {module}, which is not installed: pip install 'attnio[{extra}]'"
        )
