"""The planner's report: the text of ``repr(plan)`` and the prose of ``plan.why``.

The ranking (:mod:`attnio.planner.planner`) decides; this module only says what it decided, so
that a change of wording never touches a choice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.resources import fmt_count
from .records import Backward, Candidate, PlanRecord

if TYPE_CHECKING:
    from ..runner import Certificate
    from .factors import CertificateFactors

__all__ = ["render", "why"]


def render(plan: PlanRecord, factors: CertificateFactors | None = None) -> str:
    """The report of ``plan``: the workload, the choice, its predicted words, the backward pass,
    the best bound and the ratio (with ``factors``, the ratio's two factors under it: the ratio
    is their product), every candidate and every bound, and why."""
    sh, memory, cert, ch = plan.shape, plan.memory, plan.certificate, plan.chosen
    size = f"N={sh.Nq}" if sh.Nq == sh.Nkv else f"Nq={sh.Nq} Nkv={sh.Nkv}"
    mem = f"M={memory.M:,} words"
    if memory.dtype_bytes:
        mem += f" ({memory.M * memory.dtype_bytes:,} bytes at {memory.dtype_bytes} B/word)"
    if memory.device:
        mem += f", device {memory.device}"
    extra = (f" causal={sh.causal_align}" if sh.causal else "")
    extra += f" window={sh.window}" if sh.window else ""
    extra += f" batch={sh.batch}" if sh.batch > 1 else ""
    extra += f" heads={sh.heads}" if sh.heads > 1 else ""
    extra += f" kv_heads={sh.kv_heads}" if sh.kv_heads not in (None, sh.heads) else ""
    lines = [
        f"  Plan for attention {size} d={sh.d}{extra}, {mem}",
        f"         Algorithm:  {ch.algorithm}",
        f"            Tiling:  {ch.tiling}",
    ]
    if memory.device and _gpu(memory.device):
        lines.append("                     (the two-level optimum for M = one CTA's shared "
                     "memory; for a GPU's real tile, registers and L2: attnio gpu tune "
                     f"--device {memory.device})")
    lines += [
        f"   Predicted reads:  {ch.predicted.reads:,}",
        f"  Predicted writes:  {ch.predicted.writes:,}",
        f"   Predicted total:  {ch.predicted.total:,} words",
    ]
    bwd = plan.backward
    if bwd is not None:
        lines.append(f"          Backward:  {bwd.algorithm} {bwd.tiling}")
        bp = bwd.predicted
        lines.append(f"    Backward total:  {bp.total:,} words (reads {bp.reads:,}, writes "
                     f"{bp.writes:,}); the forward above includes the logsumexp")
        if bwd.certificate is not None:
            bb = bwd.certificate.best_bound
            lines.append(f"    Backward bound:  {fmt_count(bb.value)} ({bb.name}, explicit)")
            br = bwd.certificate.ratio
            br_text = f"{br:.3f}" if br is not None else "n/a"
            lines.append(f"    Backward ratio:  {br_text} (backward total/bound)")
        for c in bwd.candidates[1:]:
            pct = 100.0 * (c.predicted.total / bp.total - 1) if bp.total else 0.0
            lines.append(f"   Backward runner-up:  {c.algorithm} {c.predicted.total:,} "
                         f"(+{pct:.1f}%)")
        for name, reason in bwd.skipped:
            lines.append(f"   Backward skipped:  {name} ({reason})")
    if memory.dtype_bytes:
        lines.append(f"  Predicted traffic:  {ch.predicted.total * memory.dtype_bytes:,} bytes")
    if ch.error is not None:
        lines.append(f"  Guaranteed error:  {ch.error:.3g} (approximate)")
    b = cert.best_bound
    scope = ("" if plan.chosen.exact else
             "; for exact algorithms only" if cert.ratio is None else
             "; for feature-space algorithms that hold W = phi(K)^T V in fast memory")
    lines.append(f"  Best lower bound:  {fmt_count(b.value)} ({b.name}, explicit{scope})")
    ratio = f"{cert.ratio:.3f}" if cert.ratio is not None else "n/a (approximate algorithm)"
    lines.append(f"  Ratio total/bound:  {ratio}")
    if factors is not None:
        lines += factors.lines()
    lines.append(f"            Regime:  {cert.regime}")
    if plan.runner_up:
        r = plan.runner_up
        pct = 100.0 * (r.predicted.total / ch.predicted.total - 1) if ch.predicted.total else 0
        lines.append(f"         Runner-up:  {r.algorithm} {r.predicted.total:,} (+{pct:.1f}%)")
    w = max([len(c.algorithm) for c in plan.candidates] + [9])
    lines += ["-" * 88,
              f"{'algorithm':<{w}}  {'reads':>20}  {'writes':>18}  {'total':>20}  {'x best':>7}",
              "-" * 88]
    for c in plan.candidates:
        x = c.predicted.total / ch.predicted.total if ch.predicted.total else 1.0
        err = "" if c.exact else f"  (approximate, error <= {c.error:.3g})"
        lines.append(f"{c.algorithm:<{w}}  {c.predicted.reads:>20,}  {c.predicted.writes:>18,}"
                     f"  {c.predicted.total:>20,}  {x:>7.3f}{err}")
    for name, reason in plan.skipped:
        lines.append(f"{name:<{w}}  (skipped: {reason})")
    lines += ["-" * 88, f"{'bound':<28} {'value':>20}  {'explicit':>8}  theorem", "-" * 88]
    for bd in cert.bounds:
        lines.append(f"{bd.name:<28} {fmt_count(bd.value):>20}  {'yes' if bd.explicit else 'no':>8}"
                     f"  {bd.theorem}")
    lines += ["", "why: " + plan.why]
    return "\n".join(lines)


def why(chosen: Candidate, runner: Candidate | None, n: int, d: int, M: int,
         cert: Certificate, backward: Backward | None = None) -> str:
    """The prose of ``plan.why``: why ``chosen`` (of ``n`` ranked, ``runner`` second) won, the
    regime of ``M`` against ``d²``, its distance to ``cert``'s best explicit bound and to the
    Θ-form of standard matmul, and (``backward``: the backward plan) the backward pass."""
    best_bound, ratio = cert.best_bound, cert.ratio
    total = chosen.predicted.total
    theta_b = next((b for b in cert.bounds if b.name == "standard_matmul"), None)
    theta = (total / theta_b.value if chosen.exact and theta_b is not None and theta_b.value > 0
             else None)
    dd = d * d
    if M >= dd:
        reg = (f"M = {M:,} >= d² = {dd:,}: the large-cache regime, where Saha & Ye prove "
               "Θ(N²d²/M) (FlashAttention's order) for standard matmul")
    else:
        reg = (f"M = {M:,} < d² = {dd:,}: the small-cache regime, where Saha & Ye prove Θ(N²d/√M) "
               "(square tiling's order) for standard matmul")
    s = (f"{chosen.algorithm} moves the fewest words ({chosen.predicted.total:,}) of the {n} "
         f"algorithm(s) scored, each on its candidate tilings by closed form (chosen by predicted "
         f"I/O, no rule on M)")
    if runner:
        pct = 100.0 * (runner.predicted.total / chosen.predicted.total - 1)
        s += f"; runner-up {runner.algorithm} moves {pct:.1f}% more"
    s += f". {reg}. "
    if ratio is not None:
        s += (f"The best explicit lower bound ({best_bound.name}) is {fmt_count(best_bound.value)}, so "
              f"this plan is within {ratio:.2f}x of optimal")
        if theta is not None:
            s += f" (and {theta:.2f}x the Θ-form with constant 1)"
        s += "."
    else:
        s += (f"The chosen algorithm is approximate (guaranteed error {chosen.error}); exact "
              "lower bounds do not apply to it.")
    if backward is not None:
        s += _why_backward(backward)
    return s


def _gpu(device: str) -> bool:
    """Whether the preset ``device`` is a GPU (the presets load on first use, not at import
    attnio)."""
    from ..hardware import devices as _devices

    return _devices.get(device).kind == "gpu"


def _why_backward(bwd: Backward) -> str:
    bcert = bwd.certificate
    assert bcert is not None  # backward_plan always certifies
    bbest = bcert.best_bound
    s = (f" With the backward pass: the forward writes the logsumexp too, and the backward "
         f"schedule {bwd.algorithm} moves {bwd.predicted.total:,} more words (tiling "
         f"{bwd.tiling}), the least of {len(bwd.candidates)} backward "
         f"schedule(s) scored; the best explicit backward bound "
         f"({bbest.name}) is {bbest.value:,.0f}")
    if bcert.ratio is not None:
        s += f", so the backward is within {bcert.ratio:.2f}x of optimal"
    return s + "; the bounds above are the forward's."
