"""ctypes declarations of libxattn_c (c/include/xattn.h) and the tensors handed to it."""

import ctypes
import os
import sys

MAX_RANK = 4

F32, F64, BF16, F16, I32, I64, BOOL, Q8_0, FP8_E4M3, Q4_0, Q4C = range(11)
OK, INVALID_ARGUMENT, UNSUPPORTED, OUT_OF_MEMORY, INTERNAL = range(5)
CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = range(3)
ROPE_NONE, ROPE_HALF, ROPE_INTERLEAVED = range(3)


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("strides", ctypes.c_int64 * MAX_RANK),
    ]


class Additive(ctypes.Structure):
    _fields_ = [(name, ctypes.POINTER(Tensor)) for name in ("w_q", "w_k", "w_v", "d_w_q", "d_w_k", "d_w_v")]


class Desc(ctypes.Structure):
    _fields_ = [
        ("scale", ctypes.c_double),
        ("causal", ctypes.c_int),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("lengths", ctypes.POINTER(Tensor)),
        ("documents", ctypes.POINTER(Tensor)),
        ("documents_kv", ctypes.POINTER(Tensor)),
        ("mask", ctypes.POINTER(Tensor)),
        ("bias", ctypes.POINTER(Tensor)),
        ("alibi", ctypes.POINTER(Tensor)),
        ("softcap", ctypes.c_double),
        ("sinks", ctypes.POINTER(Tensor)),
        ("dropout_p", ctypes.c_double),
        ("seed", ctypes.c_uint64),
        ("threads", ctypes.c_int32),
        ("rope", ctypes.c_int),
        ("rope_base", ctypes.c_double),
        ("rope_dims", ctypes.c_int64),
        ("rope_q_positions", ctypes.POINTER(Tensor)),
        ("rope_k_positions", ctypes.POINTER(Tensor)),
        ("additive", ctypes.POINTER(Additive)),
    ]


