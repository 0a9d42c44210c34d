"""xattn.attention against PyTorch autograd in float64: outputs and the gradients of q, k, v and
sinks for every option (causal either way, windows, lengths of rank 1 and 2 with empty rows,
softcap, sinks, scale, grouped heads, one head, strided tensors), finite differences
(torch.autograd.gradcheck), numpy arrays, bfloat16, and bad input."""

import math

import numpy as np
import pytest
import torch

import xattn


def reference(q, k, v, scale=None, causal=False, window=None, lengths=None, softcap=None, sinks=None):
    """The attention xattn documents, in plain PyTorch ops (autograd differentiates it)."""
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    k, v = k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1)
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(D) if scale is None else scale)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j = torch.arange(Sq).view(-1, 1), torch.arange(Skv).view(1, -1)
    pos = i + (Skv - Sq if causal == "bottom_right" else 0)
    left, right = window if window is not None else (None, None)
    if causal:
        right = 0 if right is None else min(right, 0)
    visible = torch.ones(Sq, Skv, dtype=torch.bool)
    if left is not None:
        visible &= j >= pos - left
    if right is not None:
        visible &= j <= pos + right
    visible = visible.expand(B, Hq, Sq, Skv)
    if lengths is not None:
        n = lengths.view(B, 1, 1, 1) if lengths.dim() == 1 else lengths.view(B, 1, Sq, 1)
        visible = visible & (j < n)
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.view(1, Hq, 1, 1).expand(B, Hq, Sq, 1)], -1)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    p = e / torch.where(den == 0, torch.ones_like(den), den)  # a row seeing nothing outputs 0
    if sinks is not None:
        p = p[..., :-1]
    return p @ v


CASES = [
    dict(),
    dict(causal=True),
    dict(causal="bottom_right"),
    dict(window=(5, 3)),
    dict(causal=True, window=(7, 0)),
    dict(causal="bottom_right", window=(4, None)),
    dict(lengths="1d"),
    dict(lengths="2d", causal=True),
    dict(softcap=2.5, scale=0.3),
    dict(sinks=True),
    dict(sinks=True, causal=True, window=(6, 0), softcap=4.0, lengths="1d"),
]


