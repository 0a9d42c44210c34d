"""xattn.attention's rarer options against PyTorch autograd in float64: documents, boolean and
float masks, a bias tensor (with its gradient), ALiBi, rotary embeddings (both styles, part of the
features, explicit positions), each alone and combined with the common options; dropout by its
definition (the weights it keeps) and by finite differences; 16-bit inputs on these options;
bad input naming the argument."""

import math

import numpy as np
import pytest
import torch

import xattn

from test_attention import make


def rotate(x, positions, style="half", base=10000.0, dims=0):
    """HF's rotary embedding of the rows of x at positions ((S) or (B, S)), angles in float32 as
    transformers computes them."""
    dims = dims or x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.float32) / dims))
    angles = positions.float().unsqueeze(-1) * inv
    if angles.dim() == 3:  # (B, S, dims/2): one set per sequence, shared by the heads
        angles = angles.unsqueeze(1)
    c, s = torch.cos(angles).double(), torch.sin(angles).double()
    turned = x[..., :dims]
    if style == "half":
        a, b = turned[..., : dims // 2], turned[..., dims // 2:]
        turned = torch.cat([a * c - b * s, b * c + a * s], -1)
    else:
        a, b = turned[..., 0::2], turned[..., 1::2]
        turned = torch.stack([a * c - b * s, b * c + a * s], -1).flatten(-2)
    return torch.cat([turned, x[..., dims:]], -1)


def reference(q, k, v, causal=False, softcap=None, sinks=None, documents=None, mask=None, bias=None, alibi=None,
              rope=None, lengths=None):
    """The score softcap(q.k / sqrt(D)) + mask + bias + alibi, masks, sinks: in plain PyTorch ops."""
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    if rope is not None:
        style = rope.get("style", "half")
        qp = rope.get("q_positions", torch.arange(Sq) + max(0, Skv - Sq))
        kp = rope.get("k_positions", torch.arange(Skv))
        q = rotate(q, qp, style, rope.get("base", 10000.0), rope.get("dims", 0))
        k = rotate(k, kp, style, rope.get("base", 10000.0), rope.get("dims", 0))
    k, v = k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    visible = torch.ones(B, Hq, Sq, Skv, dtype=torch.bool)
    if mask is not None:
        if mask.dtype == torch.bool:
            visible = visible & mask
        else:
            s = s + mask
    if bias is not None:
        s = s + bias
    i, j = torch.arange(Sq).view(-1, 1), torch.arange(Skv).view(1, -1)
    if alibi is not None:
        s = s - alibi.view(Hq, 1, 1) * (i + Skv - Sq - j).abs()
    if causal:
        visible = visible & (j <= i + (Skv - Sq if causal == "bottom_right" else 0))
    if documents is not None:
        q_ids, kv_ids = documents if isinstance(documents, tuple) else (documents, documents)
        visible = visible & (q_ids.unsqueeze(-1) == kv_ids.unsqueeze(-2)).view(-1, 1, Sq, Skv)
    if lengths is not None:
        visible = visible & (j < lengths.view(B, 1, 1, 1))
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.view(1, Hq, 1, 1).expand(B, Hq, Sq, 1)], -1)
    m = s.amax(-1, keepdim=True).detach()
    e = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    den = e.sum(-1, keepdim=True)
    p = e / torch.where(den == 0, torch.ones_like(den), den)  # a row seeing nothing outputs 0
    if sinks is not None:
        p = p[..., :-1]
    return p @ v


B, HQ, HKV, SQ, SKV, D = 2, 4, 2, 13, 21, 16


def inputs(name):
    """The tensors of the option `name` for (B, HQ, SQ, SKV)."""
    g = torch.Generator().manual_seed(11)
    if name == "documents":
        ids = torch.tensor([0] * 5 + [1] * 9 + [2] * 7)
        return ids[:SQ].clone(), ids  # queries are the first SQ tokens
    if name == "documents_2d":
        ids = torch.stack([torch.tensor([0] * 4 + [1] * 17), torch.tensor([3] * 12 + [5] * 9)])
        return ids[:, :SQ].clone(), ids
    if name == "documents_unsorted":  # ids not in runs: compared key by key
        ids = torch.randint(0, 3, (SKV,), generator=g)
        return ids[:SQ].clone(), ids
    if name == "bool_mask":
        return torch.rand(B, 1, SQ, SKV, generator=g) > 0.3
    if name == "float_mask":
        m = torch.randn(SQ, SKV, generator=g, dtype=torch.float64)
        return m.masked_fill(torch.rand(SQ, SKV, generator=g) < 0.2, float("-inf"))
    if name == "bias":
        return torch.randn(HQ, SQ, SKV, generator=g, dtype=torch.float64)
    if name == "bias_row":  # broadcast over heads and queries
        return torch.randn(B, 1, 1, SKV, generator=g, dtype=torch.float64)
    if name == "alibi":
        return torch.tensor([2.0 ** (-8 * (h + 1) / HQ) for h in range(HQ)], dtype=torch.float64)
    raise KeyError(name)