class CacheOptions(ctypes.Structure):
    _fields_ = [
        ("kv_heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("max_tokens", ctypes.c_int64),
        ("key_dtype", ctypes.c_int),
        ("value_dtype", ctypes.c_int),
        ("rope", ctypes.c_int),
        ("rope_base", ctypes.c_double),
        ("rope_dims", ctypes.c_int64),
        ("rotate", ctypes.c_int),
    ]


def _load():
    """libxattn_c: $XATTN_LIBRARY, else the copy inside this package (build tree, install)."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("XATTN_LIBRARY", ""), os.path.join(here, "libxattn_c.so")]
    for path in candidates:
        if path and os.path.exists(path):
            return ctypes.CDLL(path)
    raise ImportError(
        "xattn: libxattn_c.so not found next to the package (%s) nor at $XATTN_LIBRARY; "
        "build it with `make test` (build/python/xattn) or `cmake --install`" % here)


lib = _load()
_T = ctypes.POINTER(Tensor)
lib.xattn_attention_defaults.restype = Desc
lib.xattn_attention_defaults.argtypes = []
lib.xattn_forward.restype = ctypes.c_int
lib.xattn_forward.argtypes = [_T, _T, _T, ctypes.POINTER(Desc), _T, _T]
lib.xattn_backward.restype = ctypes.c_int
lib.xattn_backward.argtypes = [_T, _T, _T, ctypes.POINTER(Desc), _T, _T, _T, _T, _T, _T, _T, _T]
lib.xattn_last_error.restype = ctypes.c_char_p
lib.xattn_last_error.argtypes = []
lib.xattn_version.restype = ctypes.c_char_p
lib.xattn_version.argtypes = []
_S, _Seq = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)
lib.xattn_cache_defaults.restype = CacheOptions
lib.xattn_cache_defaults.argtypes = []
lib.xattn_cache_create.restype = ctypes.c_void_p
lib.xattn_cache_create.argtypes = [ctypes.POINTER(CacheOptions)]
lib.xattn_cache_destroy.restype = None
lib.xattn_cache_destroy.argtypes = [ctypes.c_void_p]
for _name, _args in (("add_sequence", [ctypes.c_void_p, _Seq]), ("append", [ctypes.c_void_p, _S, _T, _T]),
                     ("fork", [ctypes.c_void_p, _S, _Seq]), ("release", [ctypes.c_void_p, _S]),
                     ("truncate", [ctypes.c_void_p, _S, ctypes.c_int64]),
                     ("keep", [ctypes.c_void_p, _S, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]),
                     ("length", [ctypes.c_void_p, _S, ctypes.POINTER(ctypes.c_int64)]),
                     ("reserve", [ctypes.c_void_p, ctypes.c_int64]),
                     ("attention", [ctypes.c_void_p, _Seq, ctypes.c_int64, _T, ctypes.POINTER(Desc), _T, _T])):
    getattr(lib, "xattn_cache_" + _name).restype = ctypes.c_int
    getattr(lib, "xattn_cache_" + _name).argtypes = _args


def check(status):
    """Raise the library's message as the Python exception its status stands for."""
    if status != OK:
        raise_for(status, lib.xattn_last_error().decode())


def raise_for(status, message):
    if status == INVALID_ARGUMENT:
        raise ValueError(message)
    if status == UNSUPPORTED:
        raise NotImplementedError(message)
    if status == OUT_OF_MEMORY:
        raise MemoryError(message)
    raise RuntimeError(message)


def refuse_jit_trace(who):
    """torch.jit.trace records torch's own operations only: a fused pass is a C call it does not
    see, so the traced function would return the same uninitialised buffer for every new input."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.jit.is_tracing():
        raise RuntimeError(
            "%s cannot be recorded by torch.jit.trace: its fused pass is a C call the tracer does not see, and "
            "the traced function would return uninitialised memory for every new input. Call it outside "
            "torch.jit.trace (eagerly)." % who)


def rope_options(rope, who, keys=("style", "base", "dims")):
    """rope= as a dict of the given keys with its style as a ROPE_* code, base and dims filled in
    (rope: "half", "interleaved", True or such a dict); None when rope is None or False."""
    if rope is None or rope is False:
        return None
    options = dict(rope) if isinstance(rope, dict) else {"style": rope}
    unknown = set(options) - set(keys)
    if unknown:
        raise ValueError("%s: rope has unknown keys %s (%s)" % (who, sorted(unknown), ", ".join(keys)))
    styles = {True: ROPE_HALF, "half": ROPE_HALF, "interleaved": ROPE_INTERLEAVED}
    style = options.get("style", "half")
    if style not in styles:
        raise ValueError("%s: rope style must be 'half' or 'interleaved', not %r" % (who, style))
    return dict(options, style=styles[style], base=float(options.get("base", 10000.0)),
                dims=int(options.get("dims", 0)))


def fx_call(fn, args, kwargs):
    """Under torch.fx.symbolic_trace (a Proxy among the arguments): the call recorded as one node of
    the graph, which calls fn when the graph runs; else None."""
    fx = sys.modules.get("torch.fx")
    if fx is None:
        return None
    for a in (*args, *kwargs.values()):
        if isinstance(a, fx.Proxy):
            return a.tracer.create_proxy("call_function", fn, tuple(args), dict(kwargs))
    return None


def storage_error(who, name):
    """The error for a tensor with no memory to read: one of functorch's (vmap, grad) wrappers."""
    return RuntimeError(
        "%s: %s has no memory of its own: it is a tensor of a functorch transform (vmap, grad, jacrev), which "
        "xattn, a C call on the tensors' memory, does not run under. Call it on the whole batch instead (its "
        "B axis is the batch vmap would map over), and take gradients with torch.autograd" % (who, name))


def once_differentiable(who, grads, inputs):
    """grads as a backward returns them. Asked for with create_graph=True while an input requires
    grad, the tensors among them carry a node that raises naming who if they are differentiated
    again: the fused backward is a C pass autograd cannot see into."""
    torch = sys.modules["torch"]
    if not torch.is_grad_enabled() or not any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
        return grads
    at = [i for i, g in enumerate(grads) if isinstance(g, torch.Tensor)]
    if not at:
        return grads
    error = torch._C._functions.DelayedError(
        "%s: the gradient of its gradient (double backward, create_graph=True) is not implemented: its backward "
        "is a fused C pass that autograd cannot differentiate" % who, len(at))
    wrapped = error(*[grads[i].detach().requires_grad_() for i in at])
    wrapped = wrapped if isinstance(wrapped, tuple) else (wrapped,)
    out = list(grads)
    for i, w in zip(at, wrapped):
        out[i] = w
    return tuple(out)
