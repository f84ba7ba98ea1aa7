"""One measurement of ``bench_speed.py --compare``, in a fresh process against one tree.

Run as ``PYTHONPATH=TREE/src python benchmarks/_speed_probe.py GROUP TREE [OPTIONS_JSON]``:
it imports attnio from ``TREE/src`` (never the installed one), measures one group of figures and
prints them as one JSON object on the last line of stdout.  It uses only what old trees have too
(``attnio.plan``, ``attnio.run(..., mode="count")``, ``attnio.algorithms.names``/``get``,
``backward_names``, the ``attnio sweep`` command line through ``attnio.cli.main``), and checks
each with ``hasattr``/``inspect`` first, so that a reference commit that lacks something gives
"missing" for that figure instead of failing.

Groups:

* ``import``: ``import attnio``, wall and CPU ms (the first thing this process does);
* ``sweep``: the 1,408-configuration count-mode grid with ``--jobs 2`` through the command line,
  after an untimed one-configuration sweep (the lazy imports): configurations per second (wall)
  and CPU seconds (this process and its workers);
* ``plan``: cold ``attnio.plan`` (every cache cleared: the tree's own
  ``benchmarks/_cold.py`` ``clear_attnio_caches`` where it has one, else this folder's) forward
  and backward at three shapes, CPU ms, the median of ``repeat`` calls;
* ``counts``: the masked count (causal, window 4096; causal alone for a schedule without
  windows) at N = 10^9, d = 128, M = 65536 of every registered exact schedule, forward, and of
  every backward schedule (after flash2's forward), cold, CPU ms, the median of ``repeat``
  calls, past the time budget of ``attnio.run`` (forced); a count past ``timeout_s`` seconds is
  stopped and reported as such, one the schedule refuses with its one-line reason.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

T_START = (time.perf_counter(), time.process_time())

GROUP = sys.argv[1]
TREE = sys.argv[2]
OPTS = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}


def _import() -> dict:
    w0, c0 = time.perf_counter(), time.process_time()
    import attnio  # noqa: F401 - what is measured

    return {"import attnio, wall ms": (time.perf_counter() - w0) * 1e3,
            "import attnio, CPU ms": (time.process_time() - c0) * 1e3}


def _from_tree() -> str | None:
    """None if attnio was imported from TREE/src, else why not."""
    f = os.path.realpath(getattr(sys.modules.get("attnio"), "__file__", None) or "?")
    src = os.path.realpath(os.path.join(TREE, "src"))
    return None if f.startswith(src + os.sep) else f"attnio imported from {f}, not {src}"


if GROUP == "import":  # before anything else of attnio is loaded
    res = _import()
    wrong = _from_tree()
    print(json.dumps({"error": wrong} if wrong else res))
    sys.exit(0)

import functools  # noqa: E402
import inspect  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402

SWEEP_GRID = ["--N", "256:32768:x2", "--d", "16,32,64,128", "--M", "1024:1048576:x2",
              "--algo", "flash1,flash2", "--causal", "both", "--mode", "count", "--jobs", "2"]
SWEEP_TOTAL = 1408
PLAN_SHAPES = [
    ("N=4096 d=64 M=65536", dict(N=4096, d=64, M=65536)),
    ("N=3000 d=40 M=60000", dict(N=3000, d=40, M=60000)),
    ("N=8192 d=128 M=65536 heads=32/8 causal", dict(N=8192, d=128, M=65536, heads=32,
                                                    kv_heads=8, causal=True)),
]
COUNT_N, COUNT_D, COUNT_M, COUNT_WINDOW = 10**9, 128, 65536, 4096


def _clearer():
    """The tree's ``clear_attnio_caches`` (its benchmarks/_cold.py) if it has one, else ours,
    else a plain loop over the ``functools`` caches of the loaded attnio modules."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in (os.path.join(TREE, "benchmarks"), here):
        path = os.path.join(folder, "_cold.py")
        if os.path.exists(path):
            import importlib.util

            spec = importlib.util.spec_from_file_location(f"_cold_{abs(hash(folder))}", path)
            if spec is not None and spec.loader is not None:
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                if hasattr(mod, "clear_attnio_caches"):
                    return mod.clear_attnio_caches

    def clear() -> int:
        n = 0
        for name, mod in list(sys.modules.items()):
            if name.startswith("attnio"):
                for v in list(vars(mod).values()):
                    if isinstance(v, functools._lru_cache_wrapper):
                        v.cache_clear()
                        n += 1
        return n

    return clear


def _sweep() -> dict:
    from attnio.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        assert main(["sweep", "--db", os.path.join(tmp, "warm.sqlite"), "--quiet", "--N", "256",
                     "--d", "16", "--M", "1024", "--algo", "flash2", "--jobs", "1"]) == 0
        db = os.path.join(tmp, "bench.sqlite")
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0, w0 = time.process_time(), time.perf_counter()
        code = main(["sweep", "--db", db, "--quiet", *SWEEP_GRID])
        wall = time.perf_counter() - w0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (time.process_time() - c0 + (r1.ru_utime - r0.ru_utime)
               + (r1.ru_stime - r0.ru_stime))
        import sqlite3

        con = sqlite3.connect(db)
        try:
            rows = con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        finally:
            con.close()
    if code != 0 or rows != SWEEP_TOTAL:
        return {"error": f"sweep exit code {code}, {rows} rows (want {SWEEP_TOTAL})"}
    return {"sweep 1,408 configurations --jobs 2, configs/s": SWEEP_TOTAL / wall,
            "sweep 1,408 configurations --jobs 2, CPU s": cpu}


