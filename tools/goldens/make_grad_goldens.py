#!/usr/bin/python3
"""Golden gradients from PyTorch autograd, run on the seeds' own PyTorch code.

The d2l.ai chapter "Attention Scoring Functions" (PyTorch version) defines masked_softmax,
DotProductAttention and AdditiveAttention; they are reproduced below as the chapter writes them (d2l.sequence_mask
inlined). Everything runs in float64 with autograd; the inputs, the upstream gradient and the
gradients PyTorch computes are written to small JSON files that the C++ tests read, so `make test`
needs no torch. Regenerate with `make goldens` (Debian's python3-torch, run by /usr/bin/python3).

d2l.ai is licensed CC BY-SA 4.0 (text) and MIT-0 (code); see tests/data/goldens/README.md.
"""
import json
import math
import sys
import warnings

import torch
from torch import nn


# ---- d2l.ai, chapter "Attention Scoring Functions", PyTorch code --------------------------------
def sequence_mask(X, valid_len, value=0):
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(X, valid_lens):
    """Perform softmax operation by masking elements on the last axis."""
    # X: 3D tensor, valid_lens: 1D or 2D tensor
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    else:
        shape = X.shape
        if valid_lens.dim() == 1:
            valid_lens = torch.repeat_interleave(valid_lens, shape[1])
        else:
            valid_lens = valid_lens.reshape(-1)
        # On the last axis, replace masked elements with a very large negative
        # value, whose exponentiation outputs 0
        X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
        return nn.functional.softmax(X.reshape(shape), dim=-1)


class DotProductAttention(nn.Module):
    """Scaled dot product attention."""

    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    # Shape of queries: (batch_size, no. of queries, d)
    # Shape of keys: (batch_size, no. of key-value pairs, d)
    # Shape of values: (batch_size, no. of key-value pairs, value dimension)
    # Shape of valid_lens: (batch_size,) or (batch_size, no. of queries)
    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        # Swap the last two dimensions of keys with keys.transpose(1, 2)
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class AdditiveAttention(nn.Module):
    """Additive attention."""

    def __init__(self, num_hiddens, dropout, **kwargs):
        super(AdditiveAttention, self).__init__(**kwargs)
        self.W_k = nn.LazyLinear(num_hiddens, bias=False)
        self.W_q = nn.LazyLinear(num_hiddens, bias=False)
        self.w_v = nn.LazyLinear(1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens):
        queries, keys = self.W_q(queries), self.W_k(keys)
        # After dimension expansion, shape of queries: (batch_size, no. of
        # queries, 1, num_hiddens) and shape of keys: (batch_size, 1, no. of
        # key-value pairs, num_hiddens). Sum them up with broadcasting
        features = queries.unsqueeze(2) + keys.unsqueeze(1)
        features = torch.tanh(features)
        # There is only one output of self.w_v, so we remove the last
        # one-dimensional entry from the shape. Shape of scores: (batch_size,
        # no. of queries, no. of key-value pairs)
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        # Shape of values: (batch_size, no. of key-value pairs, value
        # dimension)
        return torch.bmm(self.dropout(self.attention_weights), values)
# -------------------------------------------------------------------------------------------------


def tensor(t):
    return {"shape": list(t.shape), "data": [float(x) for x in t.detach().reshape(-1).tolist()]}


def ints(t):
    return {"shape": list(t.shape), "data": [int(x) for x in t.reshape(-1).tolist()]}


def masked_softmax_case(name, x, valid_lens, gen):
    x = x.clone().requires_grad_(True)
    y = masked_softmax(x.clone(), valid_lens)  # d2l masks a non-leaf (the scores) in place: so must we
    d_y = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    y.backward(d_y)
    return {"name": name, "X": tensor(x), "valid_lens": ints(valid_lens), "weights": tensor(y), "d_weights": tensor(d_y),
            "d_X": tensor(x.grad)}


def dot_product_case(name, q, k, v, valid_lens, gen):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    attention = DotProductAttention(dropout=0.5)
    attention.eval()
    out = attention(q, k, v, valid_lens)
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    out.backward(d_out)
    return {"name": name, "queries": tensor(q), "keys": tensor(k), "values": tensor(v), "valid_lens": ints(valid_lens),
            "output": tensor(out), "d_output": tensor(d_out), "d_queries": tensor(q.grad), "d_keys": tensor(k.grad),
            "d_values": tensor(v.grad)}


