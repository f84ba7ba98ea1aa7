"""``attnio cp plan|bound|run``: attention across P devices (context parallelism).

``cp plan`` picks the scheme and parameters of least critical-path words (sent plus received by
the busiest processor) and reports its ratio to the proven bound; ``cp bound`` prints the bound
(and, with ``--scheme``, that scheme's best words beside it).  ``--json`` prints one object:
for ``plan`` ``{"scheme", "params", "words_per_device", "total_words", "bound", "ratio", ...}``.
``cp run`` launches the scheme under torchrun (gloo, P local processes) and prints
``{"scheme", "P", "measured_words", "predicted_words", "max_abs_err", ...}``.
"""

from __future__ import annotations

import json

from . import common

NAME = "cp"
DEFAULT_DB = "attnio-results.sqlite"  # attnio sweep's default (cli/sweep.py), not imported here
HELP = ("attention across P devices: plan the scheme of least words per device, bound them, "
        "or run a scheme under torchrun")
FLAG_NAMES = {"P": "--P", "scheme": "--scheme", "layout": "--N", "params": "--params",
              "link": "--link", "memory": "--memory", "db": "--db", "fit": "--fit",
              "schemes": "--schemes"}


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="cp_command", metavar="{plan,bound,run,sweep,figure}",
                           parser_class=type(p))
    sub.required = True
    for name, what in (("plan", "the scheme and parameters of least words per device, with "
                                "the ratio to the bound"),
                       ("bound", "the proven lower bound on words per device")):
        q = sub.add_parser(name, help=what, description=what)
        common.add_workload_arguments(q)
        q.add_argument("--P", type=int, required=True, help="processors (devices)")
        q.add_argument("--scheme", default=None,
                       help="ring, zigzag, striped, ulysses, usp, grid or window_ring (plan: only this one; "
                            "bound: print its best words beside the bound)")
        if name == "bound":
            q.add_argument("--backward", action="store_true",
                           help="the backward pass's bound (dO, the statistics and the partial "
                                "gradients charged)")
            q.add_argument("--memory", type=int, default=None, metavar="L",
                           help="a local memory of L words per device: adds the "
                                "memory-dependent bound (Theorem 4)")
        if name == "plan":
            q.add_argument("--backward", action="store_true",
                           help="the forward and backward passes together")
            q.add_argument("--link", default=None,
                           help="rank by predicted time on a link preset instead of words: "
                                "nvlink4, nvswitch, nvlink5, ib-ndr")
            q.add_argument("--device", default="h100",
                           help="with --link: the GPU whose peak FLOP/s times the compute "
                                "(default h100)")
            q.add_argument("--dtype", default="bf16",
                           help="with --link: bytes per word and the tensor-core rate "
                                "(default bf16)")
        common.add_output_arguments(q)
    q = sub.add_parser("sweep", help="every scheme's best words per device over a list of P, "
                                     "with the bound, into the results database (resumable)",
                       description="closed forms over P and schemes into the cp_results table "
                                   "of a results database; a rerun skips the rows present")
    common.add_workload_arguments(q)
    q.add_argument("--P", required=True, metavar="LIST",
                   help="processors: a value list, e.g. 1:1024:x2 or 8,64,512")
    q.add_argument("--schemes", default="ring,zigzag,ulysses,usp,grid",
                   help="comma-separated schemes (default ring,zigzag,ulysses,usp,grid)")
    q.add_argument("--backward", action="store_true", help="the forward and backward passes "
                                                           "together")
    q.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    common.add_output_arguments(q)
    q = sub.add_parser("figure", help="words per device against P from the database, with the "
                                      "bound and fitted slopes (PNG)")
    q.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    q.add_argument("--out", required=True, help="the PNG to write")
    q.add_argument("--fit", default="64:1024", metavar="LO:HI",
                   help="the range of P the log-log slopes are fitted over (default 64:1024)")
    common.add_output_arguments(q)
    q = sub.add_parser("run", help="run a scheme for real: torchrun with P gloo processes, "
                                   "bytes counted per rank, output against SDPA",
                       description="run a scheme with torch.distributed (gloo) under torchrun "
                                   "on this machine; small shapes (a check, not a benchmark)")
    common.add_workload_arguments(q)
    q.add_argument("--P", type=int, required=True, help="processes (ranks)")
    q.add_argument("--scheme", required=True,
                   help="ring, zigzag, striped, ulysses, usp, grid or window_ring")
    q.add_argument("--params", default=None, metavar="JSON",
                   help="the scheme's parameters, e.g. '{\"u\": 2, \"ring\": \"zigzag\"}' "
                        "(default: the least words per device)")
    q.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    q.add_argument("--backward", action="store_true",
                   help="also the backward pass: words per rank and gradients against autograd "
                        "through SDPA")
    common.add_output_arguments(q)


