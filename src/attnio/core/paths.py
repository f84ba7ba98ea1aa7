"""The files a command reads and writes, checked before anything is read or written.

Every path a verb of the command line writes goes through :func:`check_output_path` first, and
every file it reads through :func:`check_input_file`, so that no command can destroy a result or
hang on a file that is not one:

* an output that is one of the command's inputs (the same file, or a link to it: same device
  and inode, or the same real path) is refused, so ``attnio sweep export --db r.sqlite --out
  r.sqlite`` cannot replace the database by its export;
* an output, or an input, that is a device, a named pipe (FIFO), a socket, or a directory where a
  file is expected (a file where a directory is expected) is refused: only regular files are
  read, and only regular files are replaced;
* the check uses ``os.stat`` (which never opens the file), so a named pipe is refused instead of
  blocking the reader forever, and nothing is created next to a device (SQLite's ``-journal``
  beside ``/dev/null``).

A replaced file is written whole beside it and renamed over it (:func:`written_whole`), in the
same directory (that of the link's target, for a symbolic link), so a failed write leaves the old
file as it was.

Each refusal is a :class:`~attnio.core.errors.ParameterError` of one line naming the flag (or
argument) and the path:

>>> check_output_path("/dev/null", "--out")
Traceback (most recent call last):
...
attnio.core.errors.ParameterError: --out /dev/null is a character device, not a regular file; give a file name
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator

from .errors import ParameterError

__all__ = ["check_input_file", "check_output_path", "kind_of", "written_whole"]


def _param(flag: str) -> str:
    """The API name of a flag (``--din`` -> ``din``; an argument name stays as it is)."""
    return flag[2:].replace("-", "_") if flag.startswith("--") else flag


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (``"a regular file"``, ``"a named pipe
    (FIFO)"`` ...)."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                        (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return "not a regular file"


def _stat(path: str, flag: str) -> os.stat_result | None:
    """``os.stat(path)`` (following links), None when nothing is there; a loop or an unreadable
    folder refused naming ``flag``."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if os.path.islink(path):
            raise ParameterError(f"{flag} {path} is a symbolic link that leads nowhere "
                                 f"({e.strerror or e})", param=_param(flag)) from None
        raise ParameterError(f"{flag} {path}: {e.strerror or e}", param=_param(flag)) from None


def check_input_file(path: str | os.PathLike[str], flag: str, *, required: bool = True
                     ) -> os.stat_result | None:
    """Refuse an input that is not a regular file (a named pipe, a device, a socket, a
    directory), before it is opened: a reader never blocks on a FIFO.  ``required=False``: a path
    where nothing exists yet passes (a database a sweep creates); returns its ``os.stat`` (None
    when it does not exist and is not required)."""
    path = os.fspath(path)
    if not path:
        raise ParameterError(f"{flag} must be a file name, got ''", param=_param(flag))
    st = _stat(path, flag)
    if st is None:
        if os.path.islink(path):
            raise ParameterError(f"{flag} {path} is a symbolic link to {os.readlink(path)!r}, "
                                 "which does not exist", param=_param(flag))
        if required:
            raise ParameterError(f"{flag} {path}: no such file", param=_param(flag))
        return None
    if not stat.S_ISREG(st.st_mode):
        raise ParameterError(f"{flag} {path} is {kind_of(st.st_mode)}, not a regular file; "
                             "give a file name", param=_param(flag))
    return st


def _same(a: str, sa: os.stat_result | None, b: str) -> bool:
    """Whether paths ``a`` (stat ``sa``) and ``b`` are one file: same device and inode, or the
    same real path (a file yet to be created through a link)."""
    try:
        sb = os.stat(b)
    except OSError:
        sb = None
    if sa is not None and sb is not None and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    return os.path.realpath(a) == os.path.realpath(b)


def check_output_path(path: str | os.PathLike[str], flag: str, *,
                      inputs: Iterable[tuple[str, str | os.PathLike[str] | None]] = (),
                      directory: bool = False) -> None:
    """Refuse an output before anything is written: one of the command's ``inputs`` (pairs of
    flag and path; the same file or a link to it), something that is not a regular file (a
    device, a named pipe, a socket; a directory where a file is expected, a file where
    ``directory=True`` expects a directory), a dangling link, or a path whose folder does not
    exist or is not writable."""
    path = os.fspath(path)
    if not path:
        raise ParameterError(f"{flag} must be a file name, got ''", param=_param(flag))
    st = _stat(path, flag)
    for in_flag, in_path in inputs:
        if in_path is None or not os.fspath(in_path):
            continue
        if _same(path, st, os.fspath(in_path)):
            raise ParameterError(f"{flag} {path} is the same file as {in_flag} "
                                 f"{os.fspath(in_path)}, which "
                                 "this command reads; writing it would destroy it: give another "
                                 f"{flag}", param=_param(flag))
    if st is None and os.path.islink(path):
        raise ParameterError(f"{flag} {path} is a symbolic link to {os.readlink(path)!r}, which "
                             "does not exist; give another name", param=_param(flag))
    if st is not None:
        if directory and not stat.S_ISDIR(st.st_mode):
            raise ParameterError(f"{flag} {path} is {kind_of(st.st_mode)}, not a directory; give "
                                 "a directory name", param=_param(flag))
        if not directory and not stat.S_ISREG(st.st_mode):
            hint = "give a file name" + (" inside it" if stat.S_ISDIR(st.st_mode) else "")
            raise ParameterError(f"{flag} {path} is {kind_of(st.st_mode)}, not a regular "
                                 f"file; {hint}", param=_param(flag))
        if not os.access(path, os.W_OK) and not directory:
            raise ParameterError(f"{flag} {path} is not writable", param=_param(flag))
    folder = os.path.dirname(os.path.realpath(path))
    if st is None or not directory:
        if not os.path.isdir(folder):
            raise ParameterError(f"{flag} {path}: its folder {folder} does not exist",
                                 param=_param(flag))
        if not os.access(folder, os.W_OK):
            raise ParameterError(f"{flag} {path}: its folder {folder} is not writable",
                                 param=_param(flag))


@contextlib.contextmanager
def written_whole(flag: str, path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path beside ``path`` to write to; renamed over ``path`` once written whole
    (in the folder of a link's target: the link stays a link).  Refused as
    :func:`check_output_path` refuses (call that first, with the command's inputs); a failed write
    (a full disk, a file too large, a read-only file system) removes the partial file and is
    refused in one line naming ``flag`` and ``path``, the old file as it was."""
    path = os.fspath(path)
    check_output_path(path, flag)
    target = os.path.realpath(path)
    folder, name = os.path.split(target)
    stem, ext = os.path.splitext(name)
    tmp = os.path.join(folder, f".{stem}.partial-{os.getpid()}{ext}")
    try:
        yield tmp
        os.replace(tmp, target)
    except OSError as e:
        raise ParameterError(f"{flag} {path}: cannot write it ({e.strerror or e}); nothing was "
                             "left behind", param=_param(flag)) from None
    finally:
        with contextlib.suppress(OSError):
            if os.path.lexists(tmp):
                os.remove(tmp)
