"""``poly_attention`` as one custom operator, for ``torch.compile``.

Under compilation :func:`attnio.torch_ops.poly_attention` calls ``torch.ops.attnio.poly_attention``:
an opaque operator with a fake (shape-only) implementation, so the graph has no break and the
planning (pure Python: polynomial degree, coefficients) runs at call time, outside the graph.  The
values are checked with ``torch._assert_async`` (no host synchronisation).  Its backward is a
second operator that recomputes the forward under autograd (the eager path's hand-written
backward, plus one forward), since an opaque operator cannot hand its saved state over.
"""

from concurrent.futures import ThreadPoolExecutor

from ._checks import check_inputs
from ._core import PolyOptions, eager

__all__ = ["poly_op"]


def _impl(q, k, v, params: tuple):
    """The eager path; ``params``: the operator's scalar arguments (eps, entry_bound, scale,
    variant, degree, allow_unbounded, on_slow, causal, offset, chunk, memory_limit), where
    ``entry_bound < 0`` means none (R measured from the values, with one host synchronisation
    inside the operator), ``degree < 0`` none and ``chunk = 0`` none."""
    (eps, entry_bound, scale, variant, degree, allow_unbounded, on_slow, causal, offset, chunk,
     memory_limit) = params
    inp, _ = check_inputs(q, k, v, is_causal=causal, causal_align="bottom_right",
                          enable_gqa=True, dropout_p=0.0, scale=scale)
    bounded = entry_bound >= 0
    opts = PolyOptions(eps, entry_bound if bounded else None, variant,
                       None if degree < 0 else degree, allow_unbounded, on_slow, chunk or None,
                       asynchronous=bounded, memory_limit=memory_limit)
    return eager(q, k, v, inp, scale, offset if causal else None, opts)


_OP: list = []


def poly_op():
    """The operator, registered on the first call (made when attnio.torch_ops is imported)."""
    if _OP:
        return _OP[0]
    import torch
    from torch import Tensor

    @torch.library.custom_op("attnio::poly_attention", mutates_args=())
    def op(q: Tensor, k: Tensor, v: Tensor, eps: float, entry_bound: float, scale: float,
           variant: str, degree: int, allow_unbounded: bool, on_slow: str, causal: bool,
           offset: int, chunk: int, memory_limit: int) -> Tensor:
        with torch.no_grad():
            return _impl(q, k, v, (eps, entry_bound, scale, variant, degree, allow_unbounded,
                                   on_slow, causal, offset, chunk, memory_limit)
                         ).contiguous().clone()

    @op.register_fake
    def _(q, k, v, *args):
        return q.new_empty(q.shape[:-1] + (v.shape[-1],))

    @torch.library.custom_op("attnio::poly_attention_backward", mutates_args=())
    def bwd(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, eps: float, entry_bound: float,
            scale: float, variant: str, degree: int, allow_unbounded: bool, on_slow: str,
            causal: bool, offset: int, chunk: int,
            memory_limit: int) -> tuple[Tensor, Tensor, Tensor]:
        def run():
            with torch.enable_grad():
                xs = [x.detach().requires_grad_(True) for x in (q, k, v)]
                out = _impl(xs[0], xs[1], xs[2], (eps, entry_bound, scale, variant, degree,
                                                  allow_unbounded, on_slow, causal, offset,
                                                  chunk, memory_limit))
                return torch.autograd.grad(out, xs, grad)

        # an operator's implementation runs with autograd's dispatch keys excluded (thread-local
        # state): a fresh thread has them, so the recomputation records its graph there
        with ThreadPoolExecutor(max_workers=1) as pool:
            dq, dk, dv = pool.submit(run).result()
        # each gradient in its input's layout (the fake below says so)
        return (torch.empty_like(q).copy_(dq), torch.empty_like(k).copy_(dk),
                torch.empty_like(v).copy_(dv))

    @bwd.register_fake
    def _(grad, q, k, v, *args):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:3])
        ctx.params = inputs[3:]

    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        dq, dk, dv = bwd(grad.contiguous(), q, k, v, *ctx.params)
        return (dq, dk, dv) + (None,) * len(ctx.params)

    op.register_autograd(backward, setup_context=setup_context)
    _OP.append(op)
    return op
