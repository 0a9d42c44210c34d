"""xattn.KVCache: the C interface's paged key/value cache (vLLM's layout) for decoding from Python:
sequences appended token by token, forked (sharing their pages), attended as one ragged batch
whose queries sit at each sequence's own end."""

import ctypes
import sys

from . import _c

__all__ = ["KVCache"]

_DTYPES = {"float32": _c.F32, "bfloat16": _c.BF16, "float16": _c.F16, "int8": _c.Q8_0, "float8_e4m3": _c.FP8_E4M3,
           "q4_0": _c.Q4_0, "q4c": _c.Q4C}


def _format(name, who):
    if name not in _DTYPES:
        raise ValueError("%s: dtype %r is not a cache format; one of %s" % (who, name, ", ".join(map(repr, _DTYPES))))
    return _DTYPES[name]


class KVCache:
    """A paged key/value cache of kv_heads heads of head_dim features.

    dtype: "float32", "bfloat16", "float16", "int8" (llama.cpp's q8_0: a float scale per 32
    features of each token and head), "float8_e4m3" (OCP E4M3 codes, a float scale per 32 features)
    or "q4_0" (llama.cpp's 4-bit q4_0), or a pair (keys, values) of them; float8_e4m3 and q4_0 keys
    and values go together, and ("q4c", "q4_0") stores keys per channel over each page's tokens
    (KIVI: 4-bit codes, a step and a minimum per feature; pages of 64 tokens or more). page_size
    tokens per page;
    max_tokens bounds the pool (pages are allocated as they are first used, or by reserve).
    rope: None, "half" (LLaMA), "interleaved" (GPT-J) or a dict(style, base=10000, dims=0): keys
    are stored rotated at their positions in their sequence, and attention rotates the queries at
    theirs (the newest tokens of each sequence), as vLLM and llama.cpp do.
    rotate: keys stored turned by a Hadamard rotation, which spreads outlier channels before a
    quantized format takes its scales (queries turn alike at attention: scores are unchanged).

        cache = xattn.KVCache(kv_heads=8, head_dim=128, dtype="int8", page_size=16, max_tokens=1 << 20)
        a = cache.add_sequence(); cache.append(a, k_rows, v_rows)   # (Hkv, n, D)
        b = cache.fork(a)
        out = cache.attention(q, [a, b], causal=True)                 # q (2, Hq, n_new, D)
        cache.release(b)

    Every failed call raises (ValueError for shapes, dtypes, ids, MemoryError for a full pool) and
    leaves the cache as it was.
    """

    def __init__(self, kv_heads, head_dim, dtype="float32", page_size=16, max_tokens=1 << 16, rope=None,
                 rotate=False):
        who = "xattn.KVCache"
        keys, values = (dtype, dtype) if isinstance(dtype, str) else tuple(dtype)
        o = _c.lib.xattn_cache_defaults()
        options = _c.rope_options(rope, who)
        if options is not None:
            o.rope, o.rope_base, o.rope_dims = options["style"], options["base"], options["dims"]
        o.kv_heads, o.head_dim, o.page_size, o.max_tokens = int(kv_heads), int(head_dim), int(page_size), \
            int(max_tokens)
        o.key_dtype, o.value_dtype = _format(keys, who), _format(values, who)
        o.rotate = 1 if rotate else 0
        self._handle = _c.lib.xattn_cache_create(ctypes.byref(o))
        if not self._handle:
            _c.raise_for(_c.INVALID_ARGUMENT, _c.lib.xattn_last_error().decode())
        self.kv_heads, self.head_dim, self.page_size, self.max_tokens = o.kv_heads, o.head_dim, o.page_size, \
            o.max_tokens
        self.dtype, self.rope, self.rotate = (keys, values), rope, bool(rotate)
        self._destroy = _c.lib.xattn_cache_destroy  # kept: at exit the module may go before the cache

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            self._destroy(handle)

    def add_sequence(self):
        """A new, empty sequence: its id (an int)."""
        out = ctypes.c_uint64()
        _c.check(_c.lib.xattn_cache_add_sequence(self._handle, ctypes.byref(out)))
        return out.value

    def append(self, seq, k_rows, v_rows):
        """Appends n tokens: k_rows and v_rows (kv_heads, n, head_dim), torch tensors or numpy arrays
        of float32, float64, bfloat16 or float16, in any strides."""
        from . import _view

        k, v = _view(k_rows, "k_rows", who="KVCache.append"), _view(v_rows, "v_rows", who="KVCache.append")
        _c.check(_c.lib.xattn_cache_append(self._handle, _id(seq), ctypes.byref(k), ctypes.byref(v)))

    def fork(self, seq):
        """A sequence holding seq's tokens, sharing its pages."""
        out = ctypes.c_uint64()
        _c.check(_c.lib.xattn_cache_fork(self._handle, _id(seq), ctypes.byref(out)))
        return out.value

    def release(self, seq):
        """Returns seq's pages to the pool (those no fork holds); seq is invalid afterwards."""
        _c.check(_c.lib.xattn_cache_release(self._handle, _id(seq)))

    def truncate(self, seq, length):
        """Keeps seq's first `length` tokens (speculative decoding's rollback of rejected draft
        tokens): the pages past them go back to the pool, those a fork holds stay with it."""
        if isinstance(length, bool) or not isinstance(length, int):
            raise TypeError("KVCache.truncate: length is %r; it must be an int" % (length,))
        _c.check(_c.lib.xattn_cache_truncate(self._handle, _id(seq), length))

    def keep(self, seq, positions):
        """Keeps only seq's tokens at `positions` (increasing ints, each below its length), in that
        order (eviction: heavy hitters, attention sinks and a window): token positions[i] becomes
        token i. Pages a fork shares are copied before they are written; bad positions raise
        ValueError and change nothing."""
        try:
            given = list(positions)
        except TypeError:
            raise TypeError("KVCache.keep: positions is %r; it must be a sequence of ints" % (positions,)) from None
        kept = []
        for p in given:
            try:
                whole = not isinstance(p, bool) and int(p) == p
            except (TypeError, ValueError):
                whole = False
            if not whole:
                raise TypeError("KVCache.keep: positions holds %r; positions are ints" % (p,))
            kept.append(int(p))
        arr = (ctypes.c_int64 * max(1, len(kept)))(*kept)
        _c.check(_c.lib.xattn_cache_keep(self._handle, _id(seq), arr, len(kept)))

    def length(self, seq):
        out = ctypes.c_int64()
        _c.check(_c.lib.xattn_cache_length(self._handle, _id(seq), ctypes.byref(out)))
        return out.value

    def reserve(self, tokens):
        """Allocates the pool's memory for `tokens` tokens now."""
        _c.check(_c.lib.xattn_cache_reserve(self._handle, int(tokens)))

    def attention(self, q, seqs, *, causal=False, window=None, softcap=None, sinks=None, scale=None, threads=0,
                  mask=None, alibi=None, out=None):
        """softmax(q kᵀ · scale) v over the keys and values of the sequences seqs, one batch row per
        sequence: q (len(seqs), Hq, n_new, head_dim) (Hq a multiple of kv_heads), float32, bfloat16
        or float16; the result (len(seqs), Hq, n_new, head_dim) in q's type, or written into out.
        The n_new queries of row b are the newest tokens of seqs[b]: causal=True lets each see the
        keys up to its own position in its own sequence, window=(left, right) bounds are measured
        there too, so sequences of different lengths decode as one batch, as ALiBi's distances (alibi:
        (Hq,) slopes). mask broadcasts to (len(seqs), Hq, n_new, the longest length), column j being
        token j of each sequence: bool (True = attend) or float (added). softcap, sinks (Hq,), scale
        (None: 1/sqrt(head_dim)) and threads as xattn.attention's. No gradient."""
        from . import _forward_desc

        who = "KVCache.attention"
        if sys.modules.get("torch") is not None and type(q).__module__.startswith("torch"):
            import torch

            if torch.is_grad_enabled() and q.requires_grad:
                raise NotImplementedError("%s: attention over a cache has no backward; call it under "
                                          "torch.no_grad() or on a q that does not require grad" % who)
        if causal not in (False, True, "bottom_right"):
            raise ValueError("%s: causal must be False or True (each query at its own sequence's end), not %r"
                             % (who, causal))
        ids = (ctypes.c_uint64 * max(1, len(seqs)))(*[_id(s) for s in seqs])
        result, run = _forward_desc(q, self.head_dim, scale, "bottom_right" if causal else False, window, softcap,
                                    sinks, threads, out, who, mask=mask, alibi=alibi)
        run(lambda Q, desc, O, L: _c.lib.xattn_cache_attention(self._handle, ids, len(seqs), Q, desc, O, L))
        return result


def _id(seq):
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise TypeError("xattn.KVCache: a sequence id is the int add_sequence or fork returned, not %r" % (seq,))
    return seq
