"""Where a result came from: attnio's version, the git commit of the checkout it runs from, the
Python, the platform and the host, and when (recorded by a sweep in its database, shown by the
report)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess

from .version import __version__

__all__ = ["git_commit", "provenance"]


def git_commit() -> str | None:
    """The commit of the git checkout attnio is imported from (``+dirty`` when it has
    uncommitted changes to tracked files), or None when it is not one (an installed wheel) or
    git is not at hand."""
    here = os.path.dirname(os.path.abspath(__file__))
    d = here
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            break
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent
    try:
        head = subprocess.run(["git", "-C", d, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=5, stdin=subprocess.DEVNULL)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", d, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5,
                               stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = head.stdout.strip()
    return commit + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def provenance() -> dict[str, str]:
    """``{"attnio", "git_commit", "python", "platform", "host", "at"}`` of this process (the
    commit "none" outside a git checkout; "at" in UTC, to the second)."""
    return {
        "attnio": __version__,
        "git_commit": git_commit() or "none",
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "host": platform.node() or "unknown",
        "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
