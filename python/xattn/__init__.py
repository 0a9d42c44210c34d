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

__all__ = ["attention", "policy", "Policy", "CompileError", "version"]


def version():
    """The library's version, "major.minor.patch"."""
    return _c.lib.xattn_version().decode()


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


def _view(x, name, rank=None):
    """The C view of a torch tensor or numpy array: its memory, in place, with element strides.
    A tensor of rank - 1 is seen with a head axis of 1: (B, S, D) as (B, 1, S, D)."""
    if x is None:
        return None
    if _is_torch(x):
        shape, strides, data = x.shape, x.stride(), x.data_ptr()
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
    """attention()'s keyword arguments, checked, and the C descriptor they make."""

    def __init__(self, scale, causal, window, lengths, softcap, sinks, dropout, seed, threads, unsupported,
                 score=None):
        for name, value in unsupported.items():
            if value is not None:
                raise NotImplementedError(
                    "xattn.attention: %s= is not supported by this version of the Python package; "
                    "scale, causal, window, lengths, softcap, sinks and threads are" % name)
        if dropout:
            raise NotImplementedError("xattn.attention: dropout must be 0 in this version of the Python package")
        if causal not in (False, True, "top_left", "bottom_right"):
            raise ValueError("xattn.attention: causal must be False, True (top left) or 'bottom_right', not %r"
                             % (causal,))
        if score is not None and not isinstance(score, Policy):
            raise TypeError("xattn.attention: score must be an xattn.policy(...), not %s" % type(score))
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
        self.desc.seed, self.desc.threads = int(seed), int(threads)
        if lengths is not None and not (_is_torch(lengths) or hasattr(lengths, "ctypes")):
            import numpy as np

            lengths = np.asarray(lengths, dtype=np.int64)
        self.lengths = lengths  # kept alive with its view
        self._lengths = _view(lengths, "lengths")
        if self._lengths is not None:
            self.desc.lengths = ctypes.pointer(self._lengths)

    def with_sinks(self, sinks):
        """The descriptor, with sinks' current memory."""
        self._sinks = _view(sinks, "sinks")
        self.desc.sinks = ctypes.pointer(self._sinks) if sinks is not None else None
        return self.desc


def _empty_like_out(q, shape, dtype=None):
    if _is_torch(q):
        import torch

        return torch.empty(shape, dtype=q.dtype if dtype is None else dtype)
    import numpy as np

    return np.empty(shape, dtype=q.dtype if dtype is None else dtype)


def _forward(q, k, v, sinks, opts):
    """(out, lse): out in q's type and rank, lse (B, Hq, Sq) float32 (float64 for float64 inputs)."""
    Q, K, V = _view(q, "q", 4), _view(k, "k", 4), _view(v, "v", 4)
    shape = (Q.shape[0], Q.shape[1], Q.shape[2], V.shape[3])
    if len(q.shape) == 3:  # one head: results without the head axis
        shape = (shape[0], shape[2], shape[3])
    lib = sys.modules["torch"] if _is_torch(q) else sys.modules["numpy"]  # q's own: already imported
    out = lib.empty(shape, dtype=q.dtype)
    lse = lib.empty(shape[:-1], dtype=lib.float64 if Q.dtype == _c.F64 else lib.float32)
    O, L = _view(out, "out", 4), _view(lse, "lse", 3)
    desc = ctypes.byref(opts.with_sinks(sinks))
    if opts.score is None:
        _c.check(_c.lib.xattn_forward(Q, K, V, desc, O, L))  # ctypes passes structures by reference
    else:
        lib = opts.score.library(Q.dtype)
        opts.score.check(lib, lib.xattn_policy_forward(_ref(Q), _ref(K), _ref(V), desc, _ref(O), _ref(L),
                                                       opts.score.values()))
    return out, lse