def additive_case(name, q, k, v, valid_lens, num_hiddens, gen):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    attention = AdditiveAttention(num_hiddens=num_hiddens, dropout=0.1).double()
    attention.eval()
    attention(q, k, v, valid_lens)  # materialises the lazy layers (torch's default init)
    for layer in (attention.W_q, attention.W_k, attention.w_v):  # then weights from our generator
        with torch.no_grad():
            layer.weight.copy_(torch.randn(layer.weight.shape, dtype=torch.float64, generator=gen) * 0.5)
    out = attention(q, k, v, valid_lens)
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    out.backward(d_out)
    return {"name": name, "queries": tensor(q), "keys": tensor(k), "values": tensor(v), "valid_lens": ints(valid_lens),
            "W_q": tensor(attention.W_q.weight), "W_k": tensor(attention.W_k.weight),
            "w_v": tensor(attention.w_v.weight), "output": tensor(out), "d_output": tensor(d_out),
            "d_queries": tensor(q.grad), "d_keys": tensor(k.grad), "d_values": tensor(v.grad),
            "d_W_q": tensor(attention.W_q.weight.grad), "d_W_k": tensor(attention.W_k.weight.grad),
            "d_w_v": tensor(attention.w_v.weight.grad)}


def mha_case(name, embed, heads, kdim, vdim, q, k, v, mask, gen):
    """torch.nn.MultiheadAttention (batch_first, biases, kdim/vdim apart) in float64; mask: bool,
    True = attend (equinox's and xattn's convention; torch's attn_mask is its negation)."""
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    mha = nn.MultiheadAttention(embed, heads, bias=True, batch_first=True, kdim=kdim, vdim=vdim).double()
    with torch.no_grad():  # every parameter from our generator (torch's init leaves biases at zero)
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float64, generator=gen) * 0.4)
    batch, sq, skv = q.shape[0], q.shape[1], k.shape[1]
    attn_mask = None if mask is None else (~mask).reshape(batch * heads, sq, skv)
    out, _ = mha(q, k, v, attn_mask=attn_mask, need_weights=False)
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    out.backward(d_out)
    if mha._qkv_same_embed_dim:  # one packed in_proj_weight (3E, E)
        w, dw = mha.in_proj_weight.split(embed), mha.in_proj_weight.grad.split(embed)
    else:
        w = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
        dw = tuple(t.grad for t in w)
    b, db = mha.in_proj_bias.split(embed), mha.in_proj_bias.grad.split(embed)
    case = {"name": name, "num_heads": heads, "query": tensor(q), "key": tensor(k), "value": tensor(v),
            "W_o": tensor(mha.out_proj.weight), "b_o": tensor(mha.out_proj.bias), "output": tensor(out),
            "d_output": tensor(d_out), "d_query": tensor(q.grad), "d_key": tensor(k.grad), "d_value": tensor(v.grad),
            "d_W_o": tensor(mha.out_proj.weight.grad), "d_b_o": tensor(mha.out_proj.bias.grad)}
    for n, x in enumerate("qkv"):
        case.update({f"W_{x}": tensor(w[n]), f"b_{x}": tensor(b[n]), f"d_W_{x}": tensor(dw[n]),
                     f"d_b_{x}": tensor(db[n])})
    if mask is not None:
        case["mask"] = ints(mask.to(torch.int64))
    return case


def gpt_oss_attention(Q, K, V, S, sm_scale, sliding_window=0):
    """Attention with learned sinks as gpt-oss computes it: Q (T, Hkv, G, D), K and V (T, Hkv, D),
    S (Hkv * G), one logit per query head. The sink joins the softmax as one more column, dropped after."""
    n_tokens, n_kv, group, _ = Q.shape
    K = K[:, :, None, :].expand(-1, -1, group, -1)
    V = V[:, :, None, :].expand(-1, -1, group, -1)
    bias = torch.triu(Q.new_full((n_tokens, n_tokens), -float("inf")), diagonal=1)
    if sliding_window > 0:  # keys i - sliding_window and older leave the window
        bias = bias + torch.tril(Q.new_full((n_tokens, n_tokens), -float("inf")), diagonal=-sliding_window)
    scores = torch.einsum("qhmd,khmd->hmqk", Q, K) * sm_scale + bias
    sink = S.reshape(n_kv, group, 1, 1).expand(-1, -1, n_tokens, 1)
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("hmqk,khmd->qhmd", weights, V)


