"""xattn.scaled_dot_product_attention as a drop-in for torch.nn.functional's: PyTorch's reference
implementation (its documentation's, with the fully masked rows of PyTorch 2.5 and later on the
CPU: zeros) differentiated by autograd in float64, on every rank, broadcast, grouped heads, bool
and float masks with is_causal; dropout against the weights; out= into a transposed buffer;
patch_torch; and bad input."""

import math

import pytest
import torch
import torch.nn.functional as F

import xattn


def reference(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's documented reference, in float64 autograd
    (is_causal and attn_mask both applied; a row no key takes part in gives zeros, as _safe_softmax)."""
    L, S = query.size(-2), key.size(-2)
    scale_factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    attn_bias = torch.zeros(L, S, dtype=query.dtype)
    if is_causal:
        attn_bias.masked_fill_(torch.ones(L, S, dtype=torch.bool).tril(diagonal=0).logical_not(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_bias = attn_bias.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            attn_bias = attn_mask + attn_bias
    if enable_gqa:
        key = key.repeat_interleave(query.size(-3) // key.size(-3), -3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), -3)
    attn_weight = query @ key.transpose(-2, -1) * scale_factor + attn_bias
    seen = ~torch.isinf(attn_weight).all(-1, keepdim=True)
    attn_weight = torch.softmax(attn_weight.masked_fill(~seen, 0), dim=-1) * seen
    return attn_weight @ value


def make(*shape, dtype=torch.float64, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_(grad)


SHAPES = [  # query, key (value: key's with Ev = 5), enable_gqa
    ((2, 4, 7, 8), (2, 4, 9, 8), False),
    ((2, 4, 7, 8), (2, 2, 9, 8), True),  # grouped
    ((2, 4, 7, 8), (2, 1, 9, 8), False),  # one key head broadcast
    ((2, 1, 7, 8), (2, 3, 9, 8), False),  # one query head broadcast
    ((2, 4, 7, 8), (1, 4, 9, 8), False),  # batch broadcast
    ((2, 3, 4, 7, 8), (2, 1, 4, 9, 8), False),  # two batch axes
    ((3, 7, 8), (3, 9, 8), False),  # (N, L, E)
    ((7, 8), (9, 8), False),  # (L, E)
]


def masks(q_shape, S):
    L = q_shape[-2]
    g = torch.Generator().manual_seed(3)
    flags = torch.rand(L, S, generator=g) > 0.3
    flags[1] = False  # a row no key takes part in
    return [None, flags, torch.randn(*q_shape[:-1], S, generator=g, dtype=torch.float64), flags[None]]


@pytest.mark.parametrize("q_shape,k_shape,gqa", SHAPES)
def test_outputs_and_gradients_match_pytorchs_reference(q_shape, k_shape, gqa):
    S = k_shape[-2]
    for mask in masks(q_shape, S):
        if mask is not None and mask.dim() > len(q_shape):
            continue
        for causal in (False, True):
            q, k, v = make(*q_shape, seed=1), make(*k_shape, seed=2), make(*k_shape[:-1], 5, seed=3)
            out = xattn.scaled_dot_product_attention(q, k, v, mask, 0.0, causal, None, gqa)
            want = reference(q, k, v, mask, 0.0, causal, None, gqa)
            assert out.shape == want.shape
            assert torch.allclose(out, want, rtol=0, atol=1e-12)
            d_out = make(*want.shape, seed=4, grad=False)
            got = torch.autograd.grad(out, (q, k, v), d_out)
            expected = torch.autograd.grad(want, (q, k, v), d_out)
            for a, b in zip(got, expected):
                assert torch.allclose(a, b, rtol=0, atol=1e-11)


def test_positional_order_scale_and_float_mask_gradient():
    q, k, v = make(2, 4, 6, 8, seed=1), make(2, 4, 6, 8, seed=2), make(2, 4, 6, 8, seed=3)
    bias = make(1, 4, 6, 6, seed=5)
    out = xattn.scaled_dot_product_attention(q, k, v, bias, 0.0, True, 0.2)
    want = reference(q, k, v, bias, 0.0, True, 0.2)
    assert torch.allclose(out, want, rtol=0, atol=1e-12)
    got = torch.autograd.grad(out.square().sum(), (q, bias))
    expected = torch.autograd.grad(want.square().sum(), (q, bias))
    assert torch.allclose(got[0], expected[0], rtol=0, atol=1e-11)
    assert torch.allclose(got[1], expected[1], rtol=0, atol=1e-11)  # the mask's gradient, broadcast back


def test_bfloat16_and_a_bfloat16_float_mask():
    q, k, v = (make(1, 2, 33, 16, seed=s, grad=False) for s in (1, 2, 3))
    bias = make(33, 33, seed=4, grad=False)
    out = xattn.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), bias.bfloat16())
    assert out.dtype == torch.bfloat16
    want = reference(q.bfloat16().double(), k.bfloat16().double(), v.bfloat16().double(), bias.bfloat16().double())
    assert (out.double() - want).abs().max() < 2e-2


def test_dropout_scales_the_weights_it_keeps_and_follows_torch_manual_seed():
    S, p = 64, 0.3
    q, k = make(1, 2, 16, 8, seed=1, grad=False), make(1, 2, S, 8, seed=2, grad=False)
    v = torch.eye(S, dtype=torch.float64).expand(1, 2, S, S)  # the output rows are the weights
    torch.manual_seed(11)
    out = xattn.scaled_dot_product_attention(q, k, v, dropout_p=p)
    torch.manual_seed(11)
    again = xattn.scaled_dot_product_attention(q, k, v, dropout_p=p)
    assert torch.equal(out, again)
    assert not torch.equal(out, xattn.scaled_dot_product_attention(q, k, v, dropout_p=p))  # the generator moved on
    weights = reference(q, k, v)
    kept = out != 0
    assert 0.2 < 1 - kept.double().mean() < 0.4
    assert torch.allclose(out[kept], weights[kept] / (1 - p), rtol=1e-12, atol=0)


def test_out_writes_a_transposed_buffer_in_place_and_backpropagates():
    B, S, H, D = 2, 9, 4, 8
    q, k, v = make(B, H, S, D, seed=1), make(B, H, S, D, seed=2), make(B, H, S, D, seed=3)
    buffer = torch.full((B, S, H, D), 7.0, dtype=torch.float64)  # as a Hugging Face model lays it out
    out = xattn.scaled_dot_product_attention(q, k, v, is_causal=True, out=buffer.transpose(1, 2))
    want = reference(q, k, v, is_causal=True)
    assert out.data_ptr() == buffer.data_ptr()
    assert torch.allclose(buffer.transpose(1, 2), want, rtol=0, atol=1e-12)
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected = torch.autograd.grad(want.square().sum(), (q, k, v))
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, rtol=0, atol=1e-11)
    one = torch.empty(S, 5, dtype=torch.float64)  # rank 2
    r = xattn.scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0, :, :5], out=one)
    assert r is one and torch.allclose(one, reference(q[0, 0], k[0, 0], v[0, 0, :, :5]), rtol=0, atol=1e-12)


def test_out_of_the_wrong_shape_or_dtype_is_refused_and_left_as_it_was():
    q = make(1, 2, 4, 8, grad=False)
    for bad in (torch.zeros(1, 2, 4, 7, dtype=torch.float64), torch.zeros(1, 2, 4, 8)):
        before = bad.clone()
        with pytest.raises(ValueError, match=r"out has shape .* but the result is \(1, 2, 4, 8\)"):
            xattn.scaled_dot_product_attention(q, q, q, out=bad)
        assert torch.equal(bad, before)
    overlapping = torch.zeros(1, 4, 8, dtype=torch.float64).unsqueeze(1).expand(1, 2, 4, 8)
    with pytest.raises(ValueError, match="out strides"):
        xattn.scaled_dot_product_attention(q, q, q, out=overlapping)


def test_bad_input_is_named():
    q = make(1, 4, 3, 8, grad=False)
    with pytest.raises(ValueError, match="share one dtype"):
        xattn.scaled_dot_product_attention(q, q.float(), q)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        xattn.scaled_dot_product_attention(q, q[:, :2], q[:, :2])
    with pytest.raises(ValueError, match=r"attn_mask has shape \(2, 5\), which does not broadcast"):
        xattn.scaled_dot_product_attention(q, q, q, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="attn_mask has dtype torch.int64"):
        xattn.scaled_dot_product_attention(q, q, q, torch.ones(3, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="dropout_p must be in"):
        xattn.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    with pytest.raises(ValueError, match="the batch axes do not broadcast"):
        xattn.scaled_dot_product_attention(q.expand(2, 4, 3, 8), make(3, 4, 3, 8, grad=False), make(3, 4, 3, 8))


def model_code(q, k, v):
    """Model code written for PyTorch 2: it looks the function up on torch.nn.functional."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_patch_torch_routes_model_code_and_undoes_itself():
    had = hasattr(F, "scaled_dot_product_attention")
    before = getattr(F, "scaled_dot_product_attention", None)
    q, k, v = make(1, 2, 5, 8, seed=1), make(1, 2, 5, 8, seed=2), make(1, 2, 5, 8, seed=3)
    # [snippet patch]
    with xattn.patch_torch():
        out = model_code(q, k, v)  # F.scaled_dot_product_attention(q, k, v, is_causal=True) inside
        # [end patch]
        assert torch.allclose(out, reference(q, k, v, is_causal=True), rtol=0, atol=1e-12)
        assert F.scaled_dot_product_attention.__wrapped__ is xattn.scaled_dot_product_attention
    assert hasattr(F, "scaled_dot_product_attention") == had
    assert getattr(F, "scaled_dot_product_attention", None) is before


def test_patch_torch_leaves_what_xattn_cannot_run_to_torch(monkeypatch):
    calls = []

    def torchs(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        calls.append((query.device.type, is_causal, kwargs))
        return query

    monkeypatch.setattr(F, "scaled_dot_product_attention", torchs, raising=False)
    patch = xattn.patch_torch()
    try:
        meta = torch.empty(1, 2, 5, 8, device="meta")
        assert F.scaled_dot_product_attention(meta, meta, meta, None, 0.0, True, scale=0.5) is meta
        assert calls == [("meta", True, {"scale": 0.5})]
        q = make(1, 2, 5, 8, grad=False)
        assert torch.allclose(F.scaled_dot_product_attention(q, q, q), reference(q, q, q), rtol=0, atol=1e-12)
        assert len(calls) == 1  # the CPU call ran on xattn
    finally:
        patch.undo()
    assert F.scaled_dot_product_attention is torchs
