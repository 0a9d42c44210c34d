"""torch.nn.functional.scaled_dot_product_attention on the fused pass: the same positional order,
defaults and semantics, so that model code runs unchanged (patch_torch routes torch's name here)."""

import math
import sys

from . import _c

__all__ = ["scaled_dot_product_attention", "patch_torch"]

_WHO = "xattn.scaled_dot_product_attention"


def _seed(torch):
    """A dropout seed drawn from torch's default generator: torch.manual_seed reproduces it."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


def _as_rank4(x, batch, heads, name):
    """x (*batch', heads', L, E), its batch axes broadcast to batch and its heads to heads, seen
    as (prod(batch), heads, L, E): a view where the strides allow (broadcast axes read with stride
    0), else a copy (autograd intact); out must be a view."""
    try:
        x = x.expand(*batch, heads, *x.shape[-2:])
    except RuntimeError:
        raise ValueError("%s: %s has shape %s, which does not broadcast to (%s)"
                         % (_WHO, name, tuple(x.shape), ", ".join(map(str, (*batch, heads, *x.shape[-2:]))))) from None
    n = math.prod(batch)
    try:
        return x.view(n, heads, *x.shape[-2:])
    except RuntimeError:
        if name == "out":
            raise ValueError("%s: out (shape %s, strides %s) cannot be seen as one batch axis of %d without a copy"
                             % (_WHO, tuple(x.shape), x.stride(), n)) from None
        return x.reshape(n, heads, *x.shape[-2:])


def _rank4(x, rank):
    """(L, E) and (N, L, E) seen as (1, 1, L, E) and (N, 1, L, E)."""
    return x[None, None] if rank == 2 else x[:, None] if rank == 3 else x


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, out=None, threads=0):
    """softmax(query keyᵀ · scale + attn_mask) value, fused, as torch.nn.functional's.

    query (N..., Hq, L, E), key (N..., Hkv, S, E), value (N..., Hkv, S, Ev): the batch axes N...
    broadcast; Hkv = Hq, or 1, or with enable_gqa=True any divisor of Hq (each group of Hq / Hkv
    query heads reads one key head). Also (N, L, E) and (L, E). attn_mask broadcasts to
    (N..., Hq, L, S): bool (True = take part) or float (added to the scores, and given its
    gradient when it requires grad). is_causal: query i sees keys j <= i (top left; with attn_mask,
    both apply). scale: None for 1/sqrt(E). dropout_p: applied whenever > 0 (as torch's, which
    has no training flag), seeded from torch's default generator. A row that sees no key outputs
    zeros and passes no gradient (as PyTorch 2.5 and later on the CPU).

    out=: a tensor of the result's shape (N..., Hq, L, Ev) and dtype, written in place (e.g. a
    (B, L, Hq, Ev) buffer's transpose(1, 2)) and returned. threads: 0 for OpenMP's default.
    """
    import torch

    from . import _attention

    recorded = _c.fx_call(scaled_dot_product_attention, (query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                          enable_gqa), dict(out=out, threads=threads))
    if recorded is not None:
        return recorded
    _c.refuse_jit_trace(_WHO)
    for x, name in ((query, "query"), (key, "key"), (value, "value"), (attn_mask, "attn_mask"), (out, "out")):
        if x is not None and not isinstance(x, torch.Tensor):
            raise TypeError("%s: %s must be a torch tensor, not %s (xattn.attention takes numpy arrays)"
                            % (_WHO, name, type(x)))
        if x is not None and x.device.type == "cpu":
            try:
                x.data_ptr()
            except RuntimeError:
                raise _c.storage_error(_WHO, name) from None
    shapes = "query %s, key %s, value %s" % (tuple(query.shape), tuple(key.shape), tuple(value.shape))
    rank = query.dim()
    if rank < 2 or key.dim() != rank or value.dim() != rank:
        raise ValueError("%s: %s: each must be (N..., H, L, E), (N, L, E) or (L, E), of one rank" % (_WHO, shapes))
    if not query.dtype == key.dtype == value.dtype:
        raise ValueError("%s: query, key and value must share one dtype (as torch's), got %s, %s, %s"
                         % (_WHO, query.dtype, key.dtype, value.dtype))
    if key.shape[-1] != query.shape[-1] or value.shape[-2] != key.shape[-2]:
        raise ValueError("%s: %s: key must have query's E, and value key's S" % (_WHO, shapes))
    q, k, v = _rank4(query, rank), _rank4(key, rank), _rank4(value, rank)
    try:
        batch = tuple(torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3]))
    except RuntimeError:
        raise ValueError("%s: %s: the batch axes do not broadcast" % (_WHO, shapes)) from None
    hq, hkv = q.shape[-3], k.shape[-3]
    if v.shape[-3] != hkv:
        raise ValueError("%s: %s: key and value differ in heads" % (_WHO, shapes))
    heads = hq  # the result's
    if hkv != hq and not (enable_gqa and hkv > 0 and hq % hkv == 0) and hkv != 1:
        if hq != 1 or enable_gqa:
            raise ValueError("%s: query has %d heads and key %d: grouped-query attention needs enable_gqa=True and "
                             "a number of query heads that is a multiple of key's" % (_WHO, hq, hkv))
        heads = hkv  # one query head, broadcast to the key heads
    lq, lk, ev = q.shape[-2], k.shape[-2], v.shape[-1]
    if len(batch) != 1 or q.shape[0] != batch[0] or k.shape[0] != batch[0] or v.shape[0] != batch[0] or heads != hq:
        q, k, v = _as_rank4(q, batch, heads, "query"), _as_rank4(k, batch, hkv, "key"), _as_rank4(v, batch, hkv, "value")
    result_shape = (*batch, lq, ev) if rank == 3 else (lq, ev) if rank == 2 else (*batch, heads, lq, ev)

    mask = attn_mask
    if mask is not None:
        if mask.dtype != torch.bool and not mask.is_floating_point():
            raise TypeError("%s: attn_mask has dtype %s; it must be bool (True = take part) or floating point "
                            "(added to the scores)" % (_WHO, mask.dtype))
        if mask.dim() > rank:
            raise ValueError("%s: attn_mask has shape %s, more axes than query %s"
                             % (_WHO, tuple(mask.shape), tuple(query.shape)))
        if mask.is_floating_point() and mask.dtype not in (torch.float32, torch.float64):
            mask = mask.float()  # a 16-bit mask is added in float
        if rank == 3 and mask.dim() == 3:
            mask = mask[:, None]  # (N, L, S): N is the batch, not a head axis
        if len(batch) == 1 and mask.dim() <= 4:  # read in place, broadcast by the library
            try:
                mask.expand(*batch, heads, lq, lk)
            except RuntimeError:
                raise ValueError("%s: attn_mask has shape %s, which does not broadcast to the scores' %s"
                                 % (_WHO, tuple(attn_mask.shape), (*result_shape[:-1], lk))) from None
        else:
            mask = _as_rank4(mask, batch, heads, "attn_mask")

    into = None
    if out is not None:
        if tuple(out.shape) != tuple(result_shape) or out.dtype != query.dtype:
            raise ValueError("%s: out has shape %s and dtype %s but the result is %s of %s"
                             % (_WHO, tuple(out.shape), out.dtype, tuple(result_shape), query.dtype))
        into = _rank4(out, rank)
        if len(batch) != 1:
            into = _as_rank4(into, batch, heads, "out")
    dropout = float(dropout_p)
    if not 0.0 <= dropout < 1.0:
        raise ValueError("%s: dropout_p must be in [0, 1), not %r" % (_WHO, dropout_p))
    result = _attention(q, k, v, scale, bool(is_causal), None, None, None, None, dropout,
                        _seed(torch) if dropout > 0 else 0, threads, None, mask, None, None, None, None, into, _WHO)
    if out is not None:
        return out  # written in place; its history (when it has one) runs through the view written
    return result.reshape(result_shape)


class patch_torch:
    """Routes torch.nn.functional.scaled_dot_product_attention to xattn's (adding the name to a
    torch that lacks it): `xattn.patch_torch()` for the rest of the process, or
    `with xattn.patch_torch(): ...` for a block. Calls xattn cannot take (tensors off the CPU,
    tensor subclasses, a torch.jit trace) go to torch's own function where there is one."""

    def __init__(self):
        import torch.nn.functional as F

        self._module = F
        self._had = hasattr(F, "scaled_dot_product_attention")
        self._original = getattr(F, "scaled_dot_product_attention", None)
        original = self._original

        def routed(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                   **kwargs):
            if original is not None and not _takes(query, key, value, attn_mask):
                extra = dict(kwargs)
                if scale is not None:
                    extra["scale"] = scale
                if enable_gqa:
                    extra["enable_gqa"] = enable_gqa
                return original(query, key, value, attn_mask, dropout_p, is_causal, **extra)
            return scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                enable_gqa, **kwargs)

        routed.__doc__ = scaled_dot_product_attention.__doc__
        routed.__wrapped__ = scaled_dot_product_attention
        self.function = routed
        F.scaled_dot_product_attention = routed

    def undo(self):
        """Restores torch's own function (or its absence)."""
        if self._module.scaled_dot_product_attention is self.function:
            if self._had:
                self._module.scaled_dot_product_attention = self._original
            else:
                del self._module.scaled_dot_product_attention

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.undo()
        return False


def _takes(*tensors):
    """Whether xattn runs these: plain CPU tensors, outside a torch.jit trace."""
    torch = sys.modules["torch"]
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return False
    for t in tensors:
        if t is None:
            continue
        if type(t) is not torch.Tensor or t.device.type != "cpu" or t.layout != torch.strided:
            return False
    return True