def make(shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def options(case, B, Hq, Sq, Skv):
    o = dict(case)
    g = torch.Generator().manual_seed(7)
    if o.get("lengths") == "1d":
        o["lengths"] = torch.tensor([0, Skv - 3][:B], dtype=torch.int64)
    elif o.get("lengths") == "2d":
        o["lengths"] = torch.randint(0, Skv + 1, (B, Sq), generator=g, dtype=torch.int32)
    if o.get("sinks"):
        o["sinks"] = torch.randn(Hq, generator=g, dtype=torch.float64)
    return o


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("shape", [(2, 4, 2, 13, 21, 16, 8), (1, 2, 2, 9, 9, 8, 5)], ids=["gqa", "mha"])
def test_float64_outputs_and_gradients_match_autograd(case, shape):
    B, Hq, Hkv, Sq, Skv, D, Dv = shape
    q, k, v = make((B, Hq, Sq, D), seed=1), make((B, Hkv, Skv, D), seed=2), make((B, Hkv, Skv, Dv), seed=3)
    o = options(case, B, Hq, Sq, Skv)
    sinks = o.pop("sinks", None)
    ours = [x.clone().requires_grad_() for x in (q, k, v)] + ([sinks.clone().requires_grad_()] if sinks is not None else [])
    theirs = [x.detach().clone().requires_grad_() for x in ours]
    out = xattn.attention(*ours[:3], sinks=ours[3] if sinks is not None else None, **o)
    want = reference(*theirs[:3], sinks=theirs[3] if sinks is not None else None, **o)
    assert out.dtype == torch.float64 and out.shape == want.shape
    assert torch.allclose(out, want, rtol=0, atol=1e-12)
    d_out = make(out.shape, seed=4)
    out.backward(d_out)
    want.backward(d_out)
    for name, a, b in zip(["q", "k", "v", "sinks"], ours, theirs):
        assert torch.allclose(a.grad, b.grad, rtol=0, atol=1e-11), name


def test_gradcheck_finite_differences():
    q, k, v = (make(s, seed=n).requires_grad_() for n, s in enumerate([(1, 2, 5, 4), (1, 1, 7, 4), (1, 1, 7, 3)]))
    sinks = make((2,), seed=9).requires_grad_()
    f = lambda q, k, v, s: xattn.attention(q, k, v, causal="bottom_right", softcap=3.0, sinks=s, window=(4, 1))
    assert torch.autograd.gradcheck(f, (q, k, v, sinks), eps=1e-6, atol=1e-7)


def test_float32_and_strided_tensors_are_read_in_place():
    B, S, H, D = 2, 33, 4, 16
    x = make((B, S, 3, H, D), torch.float32, seed=5)  # packed qkv, as a projection writes it
    q, k, v = (x[:, :, n].transpose(1, 2) for n in range(3))  # (B, H, S, D) views, not contiguous
    assert not q.is_contiguous()
    out = xattn.attention(q, k, v, causal=True)
    want = xattn.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(out, want)
    ref = reference(*(t.double() for t in (q, k, v)), causal=True)
    assert (out.double() - ref).abs().max() < 2e-6


def test_float32_gradients():
    q, k, v = (make(s, torch.float32, seed=n).requires_grad_() for n, s in enumerate([(2, 4, 40, 32)] * 3))
    out = xattn.attention(q, k, v, causal=True, softcap=20.0)
    out.square().sum().backward()
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    reference(qd, kd, vd, causal=True, softcap=20.0).square().sum().backward()
    for a, b in ((q, qd), (k, kd), (v, vd)):
        assert a.grad.dtype == torch.float32
        assert (a.grad.double() - b.grad).abs().max() < 1e-4


def test_bfloat16_forward_and_backward():
    q, k, v = (make(s, torch.bfloat16, seed=n).requires_grad_() for n, s in enumerate([(1, 4, 24, 32)] * 3))
    out = xattn.attention(q, k, v, causal=True)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = reference(qd, kd, vd, causal=True)
    want.sum().backward()
    assert (out.double() - want).abs().max() < 2e-2
    for a, b in ((q, qd), (k, kd), (v, vd)):
        assert a.grad.dtype == torch.bfloat16  # rounded from float gradients
        assert (a.grad.double() - b.grad).abs().max() < 5e-2


def test_float32_queries_over_bfloat16_and_float16_keys_and_values():
    # decoding from a 16-bit cache: the keys and values stay 16-bit; their gradients come in their type
    for kv_type in (torch.bfloat16, torch.float16):
        q = make((2, 4, 3, 32), torch.float32, seed=1).requires_grad_()
        k, v = (make((2, 2, 50, 32), kv_type, seed=n).requires_grad_() for n in (2, 3))
        out = xattn.attention(q, k, v, causal="bottom_right", sinks=torch.zeros(4))
        assert out.dtype == torch.float32
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        want = reference(qd, kd, vd, causal="bottom_right", sinks=torch.zeros(4, dtype=torch.float64))
        assert (out.double() - want).abs().max() < 2e-6
        out.square().sum().backward()
        want.square().sum().backward()
        assert (q.grad.dtype, k.grad.dtype, v.grad.dtype) == (torch.float32, kv_type, kv_type)
        for a, b, tol in ((q, qd, 1e-5), (k, kd, 2e-2), (v, vd, 2e-2)):
            assert (a.grad.double() - b.grad).abs().max() < tol
        rope = xattn.attention(q.detach(), k.detach(), v.detach(), rope="half")  # the rarer options: widened copies
        assert (rope - xattn.attention(q.detach(), k.detach().float(), v.detach().float(), rope="half")).abs().max() \
            < 1e-6


def test_out_receives_the_result_in_place_in_any_strides():
    B, S, H, D = 2, 9, 4, 8
    q, k, v = (make((B, H, S, D), seed=n).requires_grad_() for n in (1, 2, 3))
    buffer = torch.full((B, S, H, D), 7.0, dtype=torch.float64)  # (B, S, H, D), as the next projection reads it
    out = xattn.attention(q, k, v, causal=True, out=buffer.transpose(1, 2))
    want = reference(q, k, v, causal=True)
    assert out.data_ptr() == buffer.data_ptr()
    assert torch.allclose(buffer.transpose(1, 2), want, rtol=0, atol=1e-12)
    got = torch.autograd.grad(out.square().sum(), (q, k, v))  # through the buffer's history
    expected = torch.autograd.grad(want.square().sum(), (q, k, v))
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, rtol=0, atol=1e-11)
    arrays = [t.detach().numpy() for t in (q, k, v)]
    into = np.zeros((B, S, H, D)).transpose(0, 2, 1, 3)
    assert xattn.attention(*arrays, out=into) is into
    assert np.abs(into - reference(q.detach(), k.detach(), v.detach()).numpy()).max() < 1e-12
    for bad, words in ((torch.zeros(B, H, S, D + 1, dtype=torch.float64), "out has shape"),
                       (torch.zeros(B, H, S, D), "dtype torch.float32"),
                       (torch.zeros(B, 1, S, D, dtype=torch.float64).expand(B, H, S, D), "out strides")):
        before = bad.clone()
        with pytest.raises(ValueError, match=words):
            xattn.attention(q, k, v, out=bad)
        assert torch.equal(bad, before)


