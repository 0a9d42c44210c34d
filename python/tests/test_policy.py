"""xattn.policy: a C++ scoring function compiled on first use and cached, fused forward and
backward against PyTorch autograd on the same function written in torch ops (float64), its
learnable's gradient, the cache, and a compile error."""

import math
import os
import time

import pytest
import torch

import xattn

# [snippet cosine]
COSINE = """
struct cosine_t {
  xattn::learnable<float> temperature{10.0f};

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;  // unqualified: the backward differentiates it on xattn::var
    T qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) {
      qk += q[d] * k[d];
      qq += q[d] * q[d];
      kk += k[d] * k[d];
    }
    const T norm = sqrt(qq * kk);
    return norm == 0 ? T(0) : T(temperature) * qk / norm;
  }
};
"""
# [end cosine]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("xattn_cache"))
    os.environ["XATTN_CACHE"] = path
    yield path
    del os.environ["XATTN_CACHE"]


def reference(q, k, v, temperature, causal, lengths, sinks):
    B, H, Sq, D = q.shape
    Skv = k.shape[2]
    qn, kn = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    s = temperature * (qn @ kn.transpose(-1, -2))
    visible = torch.ones(Sq, Skv, dtype=torch.bool)
    if causal:
        visible = torch.tril(visible)
    visible = visible.expand(B, H, Sq, Skv) & (torch.arange(Skv).view(1, 1, 1, -1) < lengths.view(B, 1, 1, 1))
    s = s.masked_fill(~visible, float("-inf"))
    s = torch.cat([s, sinks.view(1, H, 1, 1).expand(B, H, Sq, 1)], -1)
    return torch.softmax(s, -1)[..., :-1] @ v


def test_cosine_policy_trains_its_temperature(cache):
    start = time.time()
    # [snippet policy]
    cosine = xattn.policy(COSINE, name="cosine_t")  # compiled on first use, then cached
    q, k, v = (torch.randn(2, 4, 33, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    sinks = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    lens = torch.tensor([33, 20])
    out = xattn.attention(q, k, v, score=cosine, causal=True, lengths=lens, sinks=sinks)
    out.square().sum().backward()  # q.grad, k.grad, v.grad, sinks.grad and cosine.temperature.grad
    # [end policy]
    first_use = time.time() - start
    print("first use (float32 and float64 compiled): %.1f s" % first_use)
    assert cosine.names == ["temperature"] and float(cosine.temperature) == 10.0
    ours = [q, k, v, sinks, cosine.temperature]
    theirs = [x.detach().clone().requires_grad_() for x in ours]
    want = reference(*theirs[:3], theirs[4], True, lens, theirs[3])
    assert torch.allclose(out, want, rtol=0, atol=1e-11)
    want.square().sum().backward()
    for name, a, b in zip(["q", "k", "v", "sinks", "temperature"], ours, theirs):
        assert a.grad is not None, name
        assert torch.allclose(a.grad, b.grad, rtol=0, atol=1e-9), name

    # float32 on the same policy, and the cached library the second time
    before = sorted(os.listdir(cache))
    start = time.time()
    again = xattn.policy(COSINE, name="cosine_t")
    assert time.time() - start < 1.0 and sorted(os.listdir(cache)) == before
    out32 = xattn.attention(q.detach().float(), k.detach().float(), v.detach().float(), score=again, causal=True,
                            lengths=lens, sinks=sinks.detach().float())
    assert (out32.double() - want.detach()).abs().max() < 1e-5


def test_a_float_learnable_is_held_in_double_for_finite_differences(cache):
    # the source declares learnable<float>; its tensor is float64, and so is what the float64 library
    # evaluates: a central difference at h = 1e-6 (below float's resolution at 10) matches autograd
    cosine = xattn.policy(COSINE, name="cosine_t")
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 9, 8, generator=g, dtype=torch.float64) for _ in range(3))
    t = cosine.temperature
    xattn.attention(q, k, v, score=cosine).square().sum().backward()
    h, values = 1e-6, []
    for step in (h, -h):
        with torch.no_grad():
            t.fill_(10.0 + step)
            values.append(float(xattn.attention(q, k, v, score=cosine).square().sum()))
    with torch.no_grad():
        t.fill_(10.0)
    difference = (values[0] - values[1]) / (2 * h)
    assert abs(difference - float(t.grad)) <= 1e-6 * abs(float(t.grad))
    t.grad = None


def test_policy_parameters_are_set_per_call(cache):
    cosine = xattn.policy(COSINE, name="cosine_t")
    q, k, v = (torch.randn(1, 2, 9, 8) for _ in range(3))
    with torch.no_grad():
        cosine.temperature.fill_(0.0)  # every score 0: the mean of the values
        out = xattn.attention(q, k, v, score=cosine)
    assert torch.allclose(out, v.mean(dim=2, keepdim=True).expand_as(out), atol=1e-6)


def test_compile_error_names_the_first_error(cache):
    with pytest.raises(xattn.CompileError, match="broken_t does not compile: .*error"):
        xattn.policy("struct broken_t { int operator()(; };", name="broken_t")


def test_jit_flags_reach_the_compiler(cache, monkeypatch):
    """$XATTN_JIT_FLAGS goes on the compile command: a flag the compiler refuses is its first error."""
    monkeypatch.setenv("XATTN_JIT_FLAGS", "-O1 -fno-such-xattn-flag")
    with pytest.raises(xattn.CompileError, match="flagged_t does not compile: .*no-such-xattn-flag"):
        xattn.policy("struct flagged_t {};", name="flagged_t")


def test_policy_with_runtime_masks_alibi_softcap_and_rope(cache):
    """The policy's one expression takes documents, a boolean mask, ALiBi, softcap and rotary
    embeddings chosen at run time (against the same cosine written in torch ops)."""
    from test_options import rotate

    cosine = xattn.policy(COSINE, name="cosine_t")
    B, H, S, D = 2, 2, 11, 8
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, H, S, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ids = torch.tensor([0] * 4 + [1] * 7)
    flags = torch.rand(B, 1, S, S, generator=g) > 0.25
    slopes = torch.tensor([0.3, 0.05], dtype=torch.float64)
    out = xattn.attention(q, k, v, score=cosine, documents=ids, mask=flags, alibi=slopes, softcap=5.0, rope="half")
    pos = torch.arange(S)
    qr, kr = rotate(q, pos), rotate(k, pos)
    s = 10.0 * (qr / qr.norm(dim=-1, keepdim=True)) @ (kr / kr.norm(dim=-1, keepdim=True)).transpose(-1, -2)
    s = 5.0 * torch.tanh(s / 5.0) - slopes.view(H, 1, 1) * (pos.view(-1, 1) - pos.view(1, -1)).abs()
    visible = flags & (ids.view(-1, 1) == ids.view(1, -1))
    p = torch.softmax(s.masked_fill(~visible, float("-inf")), -1).nan_to_num()
    want = p @ v
    assert (out - want).abs().max() < 1e-6  # rope's float angles
    d_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
    ours = torch.autograd.grad(out, (q, k, v, cosine.temperature), d_out)
    theirs = torch.autograd.grad(want, (q, k, v), d_out)
    for a, b in zip(ours, theirs):
        assert (a - b).abs().max() < 1e-5
    with pytest.raises(NotImplementedError, match="desc.bias, desc.dropout_p and desc.additive are not supported with a compiled"):
        xattn.attention(q, k, v, score=cosine, dropout=0.1)
