"""FlexAttention on the CPU, forward and backward: score_mod(score, b, h, q_idx, kv_idx) and
mask_mod(b, h, q_idx, kv_idx) written in Python are traced once per call into C++ (a score modifier
and a mask predicate of the C++ DSL), compiled on first use and cached by the traced graph, and run
as one fused pass. Captured tensors that require grad receive their gradients, summed in a fixed
order (the same bits on any thread count).

    from xattn.flex import flex_attention, create_block_mask, and_masks, or_masks
    block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=S, KV_LEN=S)
    out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)

Signatures and semantics follow torch.nn.attention.flex_attention (PyTorch 2.5); docs/python.md
says where they differ.
"""

import collections
import ctypes
import math
import struct

import torch

from . import _c, _flexgen, _jit, _trace
from ._trace import FLOAT, INT, TraceError

__all__ = ["flex_attention", "create_block_mask", "BlockMask", "and_masks", "or_masks", "noop_mask", "TraceError"]

_BLOCK_SIZE = 128
_EMPTY, _PARTIAL, _FULL = 0, 1, 2


def noop_mask(b, h, q_idx, kv_idx):
    """Every key visible."""
    return q_idx >= 0


def _combined(mask_mods, op, word):
    if not mask_mods:
        raise ValueError("%s needs at least one mask_mod" % word)

    def combined(b, h, q_idx, kv_idx):
        r = mask_mods[0](b, h, q_idx, kv_idx)
        for m in mask_mods[1:]:
            r = op(r, m(b, h, q_idx, kv_idx))
        return r

    combined.__name__ = "%s(%s)" % (word, ", ".join(getattr(m, "__name__", "mask") for m in mask_mods))
    return combined


def and_masks(*mask_mods):
    """A mask_mod that shows a pair when every one of mask_mods does."""
    return _combined(mask_mods, lambda a, b: a & b, "and_masks")


def or_masks(*mask_mods):
    """A mask_mod that shows a pair when any of mask_mods does."""
    return _combined(mask_mods, lambda a, b: a | b, "or_masks")


class BlockMask:
    """Which (query block, key block) pairs are empty, partial or full, and the mask_mod that decides
    the pairs of partial blocks. kinds: int64 (B or 1, H or 1, ceil(Q_LEN / BLOCK_SIZE[0]),
    ceil(KV_LEN / BLOCK_SIZE[1])) of 0 (empty: skipped), 1 (partial: mask_mod asked per pair),
    2 (full: run without it)."""

    def __init__(self, kinds, block_size, mask_mod, q_len, kv_len, row_spans=None, fine=None):
        self.kinds, self.BLOCK_SIZE, self.mask_mod = kinds, block_size, mask_mod
        self.seq_lengths = (q_len, kv_len)
        self.row_spans = row_spans  # (B, H, Q_LEN, 3): each row's span of visible keys, and whether it is exact
        # what the pass reads: the same classification in blocks of at most 16 x 16
        self.fine, self.fine_size = fine if fine is not None else (kinds, block_size)
        self.has_partial = bool((self.fine == _PARTIAL).any())
        # every row sees one run of keys: the spans decide, mask_mod is not compiled in
        self.rows_are_spans = row_spans is not None and bool((row_spans[..., 2] == 1).all())

    @property
    def shape(self):
        return (self.kinds.shape[0], self.kinds.shape[1], *self.seq_lengths)

    def sparsity(self):
        """The percentage of blocks skipped."""
        return 100.0 * float((self.kinds == _EMPTY).sum()) / max(1, self.kinds.numel())

    def to_dense(self):
        """The kinds as a (B, H, query blocks, key blocks) int64 tensor."""
        return self.kinds.clone()

    def __repr__(self):
        n = self.kinds.numel()
        count = [int((self.kinds == k).sum()) for k in (_EMPTY, _PARTIAL, _FULL)]
        return ("BlockMask(shape=%s, BLOCK_SIZE=%s, %d blocks: %d empty, %d partial, %d full, sparsity=%.2f%%)"
                % (self.shape, self.BLOCK_SIZE, n, *count, self.sparsity()))


