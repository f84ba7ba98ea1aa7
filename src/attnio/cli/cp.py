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
HELP = ("attention across P devices: plan the scheme of least words per device, bound them, "
        "or run a scheme under torchrun")
FLAG_NAMES = {"P": "--P", "scheme": "--scheme", "layout": "--N", "params": "--params",
              "link": "--link"}


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="cp_command", metavar="{plan,bound,run}", parser_class=type(p))
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
        if name == "plan":
            q.add_argument("--backward", action="store_true",
                           help="the forward and backward passes together (ring, zigzag, "
                                "striped, ulysses, usp)")
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
                   help="also the backward pass (ring, zigzag, striped, ulysses, usp): words per "
                        "rank and gradients against autograd through SDPA")
    common.add_output_arguments(q)


def _run(args, shape, P) -> int:
    from ..core import ParameterError
    from ..parallel import launch, plan

    parsed = None
    if args.params is not None:
        try:
            parsed = json.loads(args.params)
        except json.JSONDecodeError as e:
            raise ParameterError(f"--params is not valid JSON ({e.msg}): {args.params!r}",
                                 param="params") from None
        if not isinstance(parsed, dict):
            raise ParameterError("--params must be a JSON object", param="params")
    params = parsed if isinstance(parsed, dict) else None
    if params is None:
        params = plan(shape, P, args.scheme).params
    res = launch(shape, P, args.scheme, params, seed=args.seed, backward=args.backward)
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


def main(args) -> int:
    from .. import parallel
    from ..parallel import check_P, get, plan

    args.flag_names = FLAG_NAMES
    shape = common.workload_from_args(args)
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
    b = parallel.bound(shape, P)
    out = {"bound": int(b.value), "theorem": b.theorem, "P": P, "shape": shape.describe(),
           "theorem1_linear": float(parallel.linear_bound(shape, P)),
           "theorem2_busiest": parallel.busiest_bound(shape, P),
           "theorem3_groups": float(parallel.group_bound(shape, P)),
           "assumptions": list(b.assumptions)}
    if args.scheme is not None:
        s = plan(shape, P, args.scheme)
        out.update(scheme=s.scheme, params=s.params, words_per_device=s.words_per_device,
                   ratio=s.ratio)
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"Lower bound on words per device for {out['shape']}, P={P}: {out['bound']:,}")
        print(f"  {b.theorem}")
        print(f"  Theorem 1 (linear caps): {out['theorem1_linear']:,.0f}; Theorem 2 (busiest "
              f"rectangle): {out['theorem2_busiest']:,.0f}; Theorem 3 (rectangles per group): "
              f"{out['theorem3_groups']:,.0f}")
        if args.scheme is not None:
            r = "n/a" if out["ratio"] is None else f"{out['ratio']:.3f}"
            print(f"  {out['scheme']} {out['params'] or ''}: {out['words_per_device']:,} words "
                  f"per device, ratio {r}")
    return 0
