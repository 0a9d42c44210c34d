"""xattn: fused attention on the CPU (libxattn_c through ctypes), for numpy arrays and torch
tensors, with the backward wired into torch.autograd.

    out = xattn.attention(q, k, v, causal=True, window=(256, 0), softcap=30.0, sinks=sink, lengths=lens)

q (B, Hq, Sq, D), k (B, Hkv, Skv, D), v (B, Hkv, Skv, Dv) -- or (B, S, D) for one head -- float32,
float64, bfloat16 (torch) or float16, read in place in any strides; the result has q's type and
rank. See docs/python.md.
"""

import ctypes
import struct
import sys

from . import _c
from ._jit import CompileError, Policy, policy
from .cache import KVCache
from .sdpa import patch_torch, scaled_dot_product_attention

__all__ = ["attention", "scaled_dot_product_attention", "patch_torch", "KVCache", "additive", "Additive", "policy",
           "Policy", "CompileError", "version"]


def version():
    """The library's version, "major.minor.patch"."""
    return _c.lib.xattn_version().decode()


class Additive:
    """Additive (Bahdanau) scoring, d2l's AdditiveAttention: score(q, k) = w_v . tanh(W_q q + W_k k),
    with W_q (h, D), W_k (h, Dk), w_v (h,): queries and keys may differ in size. Pass it as
    score=; torch weights that require grad receive their gradients."""

    def __init__(self, w_q, w_k, w_v):
        self.w_q, self.w_k, self.w_v = w_q, w_k, w_v

    def parameters(self):
        return [self.w_q, self.w_k, self.w_v]


def additive(w_q, w_k, w_v):
    """score=xattn.additive(W_q, W_k, w_v): additive attention fused, forward and backward."""
    return Additive(w_q, w_k, w_v)


def _is_torch(x):
    return type(x).__module__.startswith("torch")


_codes = {}


def _dtype_code(x, name):
    """The C dtype of a torch tensor (on the CPU) or numpy array."""
    code = _codes.get(x.dtype)
    if code is not None:
        if _is_torch(x) and not x.is_cpu:
            raise ValueError("xattn.attention: %s is on %s; xattn runs on the CPU" % (name, x.device))
        return code
    if _is_torch(x):
        import torch

        _codes.update({torch.float32: _c.F32, torch.float64: _c.F64, torch.bfloat16: _c.BF16,
                       torch.float16: _c.F16, torch.int32: _c.I32, torch.int64: _c.I64, torch.bool: _c.BOOL})
    else:
        import numpy as np

        _codes.update({np.dtype(np.float32): _c.F32, np.dtype(np.float64): _c.F64, np.dtype(np.float16): _c.F16,
                       np.dtype(np.int32): _c.I32, np.dtype(np.int64): _c.I64, np.dtype(np.bool_): _c.BOOL})
    if x.dtype not in _codes:
        raise TypeError("xattn.attention: %s has dtype %s, which xattn does not take" % (name, x.dtype))
    return _dtype_code(x, name)


# xattn_tensor's bytes at once: a third of the time of setting a ctypes.Structure's fields
_pack = struct.Struct("@Pii%dq%dq" % (_c.MAX_RANK, _c.MAX_RANK)).pack