CASES = {
    "documents": dict(documents="documents"),
    "documents (B, S) causal": dict(documents="documents_2d", causal="bottom_right"),
    "documents unsorted": dict(documents="documents_unsorted"),
    "bool mask": dict(mask="bool_mask"),
    "float mask": dict(mask="float_mask"),
    "bias": dict(bias="bias"),
    "bias broadcast + softcap": dict(bias="bias_row", softcap=3.0),
    "alibi causal": dict(alibi="alibi", causal="bottom_right"),
    "rope half": dict(rope={"style": "half"}),
    "rope interleaved, part": dict(rope={"style": "interleaved", "dims": 8, "base": 500.0}),
    "rope positions": dict(rope={"q_positions": torch.arange(SQ) * 2 + 3,
                                 "k_positions": torch.stack([torch.arange(SKV), torch.arange(SKV) + 7])}),
    "everything": dict(documents="documents", mask="bool_mask", bias="bias", alibi="alibi", softcap=4.0,
                       causal="bottom_right", sinks=True, lengths=True, rope={"style": "half"}),
}


def resolve(case):
    o = {}
    for key, value in case.items():
        if key in ("documents", "mask", "bias", "alibi") and isinstance(value, str):
            o[key] = inputs(value)
        elif key == "sinks":
            o[key] = make((HQ,), seed=12)
        elif key == "lengths":
            o[key] = torch.tensor([SKV - 2, SKV - 9])
        else:
            o[key] = value
    return o


@pytest.mark.parametrize("name", list(CASES))
def test_float64_outputs_and_gradients_match_autograd(name):
    o = resolve(CASES[name])
    q, k, v = make((B, HQ, SQ, D), seed=1), make((B, HKV, SKV, D), seed=2), make((B, HKV, SKV, 8), seed=3)
    learn = {"q": q, "k": k, "v": v}
    for key in ("bias", "sinks"):
        if key in o:
            learn[key] = o[key]
    ours = {n: x.clone().requires_grad_() for n, x in learn.items()}
    theirs = {n: x.clone().requires_grad_() for n, x in learn.items()}
    out = xattn.attention(**{**o, **ours})
    want = reference(**{**o, **theirs})
    tolerance = 1e-6 if "rope" in o else 1e-12  # rope's angles are float products, as torch's
    assert (out - want).abs().max() < tolerance
    d_out = make(out.shape, seed=4)
    out.backward(d_out)
    want.backward(d_out)
    for n in learn:
        assert ours[n].grad.shape == learn[n].shape, n
        assert (ours[n].grad - theirs[n].grad).abs().max() < 10 * tolerance, n


def test_gradcheck_through_bias_alibi_documents_and_rope():
    q, k, v = (make(s, seed=n).requires_grad_() for n, s in enumerate([(1, 2, 6, 4), (1, 1, 6, 4), (1, 1, 6, 3)]))
    bias = make((2, 1, 6), seed=8).requires_grad_()
    ids = torch.tensor([0, 0, 0, 1, 1, 1])
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    f = lambda q, k, v, b: xattn.attention(q, k, v, bias=b, alibi=slopes, documents=ids, causal=True, rope="half")
    assert torch.autograd.gradcheck(f, (q, k, v, bias), eps=1e-6, atol=1e-7)


def test_dropout_keeps_weights_scaled_and_drops_about_p():
    """With v = I the output is the weights themselves: each is 0 or the reference's / (1 - p)."""
    S, p = 64, 0.25
    q, k = make((2, 3, S, 8), seed=1), make((2, 3, S, 8), seed=2)
    v = torch.eye(S, dtype=torch.float64).expand(2, 3, S, S)
    out = xattn.attention(q, k, v, dropout=p, seed=42, causal=True)
    weights = reference(q, k, v, causal=True)
    kept = out != 0
    assert torch.allclose(out[kept], weights[kept] / (1 - p), rtol=1e-12, atol=0)
    candidates = weights > 0
    dropped = (candidates & ~kept).sum().item() / candidates.sum().item()
    n = candidates.sum().item()
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert torch.equal(out, xattn.attention(q, k, v, dropout=p, seed=42, causal=True))  # the seed decides
    assert not torch.equal(out, xattn.attention(q, k, v, dropout=p, seed=43, causal=True))


def test_dropout_gradients_by_finite_differences():
    q, k, v = (make((1, 2, 7, 4), seed=n).requires_grad_() for n in range(3))
    f = lambda q, k, v: xattn.attention(q, k, v, dropout=0.3, seed=7, causal=True)
    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lower_precision_on_the_runtime_path(dtype):
    o = resolve(CASES["everything"])
    q, k, v = make((B, HQ, SQ, D), dtype, seed=1), make((B, HKV, SKV, D), dtype, seed=2), make((B, HKV, SKV, 8), dtype,
                                                                                             seed=3)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = xattn.attention(*leaves, **o)
    assert out.dtype == dtype
    out.float().sum().backward()
    exact = [x.double().requires_grad_() for x in (q, k, v)]
    want = reference(*exact, **o)
    want.sum().backward()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert (out.double() - want).abs().max() < tol
    for a, b in zip(leaves, exact):
        assert a.grad.dtype == dtype
        assert (a.grad.double() - b.grad).abs().max() < 4 * tol