def _block_sizes(BLOCK_SIZE):
    if isinstance(BLOCK_SIZE, int):
        return BLOCK_SIZE, BLOCK_SIZE
    q, kv = BLOCK_SIZE
    return int(q), int(kv)


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cpu", BLOCK_SIZE=_BLOCK_SIZE, _compile=False):
    """The BlockMask of mask_mod over (B, H, Q_LEN, KV_LEN); B or H None: the same for every batch
    row or head (mask_mod then sees b = 0 or h = 0). mask_mod is evaluated on index tensors, one
    query block at a time."""
    if torch.device(device).type != "cpu":
        raise ValueError("create_block_mask: xattn runs on the CPU; device must be 'cpu', not %r" % (device,))
    qbs, kbs = _block_sizes(BLOCK_SIZE)
    if qbs <= 0 or kbs <= 0:
        raise ValueError("create_block_mask: BLOCK_SIZE must be positive, not %r" % (BLOCK_SIZE,))
    for name, n in (("Q_LEN", Q_LEN), ("KV_LEN", KV_LEN)):
        if not isinstance(n, int) or n < 0:
            raise ValueError("create_block_mask: %s must be an int >= 0, not %r" % (name, n))
    nb, nh = (1 if B is None else int(B)), (1 if H is None else int(H))
    nq, nk = -(-Q_LEN // qbs), -(-KV_LEN // kbs)
    # the pass classifies its own tiles, which are finer than 128: it reads a finer table
    fq, fk = (16 if qbs % 16 == 0 else qbs), (16 if kbs % 16 == 0 else kbs)
    kinds = torch.zeros(nb, nh, nq, nk, dtype=torch.int64)
    fine = torch.zeros(nb, nh, -(-Q_LEN // fq), -(-KV_LEN // fk), dtype=torch.int64)
    # each row's first and past-last visible key, and 1 when the row sees exactly those (causal,
    # windows, prefixes): the pass then trims and fills by them and never calls mask_mod
    spans = torch.zeros(nb, nh, Q_LEN, 3, dtype=torch.int64)
    kv = torch.arange(KV_LEN)
    b = torch.arange(nb).view(-1, 1, 1, 1)
    h = torch.arange(nh).view(1, -1, 1, 1)
    with torch.no_grad():
        for qb in range(nq):
            q = torch.arange(qb * qbs, min(Q_LEN, (qb + 1) * qbs))
            m = torch.as_tensor(mask_mod(b, h, q.view(1, 1, -1, 1), kv.view(1, 1, 1, -1)))
            if m.dtype != torch.bool:
                m = m != 0
            m = m.expand(nb, nh, len(q), KV_LEN)
            kinds[:, :, qb] = _kinds_of(m, qbs, kbs)[:, :, 0]
            fine[:, :, qb * qbs // fq:qb * qbs // fq + -(-len(q) // fq)] = _kinds_of(m, fq, fk)
            if KV_LEN:
                seen = m.any(-1)
                first = torch.where(seen, m.to(torch.int8).argmax(-1), 0)
                last = torch.where(seen, KV_LEN - m.flip(-1).to(torch.int8).argmax(-1), 0)
                spans[:, :, q, 0], spans[:, :, q, 1] = first, last
                spans[:, :, q, 2] = (m.sum(-1) == last - first).to(torch.int64)
    return BlockMask(kinds, (qbs, kbs), mask_mod, Q_LEN, KV_LEN, spans, (fine, (fq, fk)))


def _kinds_of(m, rows, cols):
    """Each rows x cols block of the visibility m (nb, nh, L, K) as empty, partial or full."""
    nb, nh, L, K = m.shape
    nr, nc = -(-L // rows), -(-K // cols)
    shown = torch.zeros(nb, nh, nr * rows, nc * cols, dtype=torch.bool)
    shown[..., :L, :K] = m
    valid = torch.zeros(nr * rows, nc * cols, dtype=torch.bool)
    valid[:L, :K] = True
    counts = shown.view(nb, nh, nr, rows, nc, cols).sum((3, 5))
    total = valid.view(nr, rows, nc, cols).sum((1, 3))
    return torch.where(counts == 0, _EMPTY, torch.where(counts == total, _FULL, _PARTIAL))


# ---- the compiled kernels ---------------------------------------------------------------------

_libraries = {}  # by the traced graphs' keys (cheaper than generating their source)


def _library(score, mask, double):
    key = (score.key if score else None, mask.key if mask else None, double)
    lib = _libraries.get(key)
    if lib is None:
        src = _flexgen.source((score.tracer, score.result) if score else None,
                              (mask.tracer, mask.result) if mask else None, double)
        # -O3: the generated pass runs 5-15 % faster than at the package's -O2 (the softmax and
        # backward rows inline), for about a fifth more compile time
        lib = ctypes.CDLL(_jit.compile_shared(src, "flex_attention's generated kernel", ("-O3",)))
        T = ctypes.POINTER(_c.Tensor)
        i64 = ctypes.c_int64
        lib.xattn_flex_forward.restype = ctypes.c_int
        lib.xattn_flex_forward.argtypes = [T, T, T, ctypes.POINTER(_c.Desc), T, T, T, T, T, T, i64, i64]
        lib.xattn_flex_backward.restype = ctypes.c_int
        lib.xattn_flex_backward.argtypes = [T, T, T, ctypes.POINTER(_c.Desc), T, T, T, T, T, T, T, T, T, T, i64, i64,
                                            ctypes.POINTER(ctypes.c_double)]
        lib.xattn_flex_last_error.restype = ctypes.c_char_p
        _libraries[key] = lib
    return lib


def _check(lib, status):
    if status != _c.OK:
        _c.raise_for(status, lib.xattn_flex_last_error().decode())


_CODES = {torch.float32: _c.F32, torch.float64: _c.F64, torch.bfloat16: _c.BF16, torch.float16: _c.F16,
          torch.int64: _c.I64}


_pack = struct.Struct("@Pii%dq%dq" % (_c.MAX_RANK, _c.MAX_RANK)).pack


def _view(x):
    if x is None:
        return None
    pad = (0,) * (_c.MAX_RANK - x.dim())
    return _c.Tensor.from_buffer_copy(_pack(x.data_ptr(), _CODES[x.dtype], x.dim(), *x.shape, *pad, *x.stride(), *pad))


def _ref(t):
    return None if t is None else ctypes.byref(t)


class _Call:
    """One call's kernel and everything it reads besides q, k, v: the captures as the kernel takes
    them (float64 or int64; learning ones float64 copies), the block table, the descriptor."""

    def __init__(self, lib, score, mask, block_mask, scale, threads, double, memo_bounds=None):
        self.lib, self.double = lib, double
        self.score_tensors = [self._as_read(c) for c in score.captures] if score else []
        self.memo_bounds = memo_bounds  # after the captures, as the generated code reads them
        extra = [memo_bounds] if memo_bounds is not None else []
        self.score_views = self._array(self.score_tensors + extra)
        self.learning = [c for c in score.captures if c.learns] if score else []
        self.mask_tensors = [self._as_read(c) for c in mask.captures] if mask else []
        self.mask_views = self._array(self.mask_tensors)
        self.kinds = block_mask.fine.contiguous() if block_mask is not None else None
        self.kinds_view = _view(self.kinds)
        self.spans = block_mask.row_spans if block_mask is not None else None
        self.spans_view = _view(self.spans)
        self.blocks = block_mask.fine_size if block_mask is not None else (1, 1)
        self.desc = _c.lib.xattn_attention_defaults()
        self.desc.scale = float(scale)
        self.desc.threads = int(threads)
        self.learning_tensors = [c.tensor for c in self.learning]
        # converted copies are refreshed on every call: a capture changed in place is always read as it is now
        captures = (score.captures if score else []) + (mask.captures if mask else [])
        self._copies = [(t, c.tensor) for c, t in zip(captures, self.score_tensors + self.mask_tensors)
                        if t.data_ptr() != c.tensor.data_ptr()]
        # what every call passes after q, k, v and the outputs, built once
        self._reads = (self.score_views, self.mask_views, _ref(self.kinds_view), _ref(self.spans_view), *self.blocks)
        self._desc = ctypes.byref(self.desc)

    @staticmethod
    def _as_read(c):
        t = c.tensor.detach()
        return t.to(torch.float64 if c.kind == FLOAT else torch.int64)

    @staticmethod
    def _array(tensors):
        if not tensors:
            return None
        return (_c.Tensor * len(tensors))(*[_view(t) for t in tensors])

    def _refresh(self):
        for copy, tensor in self._copies:
            copy.copy_(tensor.detach())

    def forward(self, q, k, v, out=None):
        self._refresh()
        shape = (q.shape[0], q.shape[1], q.shape[2], v.shape[3])
        if out is None:
            out = torch.empty(shape, dtype=q.dtype)
        lse = torch.empty(shape[:3], dtype=torch.float64 if self.double else torch.float32)
        byref = ctypes.byref
        _check(self.lib, self.lib.xattn_flex_forward(
            byref(_view(q)), byref(_view(k)), byref(_view(v)), self._desc, byref(_view(out)), byref(_view(lse)),
            *self._reads))
        return out, lse

    def backward(self, q, k, v, out, lse, d_out, wanted):
        self._refresh()
        grads = [torch.empty(x.shape, dtype=x.dtype) if w else None for x, w in zip((q, k, v), wanted)]
        sizes = [self.score_tensors[c.slot].numel() for c in self.learning]
        d_tables = torch.zeros(max(1, sum(sizes)), dtype=torch.float64)
        d_out = d_out.contiguous()  # alive through the call: the view holds its address only
        args = [_view(x) for x in (q, k, v)] + [_view(out), _view(lse), _view(d_out)]
        views = [_view(g) for g in grads]
        _check(self.lib, self.lib.xattn_flex_backward(
            *[ctypes.byref(a) for a in args[:3]], self._desc, *[ctypes.byref(a) for a in args[3:]],
            *map(_ref, views), *self._reads,
            ctypes.cast(d_tables.data_ptr(), ctypes.POINTER(ctypes.c_double))))
        tables, at = [], 0
        for c, n in zip(self.learning, sizes):
            tables.append(d_tables[at:at + n].view(c.tensor.shape).to(c.tensor.dtype))
            at += n
        return grads, tables


class _Flex(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call, q, k, v, *learning):
        out, lse = call.forward(q, k, v)
        ctx.call = call
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        grads, tables = ctx.call.backward(q, k, v, out, lse, d_out, ctx.needs_input_grad[1:4])
        tables = [t if want else None for t, want in zip(tables, ctx.needs_input_grad[4:])]
        return _c.once_differentiable("xattn.flex_attention", (None, *grads, *tables),
                                      (q, k, v, *ctx.call.learning_tensors))


def _empty_result(q, k, v, return_lse, lse_dtype):
    shape = (q.shape[0], q.shape[1], q.shape[2], v.shape[3])
    out = torch.zeros(shape, dtype=q.dtype)
    if any(x.requires_grad for x in (q, k, v)) and torch.is_grad_enabled():
        out = out + (q.sum() + k.sum() + v.sum()).to(q.dtype) * 0  # zero gradients of the right shapes
    lse = torch.full(shape[:3], -math.inf, dtype=lse_dtype)
    return (out, lse) if return_lse else out


def _trace_score(score_mod, learning):
    return _trace.traced(score_mod, ("score", "b", "h", "q_idx", "kv_idx"), (FLOAT, INT, INT, INT, INT), learning,
                         getattr(score_mod, "__name__", "score_mod"))


def _trace_mask(mask_mod):
    return _trace.traced(mask_mod, ("b", "h", "q_idx", "kv_idx"), (INT, INT, INT, INT), False,
                         getattr(mask_mod, "__name__", "mask_mod"))


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, threads=0, out=None):
    """softmax(score_mod(query key^T * scale) masked by block_mask) value, fused, on the CPU.

    query (B, Hq, Sq, D), key (B, Hkv, Skv, D), value (B, Hkv, Skv, Dv), torch tensors or numpy
    arrays of one dtype (float32, float64, bfloat16, float16); Hq == Hkv unless enable_gqa (Hq a
    multiple of Hkv). scale: None for 1/sqrt(D). A row that sees no key gives 0 and an lse of
    -inf. return_lse: also the log-sum-exp of each row's scores (B, Hq, Sq), float32 (float64 for
    float64 inputs), without a gradient. threads: 0 for OpenMP's default. kernel_options is
    accepted and ignored. out: a tensor (array) of the result's shape and dtype, in any strides
    that give each element its own address, written in place and returned."""
    _c.refuse_jit_trace("xattn.flex_attention")
    if any(isinstance(x, torch.fx.Proxy) for x in (query, key, value)):
        raise RuntimeError("xattn.flex_attention cannot be recorded by torch.fx.symbolic_trace: its score_mod and "
                           "mask_mod are Python functions xattn traces itself. Call it from a module the tracer "
                           "keeps as a leaf (is_leaf_module), or outside symbolic_trace")
    numpy = not isinstance(query, torch.Tensor)
    given_out = out  # returned as given
    if numpy:
        import numpy as np

        query, key, value = (torch.from_numpy(np.ascontiguousarray(x)) for x in (query, key, value))
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError("flex_attention: out must be a numpy array like query, not %s" % type(out))
            out = torch.from_numpy(out)  # the same memory
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor):
            raise TypeError("flex_attention: %s must be a torch tensor or numpy array, not %s" % (name, type(x)))
        if x.dim() != 4:
            raise ValueError("flex_attention: %s has shape %s; it must be (B, H, S, D)" % (name, tuple(x.shape)))
        if x.device.type != "cpu":
            raise ValueError("flex_attention: %s is on %s; xattn runs on the CPU" % (name, x.device))
        try:
            x.data_ptr()
        except RuntimeError:
            raise _c.storage_error("xattn.flex_attention", name) from None
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in _CODES or query.dtype == torch.int64:
        raise TypeError("flex_attention: query, key and value must share one float dtype (float32, float64, "
                        "bfloat16, float16), got %s, %s, %s" % (query.dtype, key.dtype, value.dtype))
    (B, Hq, Sq, D), (_, Hkv, Skv, _) = query.shape, key.shape
    if key.shape[0] != B or value.shape[0] != B or key.shape[3] != D or value.shape[1] != Hkv or \
            value.shape[2] != Skv:
        raise ValueError("flex_attention: query %s, key %s and value %s do not fit: (B, Hq, Sq, D), (B, Hkv, Skv, D), "
                         "(B, Hkv, Skv, Dv)" % (tuple(query.shape), tuple(key.shape), tuple(value.shape)))
    if Hkv == 0 or Hq % Hkv != 0 or (Hq != Hkv and not enable_gqa):
        raise ValueError("flex_attention: query has %d heads and key/value %d; they must be equal, or Hq a multiple "
                         "of Hkv with enable_gqa=True" % (Hq, Hkv))
    if block_mask is not None:
        if not isinstance(block_mask, BlockMask):
            raise TypeError("flex_attention: block_mask must come from create_block_mask, not %s" % type(block_mask))
        nb, nh = block_mask.kinds.shape[:2]
        if block_mask.seq_lengths != (Sq, Skv) or nb not in (1, B) or nh not in (1, Hq):
            raise ValueError("flex_attention: block_mask has shape %s, the attention (%d, %d, %d, %d); B and H must "
                             "match or be 1, Q_LEN and KV_LEN match" % (block_mask.shape, B, Hq, Sq, Skv))
    if out is not None:
        want = (B, Hq, Sq, value.shape[3])
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want or out.dtype != query.dtype:
            raise ValueError("flex_attention: out must be a %s of shape %s and dtype %s, got %s"
                             % ("numpy array" if numpy else "torch tensor", want, query.dtype,
                                (tuple(out.shape), out.dtype) if isinstance(out, torch.Tensor) else type(out)))
        if out.requires_grad:
            raise ValueError("flex_attention: out requires grad; it is overwritten, so pass a tensor that does not "
                             "(the result still backpropagates)")
    double = query.dtype == torch.float64
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    lse_dtype = torch.float64 if double else torch.float32
    learning = torch.is_grad_enabled()

    score = mask = None
    if score_mod is not None:
        score = _trace_score(score_mod, learning)
        if score.result.kind != FLOAT and score.result.kind != INT:
            raise TraceError("flex_attention: score_mod returns a bool; it must return the new score")
    if block_mask is not None and block_mask.has_partial and not block_mask.rows_are_spans:
        mask = _trace_mask(block_mask.mask_mod)
    if block_mask is not None and mask is None:  # the table and the spans alone decide
        mask = _no_partial(block_mask)
    call = _call(score, mask, block_mask, scale, int(threads), double, (B, Hq, Sq, Skv))
    if call is None:  # nothing to compute
        r = _empty_result(query, key, value, return_lse, lse_dtype)
        if out is not None:
            out.copy_(r[0] if return_lse else r)
            r = (given_out, r[1]) if return_lse else given_out
            if numpy:
                return (r[0], r[1].numpy()) if return_lse else r
        return tuple(x.numpy() for x in r) if numpy and return_lse else (r.numpy() if numpy else r)
    learning_tensors = call.learning_tensors
    into = out
    if learning and any(x.requires_grad for x in (query, key, value, *learning_tensors)):
        out, lse = _Flex.apply(call, query, key, value, *learning_tensors)
        if into is not None:
            # autograd cannot take a view written in place by a function of two results (out, lse):
            # one copy, whose history autograd keeps
            into.copy_(out)
    else:
        out, lse = call.forward(query, key, value, into)
    if numpy:
        out, lse = out.numpy(), lse.numpy()
    if given_out is not None:
        out = given_out  # written in place (a view's history runs through its base)
    return (out, lse) if return_lse else out


_calls = collections.OrderedDict()


def _call(score, mask, block_mask, scale, threads, double, shape):
    """The _Call of these traced functions, block mask and sizes, or None when the attention is
    empty; kept while the integer captures' versions stay the same (their values were checked as
    indices), so that a call of a known shape builds no descriptors and views again."""
    captures = (score.tracer.captures if score else []) + (mask.tracer.captures if mask else [])
    key = (score, mask, block_mask, scale, threads, double, shape,
           tuple(c.tensor._version for c in captures if c.kind != FLOAT))
    call = _calls.get(key)
    if call is not None:
        _calls.move_to_end(key)
        return call
    B, Hq, Sq, Skv = shape
    sizes = {"b": B, "h": Hq, "q_idx": Sq, "kv_idx": Skv}
    if mask:
        mask.check_indices(sizes)
    memo_bounds = _memo_bounds(score, score.check_indices(sizes)) if score else None
    if min(shape) == 0:
        return None
    call = _Call(_library(score, mask, double), score.tracer if score else None, mask.tracer if mask else None,
                 block_mask, scale, threads, double, memo_bounds)
    _calls[key] = call
    if len(_calls) > 16:
        _calls.popitem(last=False)
    return call


_MEMO_LIMIT = 1 << 22


def _memo_bounds(score, ranges):
    """The range of each memo table of the score's code for this call (lo > hi: none; the code
    then computes those values per score), as the (memos, 2) int64 tensor the code reads."""
    if not hasattr(score, "memos"):
        score.memos = _flexgen.memo_plan(score.tracer, score.result)
    if not score.memos:
        return None
    bounds = []
    for _, d in score.memos:
        lo, hi = ranges[d.id]
        ok = math.isfinite(lo) and math.isfinite(hi) and 0 <= hi - lo < _MEMO_LIMIT
        bounds.append((int(lo), int(hi)) if ok else (0, -1))
    return torch.tensor(bounds, dtype=torch.int64)


def _no_partial(block_mask):
    """The mask a table without partial blocks compiles with: the predicate is never asked."""
    return _trace_mask(noop_mask)