def _run(args, shape, P) -> int:
    from ..core import ParameterError
    from ..parallel import launch

    parsed = None
    if args.params is not None:
        try:
            parsed = json.loads(args.params)
        except json.JSONDecodeError as e:
            raise ParameterError(f"--params is not valid JSON ({e.msg}): {args.params!r}",
                                 param="params") from None
        if not isinstance(parsed, dict):
            raise ParameterError("--params must be a JSON object", param="params")
    res = launch(shape, P, args.scheme, parsed, seed=args.seed, backward=args.backward)
    if args.json:
        print(json.dumps(res, sort_keys=True))
    else:
        same = res["measured_words"] == res["predicted_words"]
        print(f"{res['scheme']} {res['params'] or ''} on {P} ranks ({res['backend']}, "
              f"{res['dtype']}) for {shape.describe()}")
        print(f"  measured words per rank:  {res['measured_words']}")
        print(f"  predicted words per rank: {res['predicted_words']} "
              f"({'equal' if same else 'DIFFERENT'})")
        print(f"  max |out - SDPA| = {res['max_abs_err']:.2e}")
        if args.backward:
            same_b = res["measured_words_backward"] == res["predicted_words_backward"]
            print(f"  backward: measured words per rank {res['measured_words_backward']}, "
                  f"predicted {res['predicted_words_backward']} "
                  f"({'equal' if same_b else 'DIFFERENT'})")
            print(f"  max |grad - autograd(SDPA)| = {res['max_abs_err_grad']:.2e}")
    return 0


def _sweep(args, shape) -> int:
    from ..core import ParameterError
    from ..experiments import cp_sweep, parse_values
    from ..parallel import names

    Ps = parse_values("P", args.P)
    schemes = [x.strip() for x in args.schemes.split(",") if x.strip()]
    bad = [x for x in schemes if x not in names()]
    if not schemes or bad:
        raise ParameterError(f"--schemes: {'unknown scheme ' + repr(bad[0]) if bad else 'none'}"
                             f"; give a comma-separated list of {', '.join(names())}",
                             param="schemes")
    summ = cp_sweep(args.db, shape, Ps, schemes, backward=args.backward)
    if args.json:
        print(json.dumps(vars(summ), sort_keys=True))
    else:
        print(summ)
    return 0


def _figure(args) -> int:
    from ..core import ParameterError
    from ..experiments import cp_db_figure

    bits = args.fit.split(":")
    if len(bits) != 2 or not all(b.strip().isdigit() for b in bits) or int(bits[0]) < 1 \
            or int(bits[1]) <= int(bits[0]):
        raise ParameterError(f"--fit must be LO:HI with 1 <= LO < HI, got {args.fit!r}",
                             param="fit")
    slopes = cp_db_figure(args.db, args.out, lo=int(bits[0]), hi=int(bits[1]))
    if args.json:
        print(json.dumps({"out": args.out, "slopes": slopes}, sort_keys=True))
    else:
        print(f"wrote {args.out}; log-log slopes over P = {args.fit}:")
        for w, sl in slopes.items():
            print(f"  {w}: " + ", ".join(f"{k} {v:+.2f}" for k, v in sl.items()))
    return 0


def flag_names(args) -> dict[str, str]:
    """The flags of this verb's parameters beyond :data:`~attnio.cli.common.FLAGS`."""
    return FLAG_NAMES


def main(args) -> int:
    from .. import parallel
    from ..parallel import check_P, get, plan

    if args.cp_command == "figure":
        return _figure(args)
    shape = common.workload_from_args(args)
    if args.cp_command == "sweep":
        return _sweep(args, shape)
    P = check_P(args.P)
    if args.scheme is not None:
        get(args.scheme)  # an unknown name, before anything else
    if args.cp_command == "run":
        return _run(args, shape, P)
    if args.cp_command == "plan":
        p = plan(shape, P, args.scheme, link=args.link, device=args.device, dtype=args.dtype,
                 backward=args.backward)
        print(json.dumps(p.to_dict(), sort_keys=True) if args.json else repr(p))
        return 0
    r = parallel.bounds_of(shape, P, memory=args.memory, backward=args.backward,
                           scheme=args.scheme)
    out = r.to_dict()
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"Lower bound on words per device{' (backward)' if r.backward else ''} for "
              f"{out['shape']}, P={P}: {out['bound']:,}")
        print(f"  {r.bound.theorem}")
        print(f"  Theorem 1 (linear caps): {out['theorem1_linear']:,.0f}; Theorem 2 (busiest "
              f"rectangle): {out['theorem2_busiest']:,.0f}; Theorem 3 (rectangles per group): "
              f"{out['theorem3_groups']:,.0f}"
              + ("" if args.memory is None else
                 f"; Theorem 4 (memory {args.memory:,}): {out['theorem4_memory']:,.0f}"))
        if r.scheme is not None:
            ratio = "n/a" if r.ratio is None else f"{r.ratio:.3f}"
            print(f"  {r.scheme} {r.params or ''}: {r.words_per_device:,} words "
                  f"per device, ratio {ratio}")
    return 0