def test_numpy_in_numpy_out():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 10, 8), (2, 3, 12, 8), (2, 3, 12, 6)])
    out = xattn.attention(q, k, v, causal="bottom_right", lengths=[12, 7])
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, 3, 10, 6)
    want = reference(*(torch.from_numpy(t).double() for t in (q, k, v)), causal="bottom_right",
                     lengths=torch.tensor([12, 7]))
    assert np.abs(out - want.numpy()).max() < 2e-6


def test_one_head_rank_3():
    q, k, v = make((2, 5, 8), seed=1), make((2, 7, 8), seed=2), make((2, 7, 3), seed=3)
    out = xattn.attention(q, k, v, lengths=torch.tensor([3, 0]))  # d2l's (B, S, D) with valid_lens
    assert out.shape == (2, 5, 3)
    want = reference(q[:, None], k[:, None], v[:, None], lengths=torch.tensor([3, 0]))[:, 0]
    assert torch.allclose(out, want, rtol=0, atol=1e-12)
    assert torch.all(out[1] == 0)  # no valid key: zeros (xattn's fully masked rows)


@pytest.mark.parametrize("shape", [(1, 4, 0, 4), (2, 0, 8)])
def test_no_queries_give_an_empty_result_and_zero_key_gradients(shape):
    q = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    kv_shape = shape[:-2] + (5, shape[-1])
    k, v = make(kv_shape, seed=4).requires_grad_(), make(kv_shape, seed=5).requires_grad_()
    out = xattn.attention(q, k, v, causal=True)
    assert out.shape == shape
    out.sum().backward()
    assert q.grad.shape == shape
    assert torch.all(k.grad == 0) and torch.all(v.grad == 0)  # no query weighs any key
    empty = xattn.attention(*(t.detach().numpy() for t in (q, k, v)))
    assert isinstance(empty, np.ndarray) and empty.shape == shape


@pytest.mark.parametrize("with_bias", [False, True])
def test_a_float_mask_that_requires_grad_gets_its_gradient(with_bias):
    q, k, v = make((2, 2, 5, 8), seed=9), make((2, 2, 6, 8), seed=10), make((2, 2, 6, 4), seed=11)
    mask = make((1, 2, 5, 6), seed=12)
    mask[0, 1, 2, :] = float("-inf")  # a row that sees no key
    mask[0, 0, :, 3] = float("-inf")
    mask.requires_grad_()  # alone: q, k and v need no gradient
    bias = make((5, 6), seed=13).requires_grad_() if with_bias else None
    out = xattn.attention(q, k, v, mask=mask, bias=bias)
    (out * v[..., :5, :]).sum().backward()
    m = mask.detach().clone().requires_grad_()
    b = bias.detach().clone().requires_grad_() if with_bias else None
    s = q @ k.transpose(-1, -2) / math.sqrt(8) + m + (b if with_bias else 0)
    none = torch.isinf(s).all(-1, keepdim=True)  # xattn's row that sees no key: zeros, no gradient
    want = torch.softmax(s.masked_fill(none, 0.0), -1).masked_fill(none, 0.0) @ v
    (want * v[..., :5, :]).sum().backward()
    assert torch.allclose(out, want, rtol=0, atol=1e-12)
    assert mask.grad is not None and torch.allclose(mask.grad, m.grad, rtol=0, atol=1e-12)
    if with_bias:
        assert torch.allclose(bias.grad, b.grad, rtol=0, atol=1e-12)


