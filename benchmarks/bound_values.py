"""Every explicit bound value of ``attnio.bounds`` on a fixed grid of shapes, as JSON: the
reference that ``tests/bounds/test_bounds_values.py`` holds the evaluation to, value for value.

The grid (:func:`grid`, a few hundred shapes, deterministic) spans tiny to huge N, head dimensions
1 to 256, M from below d² to above N·d, no mask, causal (both alignments), sliding windows and
grouped-query heads.  For each shape it records every explicit bound of
:func:`attnio.bounds.applicable_to` and :func:`attnio.bounds.backward.backward_applicable_to`
(name → value) and the (value, K, multiplier, M') that Theorems A, B, B′, D and E chose; plus
Theorem C (:func:`attnio.bounds.matmul_potential`) on a few matmul sizes.  Written once from the
scalar evaluation (issue 31: the vectorised searches must reproduce it exactly).

Run:  python benchmarks/bound_values.py [--write]   (--write: tests/data/bound_values.json)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

from attnio import bounds
from attnio.bounds import backward as BK
from attnio.bounds import exact as E
from attnio.bounds import forward as F
from attnio.bounds import levelled as L
from attnio.bounds.base import attention_shape, pairs_of
from attnio.core.workload import MAX_M

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "data", "bound_values.json")

NS = (1, 2, 3, 17, 100, 257, 1000, 3000, 4096, 20000, 65536, 1 << 20, 10**9)
DS = (1, 8, 40, 64, 96, 128, 256)
MASKS: tuple[dict[str, Any], ...] = (
    {}, {"causal": True}, {"causal": "top_left"}, {"causal": True, "window": "quarter"},
    {"causal": True, "window": 3}, {"heads": 8, "kv_heads": 2},
    {"heads": 32, "kv_heads": 8, "causal": True})


def _Ms(N: int, d: int) -> list[int]:
    """M from below d² to above N·d (at least d + 1... any M >= 1 is allowed)."""
    raw = {d, 4 * d, d * d // 16, d * d // 2 + 3, d * d, 4 * d * d, 16 * d * d + 5,
           (N * d) // 2, N * d, 2 * N * d, 65536, 60000}
    return sorted(m for m in raw if 1 <= m <= MAX_M)


def grid(count: int = 420, seed: int = 31) -> list[dict[str, Any]]:
    """``count`` shapes drawn (deterministically) from NS × DS × M × MASKS, plus fixed ones."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [
        dict(N=4096, d=64, M=65536), dict(N=3000, d=40, M=60000),
        dict(N=8192, d=128, M=65536, heads=32, kv_heads=8, causal=True),
        dict(N=1000, d=40, M=4309, causal=True), dict(N=20000, d=96, M=1704),
        dict(N=4096, d=256, M=1024), dict(N=4096, d=64, M=16384)]
    seen = {json.dumps(s, sort_keys=True) for s in out}
    while len(out) < count:
        N, d = rng.choice(NS), rng.choice(DS)
        M = rng.choice(_Ms(N, d))
        mask = dict(rng.choice(MASKS))
        if mask.get("window") == "quarter":
            mask["window"] = max(1, N // 4)
        s = dict(N=N, d=d, M=M, **mask)
        key = json.dumps(s, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


MATMULS = [(m, k, n, M) for m, k, n in ((64, 64, 64), (1000, 40, 1000), (4096, 128, 4096),
                                        (100000, 7, 3000), (10**6, 10**3, 10**6))
           for M in (4, 100, 1024, 65536, 10**6)]


def values(shape: dict[str, Any]) -> dict[str, Any]:
    """The recorded values of one shape."""
    s = dict(shape)
    M = s.pop("M")
    N, d = s.pop("N"), s.pop("d")
    sh = attention_shape(N, d, **s)
    fwd = {b.name: b.value for b in bounds.applicable_to(sh, M) if b.explicit}
    # the value before issue 36's exact maximum over K (the raw evaluation; never above it)
    fwd["standard_matmul_large_cache"] = E.large_cache_raw_for(sh, M).value
    # Theorem B′ as searched, before issue 36's closure (never above it)
    fwd["qkpv_levelled"] = L.qkpv_levelled_raw_for(sh, M).value
    bwd = {b.name: b.value for b in BK.backward_applicable_to(sh, M) if b.explicit}
    P = pairs_of(sh)
    closed = {t.name: list(t.closed(P, d, M)) if P else None for t in (F._A, F._B, BK._D, BK._E)}
    closed["qkpv_levelled"] = list(L._closed(P, d, M))
    return {"shape": shape, "P": P, "forward": fwd, "backward": bwd, "closed": closed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT}")
    args = ap.parse_args()
    t = time.process_time()
    rows = [values(s) for s in grid()]
    mm = [[m, k, n, M, bounds.matmul_potential(m=m, k=k, n=n, M=M).value] for m, k, n, M in MATMULS]
    print(f"{len(rows)} shapes, {len(mm)} matmuls: {time.process_time() - t:.1f} s CPU",
          file=sys.stderr)
    doc = {"about": "every explicit bound value on a grid (benchmarks/bound_values.py)",
           "shapes": rows, "matmul_potential": mm}
    text = json.dumps(doc, indent=None, separators=(",", ":"))
    if args.write:
        with open(OUT, "w", encoding="utf-8") as f:
            f.write(text.replace('{"shape"', '\n{"shape"') + "\n")
        print(f"wrote {OUT}", file=sys.stderr)
    else:
        print(text)


if __name__ == "__main__":
    main()
