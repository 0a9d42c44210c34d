"""ctypes declarations of libxattn_c (c/include/xattn.h) and the tensors handed to it."""

import ctypes
import os
import sys

MAX_RANK = 4

F32, F64, BF16, F16, I32, I64, BOOL = range(7)
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
        ("dropout_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("threads", ctypes.c_int32),
        ("rope", ctypes.c_int),
        ("rope_base", ctypes.c_double),
        ("rope_dims", ctypes.c_int64),
        ("rope_q_positions", ctypes.POINTER(Tensor)),
        ("rope_k_positions", ctypes.POINTER(Tensor)),
        ("additive", ctypes.POINTER(Additive)),
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
