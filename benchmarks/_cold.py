"""Cold calls for the benchmarks: every ``functools`` cache of the loaded attnio modules cleared.

Imported by the benchmark scripts as ``from _cold import clear_attnio_caches`` (a script's own
folder is on ``sys.path`` when it runs as ``python benchmarks/NAME.py``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable


def clear_attnio_caches(keep: Iterable[object] = ()) -> int:
    """Clear every ``functools.lru_cache``/``cache`` at module level in ``attnio.*`` except the
    ones in ``keep``; return how many were cleared."""
    kept = {id(k) for k in keep}
    n = 0
    for name, mod in list(sys.modules.items()):
        if name.startswith("attnio"):
            for v in list(vars(mod).values()):
                if isinstance(v, functools._lru_cache_wrapper) and id(v) not in kept:
                    v.cache_clear()
                    n += 1
    return n