def sinks_case(name, q, k, v, s, sliding_window, gen):
    q, k, v, s = (t.clone().requires_grad_(True) for t in (q, k, v, s))
    out = gpt_oss_attention(q, k, v, s, 1 / math.sqrt(q.shape[-1]), sliding_window)
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    out.backward(d_out)
    return {"name": name, "sliding_window": sliding_window, "Q": tensor(q), "K": tensor(k), "V": tensor(v),
            "S": tensor(s), "output": tensor(out), "d_output": tensor(d_out), "d_Q": tensor(q.grad),
            "d_K": tensor(k.grad), "d_V": tensor(v.grad), "d_S": tensor(s.grad)}


def rotate_half(x):
    """HF transformers (LLaMA, GPT-NeoX): the halves of the last axis, (-x2, x1)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """HF transformers (GPT-J): each pair (x[2k], x[2k+1]) -> (-x[2k+1], x[2k])."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rope_rows_case(name, x, positions, dims, base, style):
    """HF's rotary embedding of rows x (S, D) at positions (S), float32 as HF computes it: inv_freq
    in float32, the angles a float32 product, cos and sin in float32; the first dims features
    rotated, the rest passed. Also the exact rotation (angles and products in float64)."""
    def rotate(x, dtype):
        inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.int64).to(dtype) / dims))
        freqs = positions.to(dtype)[:, None] * inv_freq[None, :]
        if style == "half":
            emb = torch.cat((freqs, freqs), dim=-1)
            turn = rotate_half
        else:
            emb = torch.repeat_interleave(freqs, 2, dim=-1)
            turn = rotate_every_two
        rot, rest = x[..., :dims].to(dtype), x[..., dims:].to(dtype)
        return torch.cat((rot * emb.cos() + turn(rot) * emb.sin(), rest), dim=-1)
    inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.int64).float() / dims))
    return {"name": name, "style": style, "dims": dims, "base": base, "positions": ints(positions), "x": tensor(x),
            "inv_freq": tensor(inv_freq), "hf_float32": tensor(rotate(x, torch.float32)),
            "exact": tensor(rotate(x.double(), torch.float64))}