def _plan() -> dict:
    import attnio

    clear = _clearer()
    repeat = int(OPTS.get("repeat", 5))
    has_backward = "backward" in inspect.signature(attnio.plan).parameters
    attnio.plan(1024, 64, 65536, causal=True)  # imports and first-call work out of the way
    out: dict = {}
    for label, kw in PLAN_SHAPES:
        for direction in ("forward", "backward"):
            key = f"plan {label}, {direction}, CPU ms"
            if direction == "backward" and not has_backward:
                out[key] = "missing: attnio.plan has no backward"
                continue
            args = dict(kw, backward=True) if direction == "backward" else kw
            cpus = []
            for _ in range(repeat):
                clear()
                c0 = time.process_time()
                attnio.plan(**args)
                cpus.append((time.process_time() - c0) * 1e3)
            out[key] = statistics.median(cpus)
    return out


class _OverTime(BaseException):  # not an Exception: no ``except Exception`` swallows it
    pass


def _on_alarm(signum, frame):
    raise _OverTime


def _timed(fn, limit_s: float):
    """(CPU ms, None) of ``fn()``, or (None, why) when it ran past ``limit_s`` seconds (wall:
    a CPU-time timer makes this machine's CPU clock coarse) or refused."""
    old = signal.signal(signal.SIGALRM, _on_alarm)
    c0 = time.process_time()
    try:
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        try:
            fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _OverTime:
        return None, f"over {limit_s:g} s (stopped)"
    except Exception as e:  # noqa: BLE001 - a refusal is a result here
        return None, f"refused: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    finally:
        signal.signal(signal.SIGALRM, old)
    return (time.process_time() - c0) * 1e3, None


def _count_kwargs(attnio, backward: str | None) -> dict:
    """``attnio.run`` keywords for a count past the time budget (the timer stops it) and,
    with ``backward``, that backward schedule, in this tree's API (``limits=Limits(force=True)``
    and ``backward=BackwardPass(name)`` now; ``force=True``, ``backward=True,
    backward_algorithm=name`` in older trees)."""
    params = inspect.signature(attnio.run).parameters
    kw: dict = {"mode": "count"}
    if "limits" in params and hasattr(attnio, "Limits"):
        kw["limits"] = attnio.Limits(force=True)
    elif "force" in params:
        kw["force"] = True
    if backward is not None:
        if "backward_algorithm" in params:
            kw.update(backward=True, backward_algorithm=backward)
        elif hasattr(attnio, "BackwardPass"):
            kw["backward"] = attnio.BackwardPass(backward)
        else:
            return {}
    return kw


def _counts() -> dict:
    import attnio
    from attnio.core.workload import Shape

    clear = _clearer()
    limit = float(OPTS.get("timeout_s", 30.0))
    repeat = int(OPTS.get("repeat", 5))
    skip = set(OPTS.get("skip", ()))
    algs = attnio.algorithms
    windowed = Shape(COUNT_N, COUNT_N, COUNT_D, causal=True, window=COUNT_WINDOW)
    causal = Shape(COUNT_N, COUNT_N, COUNT_D, causal=True)
    attnio.run("flash2", shape=Shape(4096, 4096, 64, causal=True), M=65536, mode="count")
    try:
        names = algs.names(exact=True)
    except TypeError:  # a tree whose names() has no exact filter
        names = [n for n in algs.names() if getattr(algs.get(n), "exact", True)]
    jobs = [(f"count {n}", n, None) for n in names]
    if hasattr(algs, "backward_names"):
        jobs += [(f"count backward {b}", "flash2", b) for b in algs.backward_names()]
    out: dict = {}
    for label, name, bwd in jobs:
        kw = _count_kwargs(attnio, bwd)
        if not kw:
            continue
        shape = windowed
        key = f"{label}, N=1e9 causal window {COUNT_WINDOW}, CPU ms"
        nowin = f"{label}, N=1e9 causal (no window support), CPU ms"
        if key in skip or nowin in skip:
            out[key if key in skip else nowin] = "skipped: over time in an earlier round"
            continue
        cpus: list[float] = []
        why: str | None = None
        while len(cpus) < repeat:
            clear()
            ms, why = _timed(lambda s=shape: attnio.run(name, shape=s, M=COUNT_M, **kw), limit)
            if why is not None and shape is windowed and not cpus and "window" in why \
                    and "support" in why:
                shape, key = causal, nowin  # a schedule without windows: its causal count
                continue
            if why is not None:
                break
            cpus.append(ms)
        out[key] = statistics.median(cpus) if why is None else why
    return out


def main() -> int:
    fn = {"sweep": _sweep, "plan": _plan, "counts": _counts}.get(GROUP)
    if fn is None:
        print(f"group must be one of import, sweep, plan, counts; got {GROUP!r}",
              file=sys.stderr)
        return 2
    res = fn()
    wrong = _from_tree()
    print(json.dumps({"error": wrong} if wrong else res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