def test_numpy_masks_and_lists():
    q, k, v = (make((1, 2, 5, 4), seed=n).numpy() for n in range(3))
    ids = [0, 0, 1, 1, 1]
    mask = np.tril(np.ones((5, 5), dtype=bool))
    out = xattn.attention(q, k, v, documents=ids, mask=mask, alibi=[0.5, 0.1])
    want = reference(*(torch.from_numpy(x) for x in (q, k, v)), documents=torch.tensor(ids),
                     mask=torch.from_numpy(mask), alibi=torch.tensor([0.5, 0.1], dtype=torch.float64))
    assert isinstance(out, np.ndarray) and np.abs(out - want.numpy()).max() < 1e-12


def test_bad_options_raise_with_the_library_message():
    q, k, v = (make((2, 4, 6, 8), seed=n) for n in range(3))
    with pytest.raises(ValueError, match=r"desc.mask has shape \(3,6\), which does not broadcast to the scores \(B, Hq, Sq, Skv\) = \(2,4,6,6\)"):
        xattn.attention(q, k, v, mask=torch.ones(3, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"desc.alibi has shape \(3\) but must be \(Hq\) = \(4\)"):
        xattn.attention(q, k, v, alibi=[0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"desc.bias has dtype XATTN_BF16 but must be XATTN_F32 or XATTN_F64"):
        xattn.attention(q, k, v, bias=torch.zeros(6, 6, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"desc.documents has shape \(5\) but must be \(6\) or \(2,6\)"):
        xattn.attention(q, k, v, documents=[0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match=r"desc.rope_dims is 3; it must be even and at most D = 8"):
        xattn.attention(q, k, v, rope={"dims": 3})
    with pytest.raises(ValueError, match=r"desc.rope_q_positions holds -1; positions must be >= 0"):
        xattn.attention(q, k, v, rope={"q_positions": [0, 1, 2, 3, 4, -1]})
    with pytest.raises(ValueError, match=r"desc.dropout_p is 1; it must be in \[0, 1\)"):
        xattn.attention(q, k, v, dropout=1.0)
    with pytest.raises(ValueError, match=r"rope style must be 'half' or 'interleaved'"):
        xattn.attention(q, k, v, rope="spiral")


def test_options_snippet():
    q, k, v = (torch.randn(2, 8, 512, 64, requires_grad=True) for _ in range(3))
    # [snippet options]
    ids = torch.tensor([0] * 300 + [1] * 212)  # two packed documents
    bias = torch.zeros(8, 512, 512, requires_grad=True)  # a learnable (H, S, S) bias
    out = xattn.attention(q, k, v, causal=True, documents=ids, bias=bias, rope="half", dropout=0.1, seed=3)
    out.sum().backward()  # q.grad, k.grad, v.grad, bias.grad
    # [end options]
    assert bias.grad.shape == (8, 512, 512) and bias.grad[:, :300, 300:].abs().max() == 0  # across documents
    assert bias.grad[:, 300:, 300:].abs().max() > 0


def test_additive_scorer_matches_d2l_additive_attention():
    """d2l's AdditiveAttention (queries of 20 features, keys of 2, 8 hidden units, valid lengths
    2 and 6) against its PyTorch code: outputs and the gradients of q, k, v and the three weights."""
    g = torch.Generator().manual_seed(5)

    def leaf(*shape):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * 0.5).requires_grad_()

    q, k, v = leaf(2, 1, 20), leaf(2, 10, 2), leaf(2, 10, 4)  # rank 3: one head
    W_q, W_k, w_v = leaf(8, 20), leaf(8, 2), leaf(8)
    lens = torch.tensor([2, 6])
    out = xattn.attention(q, k, v, score=xattn.additive(W_q, W_k, w_v), lengths=lens)
    features = torch.tanh((q @ W_q.T).unsqueeze(2) + (k @ W_k.T).unsqueeze(1))  # d2l's forward
    scores = (features @ w_v).masked_fill(~(torch.arange(10).view(1, 1, -1) < lens.view(-1, 1, 1)), -1e6)
    want = torch.softmax(scores, -1) @ v
    assert out.shape == (2, 1, 4) and (out - want).abs().max() < 1e-13
    d_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
    leaves = (q, k, v, W_q, W_k, w_v)
    for name, a, b in zip("q k v W_q W_k w_v".split(), torch.autograd.grad(out, leaves, d_out),
                          torch.autograd.grad(want, leaves, d_out)):
        assert a.shape == b.shape and (a - b).abs().max() < 1e-12, name
    with pytest.raises(ValueError, match=r"W_q is \(8,20\), W_k is \(8,3\)"):
        xattn.attention(q, k, v, score=xattn.additive(W_q, leaf(8, 3), w_v))