def hf_cos_sin(positions, dims, base, style):
    """HF's float32 tables, as float64: inv_freq and the angles in float32, their cos and sin too."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.int64).float() / dims))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1) if style == "half" else torch.repeat_interleave(freqs, 2, dim=-1)
    return emb.cos().double(), emb.sin().double()


def apply_rope(x, positions, dims, base, style):
    cos, sin = hf_cos_sin(positions, dims, base, style)
    turn = rotate_half if style == "half" else rotate_every_two
    rot, rest = x[..., :dims], x[..., dims:]
    return torch.cat((rot * cos + turn(rot) * sin, rest), dim=-1)


def rope_attention_case(name, q, k, v, q_pos, k_pos, dims, base, style, causal, gen):
    """softmax(rope(Q) rope(K)^T / sqrt(D) [causal, bottom-right]) V in float64 with autograd; the
    gradients are those of the unrotated Q and K."""
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    s = apply_rope(q, q_pos, dims, base, style) @ apply_rope(k, k_pos, dims, base, style).transpose(-1, -2)
    s = s / math.sqrt(q.shape[-1])
    if causal:
        sq, skv = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(sq, skv, dtype=torch.bool).triu(skv - sq + 1), -float("inf"))
    out = torch.softmax(s, dim=-1) @ v
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    out.backward(d_out)
    return {"name": name, "style": style, "dims": dims, "base": base, "causal": causal, "q_positions": ints(q_pos),
            "k_positions": ints(k_pos), "Q": tensor(q), "K": tensor(k), "V": tensor(v), "output": tensor(out),
            "d_output": tensor(d_out), "d_Q": tensor(q.grad), "d_K": tensor(k.grad), "d_V": tensor(v.grad)}


def mla_training_case(name, q_nope, q_pe, k_nope, k_pe, v, positions, gen):
    """Multi-head latent attention as DeepSeek-V2 trains it, written naively: per head
    q = [q_nope, rope(q_pe)], k = [k_nope, rope(k_pe)] with k_pe's one head shared by every head,
    softmax(q k^T / sqrt(d_nope + d_rope)) causal, times v; float64 autograd."""
    q_nope, q_pe, k_nope, k_pe, v = (t.clone().requires_grad_(True) for t in (q_nope, q_pe, k_nope, k_pe, v))
    heads = q_nope.shape[1]
    dr = q_pe.shape[-1]
    q = torch.cat((q_nope, apply_rope(q_pe, positions, dr, 10000.0, "half")), dim=-1)
    k = torch.cat((k_nope, apply_rope(k_pe, positions, dr, 10000.0, "half").expand(-1, heads, -1, -1)), dim=-1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    n = s.shape[-1]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -float("inf"))
    out = torch.softmax(s, dim=-1) @ v
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    out.backward(d_out)
    return {"name": name, "positions": ints(positions), "q_nope": tensor(q_nope), "q_pe": tensor(q_pe),
            "k_nope": tensor(k_nope), "k_pe": tensor(k_pe), "v": tensor(v), "output": tensor(out),
            "d_output": tensor(d_out), "d_q_nope": tensor(q_nope.grad), "d_q_pe": tensor(q_pe.grad),
            "d_k_nope": tensor(k_nope.grad), "d_k_pe": tensor(k_pe.grad), "d_v": tensor(v.grad)}


def mla_decoding_case(name, q_nope, q_pe, c_kv, k_pe, w_uk, w_uv, gen):
    """One MLA decoding step two ways. Naive: each head's keys and values expanded from the latent
    cache c_kv (k = c_kv W_uk^T, v = c_kv W_uv), softmax([q_nope, q_pe] [k, k_pe]^T * scale) v. Absorbed:
    q_c = q_nope W_uk, the latent output softmax(q_c c_kv^T * scale + q_pe k_pe^T * scale) c_kv, then W_uv.
    Autograd of the absorbed form at (q_c, q_pe, c_kv, k_pe) given an upstream gradient on the latent
    output; d_c_kv is the whole gradient of c_kv (as keys and as values)."""
    scale = 1 / math.sqrt(q_nope.shape[-1] + q_pe.shape[-1])
    k = torch.einsum("bsl,hnl->bhsn", c_kv[:, 0], w_uk)
    v = torch.einsum("bsl,hlv->bhsv", c_kv[:, 0], w_uv)
    s = (q_nope @ k.transpose(-1, -2) + q_pe @ k_pe.transpose(-1, -2)) * scale
    naive = torch.softmax(s, dim=-1) @ v
    q_c = torch.einsum("bhin,hnl->bhil", q_nope, w_uk).detach().requires_grad_(True)
    q_pe, c_kv, k_pe = (t.clone().requires_grad_(True) for t in (q_pe, c_kv, k_pe))
    s = (q_c @ c_kv.transpose(-1, -2) + q_pe @ k_pe.transpose(-1, -2)) * scale
    latent = torch.softmax(s, dim=-1) @ c_kv
    d_latent = torch.randn(latent.shape, dtype=torch.float64, generator=gen)
    latent.backward(d_latent)
    return {"name": name, "q_nope": tensor(q_nope), "w_uk": tensor(w_uk), "w_uv": tensor(w_uv), "q_c": tensor(q_c),
            "q_pe": tensor(q_pe), "c_kv": tensor(c_kv), "k_pe": tensor(k_pe), "naive_output": tensor(naive),
            "latent_output": tensor(latent), "d_latent": tensor(d_latent), "d_q_c": tensor(q_c.grad),
            "d_q_pe": tensor(q_pe.grad), "d_c_kv": tensor(c_kv.grad), "d_k_pe": tensor(k_pe.grad)}


def compact(t):  # results to 9 significant digits: far below the bf16 tests' tolerances, half the bytes
    return {"shape": list(t.shape), "data": [float(f"{float(x):.9g}") for x in t.detach().reshape(-1).tolist()]}


def bf16_attention_case(name, q, k, v, causal, gen):
    """Scaled dot-product attention of bfloat16 operands and upstream gradient, the gradients both in
    float64 (the reference, on the same bf16 values) and in PyTorch's own bfloat16 eager math (each
    product and the softmax rounded to bf16): PyTorch's SDPA tests take their bf16 tolerance from the
    distance between the two."""
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    d_out = torch.randn(q.shape[:-1] + (v.shape[-1],), dtype=torch.float64, generator=gen).to(torch.bfloat16)
    sq, skv = q.shape[-2], k.shape[-2]

    def attention(q, k, v):
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:  # is_causal's top-left diagonal
            s = s.masked_fill(torch.ones(sq, skv, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    case = {"name": name, "causal": causal, "q": tensor(q), "k": tensor(k), "v": tensor(v), "d_output": tensor(d_out)}
    for dtype, suffix in ((torch.float64, ""), (torch.bfloat16, "_bf16")):
        leaves = [t.to(dtype).requires_grad_(True) for t in (q, k, v)]
        out = attention(*leaves)
        out.backward(d_out.to(dtype))
        case.update({"output" + suffix: compact(out), "d_q" + suffix: compact(leaves[0].grad),
                     "d_k" + suffix: compact(leaves[1].grad), "d_v" + suffix: compact(leaves[2].grad)})
    return case


def main(out_dir):
    warnings.filterwarnings("ignore", message="Lazy modules")  # d2l's LazyLinear, as the chapter writes it
    gen = torch.Generator().manual_seed(20261124)
    f64 = dict(dtype=torch.float64, generator=gen)
    cases = [
        # the chapter's example shapes: X (2, 2, 4), lengths [2, 3] and [[1, 3], [2, 4]]; a zero length too
        masked_softmax_case("d2l 1-D lens", torch.rand(2, 2, 4, **f64), torch.tensor([2, 3]), gen),
        masked_softmax_case("d2l 2-D lens", torch.rand(2, 2, 4, **f64), torch.tensor([[1, 3], [2, 4]]), gen),
        masked_softmax_case("zero lengths", torch.randn(2, 3, 5, **f64), torch.tensor([[0, 2, 5], [3, 0, 1]]), gen),
    ]
    with open(f"{out_dir}/d2l_masked_softmax.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    cases = [
        # the chapter's example: queries (2, 1, 2), keys of ones (2, 10, 2), values 0..39, lengths [2, 6]
        dot_product_case("d2l example", torch.normal(0, 1, (2, 1, 2), **f64), torch.ones((2, 10, 2), dtype=torch.float64),
                         torch.arange(40, dtype=torch.float64).reshape(1, 10, 4).repeat(2, 1, 1), torch.tensor([2, 6]),
                         gen),
        dot_product_case("1-D lens with a zero", torch.randn(2, 3, 4, **f64), torch.randn(2, 7, 4, **f64),
                         torch.randn(2, 7, 5, **f64), torch.tensor([0, 5]), gen),
        dot_product_case("2-D lens with zeros", torch.randn(2, 3, 4, **f64), torch.randn(2, 7, 4, **f64),
                         torch.randn(2, 7, 5, **f64), torch.tensor([[1, 0, 7], [4, 2, 0]]), gen),
    ]
    with open(f"{out_dir}/d2l_dot_product_attention.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    torch.manual_seed(20261124)  # the lazy layers' first initialisation (overwritten)
    cases = [
        # the chapter's example: queries (2, 1, 20), keys of ones (2, 10, 2), values 0..39, lengths [2, 6], 8 hiddens
        additive_case("d2l example", torch.normal(0, 1, (2, 1, 20), **f64), torch.ones((2, 10, 2), dtype=torch.float64),
                      torch.arange(40, dtype=torch.float64).reshape(1, 10, 4).repeat(2, 1, 1), torch.tensor([2, 6]),
                      8, gen),
        additive_case("1-D lens with a zero", torch.randn(2, 3, 4, **f64), torch.randn(2, 7, 5, **f64),
                      torch.randn(2, 7, 3, **f64), torch.tensor([0, 5]), 6, gen),
        additive_case("2-D lens with zeros", torch.randn(2, 3, 4, **f64), torch.randn(2, 7, 5, **f64),
                      torch.randn(2, 7, 3, **f64), torch.tensor([[1, 0, 7], [4, 2, 0]]), 6, gen),
    ]
    with open(f"{out_dir}/d2l_additive_attention.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool)).expand(2, 2, 5, 5)  # every row sees a key
    ragged = torch.rand(2, 4, 3, 6, generator=gen) < 0.6
    ragged[..., 0] = True
    cases = [
        mha_case("no mask, kdim and vdim apart", 8, 2, 6, 5, torch.randn(2, 5, 8, **f64), torch.randn(2, 7, 6, **f64),
                 torch.randn(2, 7, 5, **f64), None, gen),
        mha_case("causal bool mask", 8, 2, 8, 8, torch.randn(2, 5, 8, **f64), torch.randn(2, 5, 8, **f64),
                 torch.randn(2, 5, 8, **f64), causal, gen),
        mha_case("random bool mask, 4 heads", 8, 4, 6, 3, torch.randn(2, 3, 8, **f64), torch.randn(2, 6, 6, **f64),
                 torch.randn(2, 6, 3, **f64), ragged, gen),
    ]
    with open(f"{out_dir}/torch_multihead_attention.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    gen = torch.Generator().manual_seed(20261127)
    f64 = dict(dtype=torch.float64, generator=gen)
    cases = [  # T tokens, Hkv key heads, G query heads per key head, D features
        sinks_case("causal, 2 key heads of 2 query heads", torch.randn(7, 2, 2, 8, **f64), torch.randn(7, 2, 8, **f64),
                   torch.randn(7, 2, 8, **f64), torch.randn(4, **f64), 0, gen),
        sinks_case("sliding window 3, sinks that dominate", torch.randn(9, 1, 3, 4, **f64), torch.randn(9, 1, 4, **f64),
                   torch.randn(9, 1, 4, **f64), 2 + torch.rand(3, **f64), 3, gen),
    ]
    with open(f"{out_dir}/gpt_oss_sinks.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    gen = torch.Generator().manual_seed(20261128)
    positions = torch.tensor([0, 1, 7, 100, 4095, 65537, 1 << 20])
    cases = [  # rows of float32 values, as a model's queries and keys are
        rope_rows_case("half, all 64 features, base 10000", torch.randn(7, 64, generator=gen), positions, 64, 10000.0,
                       "half"),
        rope_rows_case("half, first 32 of 48 features", torch.randn(7, 48, generator=gen), positions, 32, 10000.0,
                       "half"),
        rope_rows_case("interleaved, first 64 of 128, base 500000", torch.randn(7, 128, generator=gen), positions, 64,
                       500000.0, "interleaved"),
    ]
    with open(f"{out_dir}/hf_rope_rows.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    gen = torch.Generator().manual_seed(20261129)
    f64 = dict(dtype=torch.float64, generator=gen)
    cases = [  # (B, H, S, D); positions shared by the batch
        rope_attention_case("half, all features, causal", torch.randn(2, 2, 6, 8, **f64), torch.randn(2, 2, 6, 8, **f64),
                            torch.randn(2, 2, 6, 5, **f64), torch.arange(6), torch.arange(6), 8, 10000.0, "half", True,
                            gen),
        rope_attention_case("interleaved, first 4 of 8, queries at the end of the keys", torch.randn(1, 2, 3, 8, **f64),
                            torch.randn(1, 2, 9, 8, **f64), torch.randn(1, 2, 9, 4, **f64), torch.arange(6, 9),
                            torch.arange(9), 4, 500000.0, "interleaved", True, gen),
    ]
    with open(f"{out_dir}/hf_rope_attention.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    gen = torch.Generator().manual_seed(20261130)
    f64 = dict(dtype=torch.float64, generator=gen)
    cases = [  # training: (B, H, S, d); decoding: B = 1, one query per head, a latent cache (B, 1, S, L)
        mla_training_case("training form: 4 heads, nope 6 + rope 4, one shared rope key head, v 5",
                          torch.randn(1, 4, 7, 6, **f64), torch.randn(1, 4, 7, 4, **f64), torch.randn(1, 4, 7, 6, **f64),
                          torch.randn(1, 1, 7, 4, **f64), torch.randn(1, 4, 7, 5, **f64), torch.arange(7), gen),
        mla_decoding_case("absorbed decoding: 4 heads, latent 8, nope 6 + rope 4, v 5, 9 cached tokens",
                          torch.randn(1, 4, 1, 6, **f64), torch.randn(1, 4, 1, 4, **f64), torch.randn(1, 1, 9, 8, **f64),
                          torch.randn(1, 1, 9, 4, **f64), torch.randn(4, 6, 8, **f64) / 3, torch.randn(4, 8, 5, **f64) / 3,
                          gen),
    ]
    with open(f"{out_dir}/deepseek_mla.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    gen = torch.Generator().manual_seed(20261129)
    f64 = dict(dtype=torch.float64, generator=gen)
    cases = [  # (B, H, S, D): whole 16-key batches without a mask; odd sizes under a causal mask
        bf16_attention_case("64 keys, D 32, Dv 16, no mask", torch.randn(1, 1, 32, 32, **f64),
                            torch.randn(1, 1, 64, 32, **f64), torch.randn(1, 1, 64, 16, **f64), False, gen),
        bf16_attention_case("causal, 45 tokens, D 40, Dv 24", torch.randn(1, 1, 45, 40, **f64),
                            torch.randn(1, 1, 45, 40, **f64), torch.randn(1, 1, 45, 24, **f64), True, gen),
    ]
    with open(f"{out_dir}/torch_bf16_attention.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/goldens")