def _backward(q, k, v, sinks, out, lse, d_out, opts, wanted):
    """dq, dk, dv (each in its operand's type, or None where not wanted), dsinks, and the policy's
    parameter gradients (a list of floats)."""
    grads = []
    for x, want in zip((q, k, v), wanted[:3]):
        grads.append(_empty_like_out(x, tuple(x.shape)) if want else None)
    dsinks = _empty_like_out(sinks, tuple(sinks.shape)) if sinks is not None and wanted[3] else None
    views = [_view(g, n, 4) for g, n in zip(grads, ("dq", "dk", "dv"))]
    Q = _view(q, "q", 4)
    args = [_ref(Q), _ref(_view(k, "k", 4)), _ref(_view(v, "v", 4)), ctypes.byref(opts.with_sinks(sinks)),
            _ref(_view(out, "out", 4)), _ref(_view(lse, "lse", 3)), _ref(_view(d_out, "d_out", 4)),
            *map(_ref, views), _ref(_view(dsinks, "dsinks"))]
    if opts.score is None:
        _c.check(_c.lib.xattn_backward(*args, None))
        return (*grads, dsinks, [])
    lib = opts.score.library(Q.dtype)
    d_values = (ctypes.c_double * max(1, len(opts.score.names)))()
    opts.score.check(lib, lib.xattn_policy_backward(*args, opts.score.values(), d_values))
    return (*grads, dsinks, list(d_values)[:len(opts.score.names)])


_function = None


def _autograd_function():
    """torch.autograd.Function of the fused pass (made on first use: numpy users never import torch)."""
    global _function
    if _function is None:
        import torch

        class Attention(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, sinks, opts, *parameters):  # parameters: the policy's learnables
                out, lse = _forward(q, k, v, sinks, opts)
                ctx.save_for_backward(q, k, v, sinks, out, lse)
                ctx.opts = opts
                return out

            @staticmethod
            def backward(ctx, d_out):
                q, k, v, sinks, out, lse = ctx.saved_tensors
                *grads, d_parameters = _backward(q, k, v, sinks, out, lse, d_out, ctx.opts, ctx.needs_input_grad[:4])
                d_parameters = [torch.tensor(x, dtype=torch.float64) if want else None
                                for x, want in zip(d_parameters, ctx.needs_input_grad[5:])]
                return (*grads, None, *d_parameters)

        _function = Attention
    return _function


def attention(q, k, v, *, scale=None, causal=False, window=None, lengths=None, softcap=None, sinks=None,
              dropout=0.0, seed=0, threads=0, documents=None, mask=None, bias=None, alibi=None, rope=None,
              score=None):
    """softmax(mask(q k^T * scale)) v, fused (the score matrix is never built).

    scale: None for 1/sqrt(D). causal: False, True (query i sees keys j <= i, PyTorch's is_causal)
    or "bottom_right" (j <= i + Skv - Sq). window=(left, right): query i sees keys in
    [i - left, i + right] (None: unbounded; aligned as causal is). lengths: (B,) or (B, Sq) ints,
    each row's number of keys; a row that sees no key outputs 0. softcap: scores become
    softcap * tanh(scores / softcap). sinks: (Hq,) one logit per query head that takes part in the
    softmax and holds no value. threads: 0 for OpenMP's default.

    score: an xattn.policy(...) (a scoring function written in C++, compiled on first use) in
    place of the scaled dot product; scale then defaults to 1.

    torch tensors that require grad give a result that backpropagates to q, k, v, sinks and the
    policy's learnables.
    """
    opts = _Options(scale, causal, window, lengths, softcap, sinks, dropout, seed, threads,
                    {"documents": documents, "mask": mask, "bias": bias, "alibi": alibi, "rope": rope}, score)
    if _is_torch(q):
        import torch

        parameters = [p for p in score.parameters() if _is_torch(p)] if score is not None else []
        needs = torch.is_grad_enabled() and any(
            x is not None and x.requires_grad for x in (q, k, v, sinks, *parameters))
        if needs:
            return _autograd_function().apply(q, k, v, sinks, opts, *parameters)
    return _forward(q, k, v, sinks, opts)[0]