def _view(x, name, rank=None, who="xattn.attention"):
    """The C view of a torch tensor or numpy array: its memory, in place, with element strides.
    A tensor of rank - 1 is seen with a head axis of 1: (B, S, D) as (B, 1, S, D)."""
    if x is None:
        return None
    if _is_torch(x):
        shape, strides = x.shape, x.stride()
        try:
            data = x.data_ptr()
        except RuntimeError:
            raise _c.storage_error(who, name) from None
    else:
        import numpy as np

        if not isinstance(x, np.ndarray):
            raise TypeError("xattn.attention: %s must be a torch tensor or a numpy array, not %s" % (name, type(x)))
        item = x.itemsize
        if any(s % item for s in x.strides):
            raise ValueError("xattn.attention: %s has strides %s, not whole elements" % (name, x.strides))
        shape, strides, data = x.shape, [s // item for s in x.strides], x.ctypes.data
    code = _dtype_code(x, name)
    if rank is not None and len(shape) != rank:
        if len(shape) != rank - 1:
            raise ValueError("xattn.attention: %s has shape %s; it must be (B, H, S, D) or (B, S, D)"
                             % (name, tuple(shape)))
        shape, strides = (shape[0], 1, *shape[1:]), (strides[0], 0, *strides[1:])
    if len(shape) > _c.MAX_RANK:
        raise ValueError("xattn.attention: %s has rank %d (at most %d)" % (name, len(shape), _c.MAX_RANK))
    pad = (0,) * (_c.MAX_RANK - len(shape))
    return _c.Tensor.from_buffer_copy(_pack(data, code, len(shape), *shape, *pad, *strides, *pad))


def _ref(t):
    return None if t is None else ctypes.byref(t)


_DEFAULTS = bytes(_c.lib.xattn_attention_defaults())


class _Options:
    """attention()'s keyword arguments, checked, and the C descriptor they make (the library checks
    shapes and values again and names the argument)."""

    def __init__(self, scale, causal, window, lengths, softcap, dropout, seed, threads, documents, mask, alibi,
                 rope, score=None, who="xattn.attention"):
        self.who = who
        if causal not in (False, True, "top_left", "bottom_right"):
            raise ValueError(who + ": causal must be False, True (top left) or 'bottom_right', not %r"
                             % (causal,))
        if score is not None and not isinstance(score, (Policy, Additive)):
            raise TypeError(who + ": score must be an xattn.policy(...) or xattn.additive(...), not %s"
                            % type(score))
        self.score = score
        self.desc = _c.Desc.from_buffer_copy(_DEFAULTS)
        # scale None: 1/sqrt(D) for the dot product, 1 (the score as written) for a policy
        self.desc.scale = (0.0 if score is None else 1.0) if scale is None else float(scale)
        self.desc.causal = {False: _c.CAUSAL_NONE, True: _c.CAUSAL_TOP_LEFT, "top_left": _c.CAUSAL_TOP_LEFT,
                            "bottom_right": _c.CAUSAL_BOTTOM_RIGHT}[causal]
        if window is not None:
            left, right = window
            self.desc.window_left = -1 if left is None else int(left)
            self.desc.window_right = -1 if right is None else int(right)
        self.desc.softcap = 0.0 if softcap is None else float(softcap)
        self.desc.dropout_p = float(dropout or 0.0)
        self.desc.seed, self.desc.threads = int(seed), int(threads)
        self._alive = []  # what the descriptor points at
        self.desc.lengths = self._pointer(lengths, "lengths", "int64")
        if isinstance(documents, tuple):
            q_ids, kv_ids = documents
            self.desc.documents = self._pointer(q_ids, "documents[0]", "int64")
            self.desc.documents_kv = self._pointer(kv_ids, "documents[1]", "int64")
        else:
            self.desc.documents = self._pointer(documents, "documents", "int64")
        self.desc.mask = self._pointer(mask, "mask", "float64")
        self.desc.alibi = self._pointer(alibi, "alibi", "float64")
        options = _c.rope_options(rope, who, ("style", "base", "dims", "q_positions", "k_positions"))
        if options is not None:
            self.desc.rope, self.desc.rope_base, self.desc.rope_dims = options["style"], options["base"], options["dims"]
            self.desc.rope_q_positions = self._pointer(options.get("q_positions"), "rope q_positions", "int64")
            self.desc.rope_k_positions = self._pointer(options.get("k_positions"), "rope k_positions", "int64")

    def _pointer(self, x, name, default_dtype):
        """A pointer to the C view of x (lists become numpy arrays of default_dtype), or None."""
        if x is None:
            return None
        if not (_is_torch(x) or hasattr(x, "ctypes")):
            import numpy as np

            x = np.asarray(x, dtype=default_dtype)
        view = _view(x, name)
        self._alive += [x, view]
        return ctypes.pointer(view)

    def with_tensors(self, sinks, bias, weights=None, d_weights=(None, None, None)):
        """The descriptor, with the current memory of sinks, bias and the additive scorer's weights
        (the differentiable options) and where its weights' gradients go."""
        self._sinks, self._bias = _view(sinks, "sinks"), _view(bias, "bias")
        self.desc.sinks = ctypes.pointer(self._sinks) if sinks is not None else None
        self.desc.bias = ctypes.pointer(self._bias) if bias is not None else None
        if isinstance(self.score, Additive):
            names = ("W_q", "W_k", "w_v", "dW_q", "dW_k", "dw_v")
            self._weights = [_view(x, n) for x, n in zip((*(weights or self.score.parameters()), *d_weights), names)]
            self._additive = _c.Additive(*(ctypes.pointer(t) if t is not None else None for t in self._weights))
            self.desc.additive = ctypes.pointer(self._additive)
        return self.desc


def _empty_like_out(q, shape, dtype=None):
    if _is_torch(q):
        import torch

        return torch.empty(shape, dtype=q.dtype if dtype is None else dtype)
    import numpy as np

    return np.empty(shape, dtype=q.dtype if dtype is None else dtype)


def _check_out(out, q, shape, who):
    """out= must be what the call would return: q's kind (torch or numpy), dtype and the result's
    shape; any strides that give each element its own address (the library checks those)."""
    if _is_torch(out) != _is_torch(q) or not (_is_torch(out) or hasattr(out, "ctypes")):
        raise TypeError("%s: out must be a %s like q, not %s" % (who, "torch tensor" if _is_torch(q) else
                                                                 "numpy array", type(out)))
    if tuple(out.shape) != tuple(shape) or out.dtype != q.dtype:
        raise ValueError("%s: out has shape %s and dtype %s but the result is %s of %s"
                         % (who, tuple(out.shape), out.dtype, tuple(shape), q.dtype))
    if _is_torch(out) and out.requires_grad:
        raise ValueError("%s: out requires grad; it is overwritten, so pass a tensor that does not (the result "
                         "still backpropagates to q, k and v)" % who)


def _result(q, shape, out, who):
    """out checked against the result (shape, q's type), or a new one."""
    if out is None:
        lib = sys.modules["torch"] if _is_torch(q) else sys.modules["numpy"]  # q's own: already imported
        return lib.empty(shape, dtype=q.dtype)
    _check_out(out, q, shape, who)
    return out


def _forward(q, k, v, sinks, bias, opts, weights=None, out=None):
    """(out, lse): out in q's type and rank (written into out when given), lse (B, Hq, Sq) float32
    (float64 for float64 inputs)."""
    Q, K, V = _view(q, "q", 4, opts.who), _view(k, "k", 4, opts.who), _view(v, "v", 4, opts.who)
    shape = (Q.shape[0], Q.shape[1], Q.shape[2], V.shape[3])
    if len(q.shape) == 3:  # one head: results without the head axis
        shape = (shape[0], shape[2], shape[3])
    out = _result(q, shape, out, opts.who)
    lib = sys.modules["torch"] if _is_torch(q) else sys.modules["numpy"]
    lse = lib.empty(shape[:-1], dtype=lib.float64 if Q.dtype == _c.F64 else lib.float32)
    O, L = _view(out, "out", 4), _view(lse, "lse", 3)
    desc = ctypes.byref(opts.with_tensors(sinks, bias, weights))
    if opts.score is None or isinstance(opts.score, Additive):
        _c.check(_c.lib.xattn_forward(Q, K, V, desc, O, L))  # ctypes passes structures by reference
    else:
        lib = opts.score.library(Q.dtype)
        opts.score.check(lib, lib.xattn_policy_forward(_ref(Q), _ref(K), _ref(V), desc, _ref(O), _ref(L),
                                                       opts.score.values()))
    return out, lse


def _forward_desc(q, dv, scale, causal, window, softcap, sinks, threads, out, who, mask=None, alibi=None):
    """For a fused forward over other keys and values (a cache's): the result (out, checked, or a
    new one of q's type and rank with dv features) and run(call), which calls call(Q, desc, O, L)
    (L: NULL) with these options and raises its error."""
    opts = _Options(scale, causal, window, None, softcap, 0.0, 0, threads, None, mask, alibi, None, None, who)
    Q = _view(q, "q", 4, who)
    shape = (Q.shape[0], Q.shape[1], Q.shape[2], dv) if len(q.shape) == 4 else (Q.shape[0], Q.shape[2], dv)
    out = _result(q, shape, out, who)
    O = _view(out, "out", 4, who)
    desc = opts.with_tensors(sinks, None)

    def run(call):
        _c.check(call(ctypes.byref(Q), ctypes.byref(desc), ctypes.byref(O), None))

    return out, run


def _backward(q, k, v, sinks, bias, out, lse, d_out, opts, wanted, weights=None):
    """dq, dk, dv (each in its operand's type), dsinks, dbias (None where not wanted), and the
    scorer's parameter gradients (a policy's: floats; the additive weights': tensors)."""
    grads = []
    for x, want in zip((q, k, v, sinks, bias), wanted[:5]):
        grads.append(_empty_like_out(x, tuple(x.shape)) if x is not None and want else None)
    additive_scorer = isinstance(opts.score, Additive)
    d_weights = [_empty_like_out(w, tuple(w.shape)) for w in weights] if additive_scorer else [None] * 3
    views = [_view(g, n, 4) for g, n in zip(grads[:3], ("dq", "dk", "dv"))]
    views += [_view(grads[3], "dsinks"), _view(grads[4], "dbias")]
    Q = _view(q, "q", 4)
    desc = opts.with_tensors(sinks, bias, weights, d_weights)
    args = [_ref(Q), _ref(_view(k, "k", 4)), _ref(_view(v, "v", 4)), ctypes.byref(desc),
            _ref(_view(out, "out", 4)), _ref(_view(lse, "lse", 3)), _ref(_view(d_out, "d_out", 4)),
            *map(_ref, views[:4])]
    if opts.score is None or additive_scorer:
        _c.check(_c.lib.xattn_backward(*args, _ref(views[4])))
        return (*grads, d_weights if additive_scorer else [])
    lib = opts.score.library(Q.dtype)
    d_values = (ctypes.c_double * max(1, len(opts.score.names)))()
    opts.score.check(lib, lib.xattn_policy_backward(*args, opts.score.values(), d_values))
    return (*grads, list(d_values)[:len(opts.score.names)])


_function = None


def _autograd_function():
    """torch.autograd.Function of the fused pass (made on first use: numpy users never import torch)."""
    global _function
    if _function is None:
        import torch

        class Attention(torch.autograd.Function):
            @staticmethod
            # into (out=) comes first: a view written in place rebases the history of its base, and
            # autograd then takes the function's first input for the one that was written
            def forward(ctx, into, q, k, v, sinks, bias, opts, *parameters):  # parameters: the scorer's learnables
                weights = parameters if isinstance(opts.score, Additive) else None
                out, lse = _forward(q, k, v, sinks, bias, opts, weights, into)
                if into is not None:
                    ctx.mark_dirty(into)  # written in place: autograd versions it, as torch's own out= ops
                ctx.save_for_backward(q, k, v, sinks, bias, out, lse, *parameters)
                ctx.opts = opts
                return out

            @staticmethod
            def backward(ctx, d_out):
                q, k, v, sinks, bias, out, lse, *parameters = ctx.saved_tensors
                weights = parameters if isinstance(ctx.opts.score, Additive) else None
                *grads, d_parameters = _backward(q, k, v, sinks, bias, out, lse, d_out, ctx.opts,
                                                 ctx.needs_input_grad[1:6], weights)
                d_parameters = [(x if _is_torch(x) else torch.tensor(x, dtype=torch.float64)) if want else None
                                for x, want in zip(d_parameters, ctx.needs_input_grad[7:])]
                return _c.once_differentiable(ctx.opts.who, (None, *grads, None, *d_parameters),
                                              (q, k, v, sinks, bias, *parameters))

        _function = Attention
    return _function


def attention(q, k, v, *, scale=None, causal=False, window=None, lengths=None, softcap=None, sinks=None,
              dropout=0.0, seed=0, threads=0, documents=None, mask=None, bias=None, alibi=None, rope=None,
              score=None, out=None):
    """softmax(mask(q k^T * scale)) v, fused (the score matrix is never built).

    scale: None for 1/sqrt(D). causal: False, True (query i sees keys j <= i, PyTorch's is_causal)
    or "bottom_right" (j <= i + Skv - Sq). window=(left, right): query i sees keys in
    [i - left, i + right] (None: unbounded; aligned as causal is). lengths: (B,) or (B, Sq) ints,
    each row's number of keys; a row that sees no key outputs 0. softcap: scores become
    softcap * tanh(scores / softcap). sinks: (Hq,) one logit per query head that takes part in the
    softmax and holds no value. threads: 0 for OpenMP's default.

    documents: (Sq,) or (B, Sq) ids, query i sees key j iff their ids are equal (a tuple
    (q_ids, kv_ids) when Sq != Skv). mask: broadcast to (B, Hq, Sq, Skv), bool (True = attend) or
    float (added to the scores; -inf hides). bias: float32/float64, broadcast as mask, added to the
    scores, differentiable. alibi: (Hq,) slopes; adds -slope * |i + Skv - Sq - j|. rope: "half"
    (LLaMA), "interleaved" (GPT-J) or a dict(style, base=10000, dims=0 (all), q_positions,
    k_positions) rotating q and k. dropout: the probability of zeroing a weight (training mode,
    reproducible from seed). The score is softcap(scale q.k) + mask + bias + alibi.

    score: an xattn.policy(...) (a scoring function written in C++, compiled on first use) or
    xattn.additive(W_q, W_k, w_v) in place of the scaled dot product; scale then defaults to 1.

    out: a tensor (array) of the result's shape and q's dtype, in any strides that give each element
    its own address (e.g. a (B, S, H, D) buffer's transpose(1, 2)): the result is written there and
    returned, and still backpropagates.

    torch tensors that require grad give a result that backpropagates to q, k, v, sinks, bias, a
    float mask and the scorer's learnables.
    """
    recorded = _c.fx_call(attention, (q, k, v), dict(
        scale=scale, causal=causal, window=window, lengths=lengths, softcap=softcap, sinks=sinks, dropout=dropout,
        seed=seed, threads=threads, documents=documents, mask=mask, bias=bias, alibi=alibi, rope=rope, score=score,
        out=out))
    if recorded is not None:
        return recorded
    return _attention(q, k, v, scale, causal, window, lengths, softcap, sinks, dropout, seed, threads, documents,
                      mask, bias, alibi, rope, score, out, "xattn.attention")


def _attention(q, k, v, scale, causal, window, lengths, softcap, sinks, dropout, seed, threads, documents, mask,
               bias, alibi, rope, score, out, who):
    _c.refuse_jit_trace(who)
    if _is_torch(mask) and mask.is_floating_point() and mask.requires_grad:
        # a float mask is added to the scores as a bias is, so it takes the bias's gradient (as
        # SDPA's float attn_mask does); a sum with a bias backpropagates to both through torch
        bias, mask = (mask if bias is None else bias + mask), None
    opts = _Options(scale, causal, window, lengths, softcap, dropout, seed, threads, documents, mask, alibi, rope,
                    score, who)
    if _is_torch(q):
        import torch

        parameters = [p for p in score.parameters() if _is_torch(p)] if score is not None else []
        needs = torch.is_grad_enabled() and any(
            x is not None and x.requires_grad for x in (q, k, v, sinks, bias, *parameters))
        if needs:
            return _autograd_function().apply(out, q, k, v, sinks, bias, opts, *parameters)
    return _forward(q, k, v, sinks, bias, opts, out=out)[0]