def test_torch_jit_trace_is_refused_rather_than_recording_an_empty_function():
    from xattn.flex import flex_attention

    q, k, v = make((1, 2, 4, 8), seed=6), make((1, 2, 5, 8), seed=7), make((1, 2, 5, 8), seed=8)
    with pytest.raises(RuntimeError, match="xattn.attention cannot be recorded by torch.jit.trace"):
        torch.jit.trace(lambda q, k, v: xattn.attention(q, k, v), (q, k, v))
    with pytest.raises(RuntimeError, match="xattn.scaled_dot_product_attention cannot be recorded by torch.jit.trace"):
        torch.jit.trace(lambda q, k, v: xattn.scaled_dot_product_attention(q, k, v), (q, k, v))
    with pytest.raises(RuntimeError, match="xattn.flex_attention cannot be recorded by torch.jit.trace"):
        torch.jit.trace(lambda q, k, v: flex_attention(q, k, v), (q, k, v))
    assert torch.allclose(xattn.attention(q, k, v), reference(q, k, v), rtol=0, atol=1e-12)  # eagerly: fine


def test_torch_fx_records_each_call_as_one_node():
    from xattn.flex import flex_attention

    sinks = make((2,), seed=9)

    class Block(torch.nn.Module):
        def forward(self, q, k, v):
            return xattn.attention(q, k, v, causal=True, sinks=sinks) + xattn.scaled_dot_product_attention(q, k, v)

    graph = torch.fx.symbolic_trace(Block())
    calls = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    assert xattn.attention in calls and xattn.scaled_dot_product_attention in calls
    q, k, v = (make((1, 2, 5, 8), seed=n).requires_grad_() for n in (1, 2, 3))
    out = graph(q, k, v)
    want = reference(q, k, v, causal=True, sinks=sinks) + reference(q, k, v)
    assert torch.allclose(out, want, rtol=0, atol=1e-12)
    got, expected = torch.autograd.grad(out.sum(), q), torch.autograd.grad(want.sum(), q)
    assert torch.allclose(got[0], expected[0], rtol=0, atol=1e-11)

    class Flex(torch.nn.Module):
        def forward(self, q, k, v):
            return flex_attention(q, k, v)

    with pytest.raises(RuntimeError, match="flex_attention cannot be recorded by torch.fx.symbolic_trace"):
        torch.fx.symbolic_trace(Flex())


def test_vmap_and_double_backward_are_refused_by_name():
    import functorch
    from xattn.flex import flex_attention

    q = make((3, 1, 2, 4, 8), seed=1).requires_grad_()
    for f, who in ((lambda x: xattn.attention(x, x, x), "xattn.attention: q"),
                   (lambda x: xattn.scaled_dot_product_attention(x, x, x), "xattn.scaled_dot_product_attention: query"),
                   (lambda x: flex_attention(x, x, x), "xattn.flex_attention: query")):
        with pytest.raises(RuntimeError, match=who + " has no memory of its own: it is a tensor of a functorch"):
            functorch.vmap(f)(q)
        g, = torch.autograd.grad(f(q[0]).square().sum(), q, create_graph=True)  # the first gradient: fine
        assert torch.allclose(g[0], torch.autograd.grad(f(q[0]).square().sum(), q)[0][0], rtol=0, atol=0)
        with pytest.raises(RuntimeError, match=r"the gradient of its gradient \(double backward"):
            g.sum().backward()


def test_bad_input_raises_with_the_library_message():
    q, k, v = make((1, 4, 3, 8)), make((1, 3, 5, 8)), make((1, 3, 5, 6))
    with pytest.raises(ValueError, match="q \\(1,4,3,8\\) has 4 heads, not a multiple of k's 3"):
        xattn.attention(q, k, v)
    k, v = make((1, 2, 5, 8)), make((1, 2, 5, 6))
    with pytest.raises(ValueError, match="lengths\\[0\\] = 9 is outside \\[0, 5\\]"):
        xattn.attention(q, k, v, lengths=[9])
    with pytest.raises(ValueError, match="desc.sinks has shape \\(3\\) but must be \\(Hq\\) = \\(4\\)"):
        xattn.attention(q, k, v, sinks=make((3,)))
    with pytest.raises(ValueError, match="causal must be False, True"):
        xattn.attention(q, k, v, causal="left")
    with pytest.raises(ValueError, match="q has dtype XATTN_I32; q, k and v must be XATTN_F32"):
        xattn.attention(q.int(), k.int(), v.int())
    with pytest.raises(TypeError, match="q has dtype torch.complex64"):
        xattn.attention(q.to(torch.complex64), k, v)
