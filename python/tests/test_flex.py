"""xattn.flex: attention-gym's catalogue of score_mod / mask_mod written in Python, against the
same functions evaluated by PyTorch (float64 autograd) on the whole score matrix: outputs, lse,
and the gradients of q, k, v and every captured tensor that requires grad; GQA, Sq != Skv, a row
that sees nothing, empty shapes, dtypes, determinism, and the errors of what cannot be traced."""

import math
import os

import numpy as np
import pytest
import torch

from xattn.flex import BlockMask, TraceError, and_masks, create_block_mask, flex_attention, or_masks


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    os.environ.setdefault("XATTN_CACHE", str(tmp_path_factory.mktemp("xattn_flex_cache")))


def indices(B, H, Sq, Skv):
    return (torch.arange(B).view(-1, 1, 1, 1), torch.arange(H).view(1, -1, 1, 1), torch.arange(Sq).view(1, 1, -1, 1),
            torch.arange(Skv).view(1, 1, 1, -1))


def naive(q, k, v, score_mod=None, mask_mod=None, scale=None):
    """The formula on the whole score matrix, in torch ops (GQA by repeating k and v)."""
    B, Hq, Sq, D = q.shape
    Skv = k.shape[2]
    k = k.repeat_interleave(Hq // k.shape[1], 1)
    v = v.repeat_interleave(Hq // v.shape[1], 1)
    s = q @ k.transpose(-1, -2) * (1 / math.sqrt(D) if scale is None else scale)
    b, h, i, j = indices(B, Hq, Sq, Skv)
    if score_mod is not None:
        s = score_mod(s, b, h, i, j)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, i, j).expand(s.shape), -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1).nan_to_num()  # a row that sees nothing: 0
    return p @ v, lse


def inputs(B=2, Hq=2, Hkv=2, Sq=70, Skv=70, D=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Sq, D, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    k = torch.randn(B, Hkv, Skv, D, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    v = torch.randn(B, Hkv, Skv, D, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    return q, k, v


def compare(score_mod=None, mask_mod=None, learned=(), tol=1e-10, block=16, mask_b=None, mask_h=None, **shape):
    """flex_attention against naive(), forward (out, lse) and backward (q, k, v, learned)."""
    q, k, v = inputs(**shape)
    for x in learned:
        x.grad = None
    B, Hq, Sq, _ = q.shape
    Skv = k.shape[2]
    bm = create_block_mask(mask_mod, mask_b, mask_h, Sq, Skv, BLOCK_SIZE=block) if mask_mod else None
    out, lse = flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, return_lse=True, enable_gqa=Hq != k.shape[1])
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(out.dtype)
    (out * g).sum().backward()
    got = [x.grad.clone() for x in (q, k, v, *learned)]
    for x in (q, k, v, *learned):
        x.grad = None
    ref, ref_lse = naive(*(x.double() for x in (q, k, v)), score_mod, mask_mod)
    (ref * g.double()).sum().backward()
    want = [x.grad for x in (q, k, v, *learned)]
    assert (out.double() - ref).abs().max().item() <= tol
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse.double() - ref_lse)[finite].abs().max().item() <= tol
    for name, a, b in zip(("dq", "dk", "dv", *("d_captured%d" % n for n in range(len(learned)))), got, want):
        err = (a.double() - b).abs().max().item()
        assert err <= tol * max(1.0, b.abs().max().item()), "%s off by %g" % (name, err)
    return bm


# ---- attention-gym's catalogue -----------------------------------------------------------------

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def test_causal_blocks_and_output():
    bm = compare(mask_mod=causal)
    assert bm.kinds.shape == (1, 1, 5, 5)
    kinds = bm.kinds[0, 0]
    assert torch.equal(kinds.diagonal(), torch.ones(5, dtype=torch.int64))  # partial on the diagonal
    assert torch.equal(kinds.tril(-1) == 2, torch.ones(5, 5, dtype=torch.bool).tril(-1))  # full below
    assert (kinds.triu(1) == 0).all()  # empty above


def test_block_classification_matches_the_dense_mask():
    """Each block's kind from the dense mask, on a ragged grid: a partial block taken as full (or
    empty) is caught here and by every comparison below."""
    doc = torch.tensor([[0] * 9 + [1] * 20 + [2] * 21, [0] * 30 + [1] * 20])

    def documents(b, h, q_idx, kv_idx):
        return doc[b, q_idx] == doc[b, kv_idx]

    Sq, Skv, bq, bk = 50, 50, 16, 8
    bm = create_block_mask(and_masks(causal, documents), 2, None, Sq, Skv, BLOCK_SIZE=(bq, bk))
    b, h, i, j = indices(2, 1, Sq, Skv)
    dense = and_masks(causal, documents)(b, h, i, j).expand(2, 1, Sq, Skv)
    for x in range(bm.kinds.shape[2]):
        for y in range(bm.kinds.shape[3]):
            tile = dense[:, :, x * bq:(x + 1) * bq, y * bk:(y + 1) * bk].flatten(2)
            want = torch.where(~tile.any(-1), 0, torch.where(tile.all(-1), 2, 1))
            assert torch.equal(bm.kinds[:, :, x, y], want)
    assert "partial" in repr(bm) and 0 < bm.sparsity() < 100


def test_sliding_window_and_causal():
    def window(b, h, q_idx, kv_idx):
        return q_idx - kv_idx <= 20

    compare(mask_mod=and_masks(causal, window))


def test_prefix_lm_with_a_captured_prefix_per_batch():
    prefix = torch.tensor([5, 33])

    def prefix_lm(b, h, q_idx, kv_idx):
        return kv_idx <= prefix[b]

    compare(mask_mod=or_masks(prefix_lm, causal), mask_b=2)


def test_document_mask_from_captured_ids_and_q_len_unlike_kv_len():
    q_doc = torch.tensor([[0] * 10 + [1] * 30, [0] * 25 + [2] * 15])
    kv_doc = torch.tensor([[0] * 20 + [1] * 45, [0] * 5 + [1] * 30 + [2] * 30])

    def documents(b, h, q_idx, kv_idx):
        return q_doc[b, q_idx] == kv_doc[b, kv_idx]

    compare(mask_mod=documents, mask_b=2, Sq=40, Skv=65)


def test_alibi_as_a_score_mod_with_gqa():
    slopes = torch.tensor([2.0 ** (-8 * (i + 1) / 4) for i in range(4)], dtype=torch.float64)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    compare(score_mod=alibi, mask_mod=causal, Hq=4, Hkv=2)


def test_tanh_softcap():
    def softcap(score, b, h, q_idx, kv_idx):
        return 2.0 * torch.tanh(score / 2.0)

    compare(score_mod=softcap)


def test_learnable_relative_bias_causal_window():
    # [snippet flex]
    import torch
    from xattn.flex import flex_attention, create_block_mask, and_masks

    B, H, S, D = 2, 8, 256, 64
    q, k, v = (torch.randn(B, H, S, D, requires_grad=True) for _ in range(3))
    rel = torch.zeros(H, 2 * S - 1, requires_grad=True)  # learnable relative-position bias per head
    slopes = torch.tensor([2.0 ** (-8 * (i + 1) / H) for i in range(H)])

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx - kv_idx + S - 1] - slopes[h] * (q_idx - kv_idx).abs()

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def window(b, h, q_idx, kv_idx):
        return q_idx - kv_idx <= 64

    block_mask = create_block_mask(and_masks(causal, window), B=None, H=None, Q_LEN=S, KV_LEN=S)
    out, lse = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, return_lse=True)
    out.sum().backward()  # q.grad, k.grad, v.grad and rel.grad
    # [end flex]
    assert block_mask.kinds[0, 0].tolist() == [[1, 0], [1, 1]]
    with torch.no_grad():
        rel.normal_()
    q.grad = k.grad = v.grad = rel.grad = None
    qd, kd, vd, reld = (x.detach().double().requires_grad_() for x in (q, k, v, rel))
    sl = slopes.double()

    def score_mod64(score, b, h, q_idx, kv_idx):
        return score + reld[h, q_idx - kv_idx + S - 1] - sl[h] * (q_idx - kv_idx).abs()

    out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    out.square().sum().backward()
    ref, _ = naive(qd, kd, vd, score_mod64, and_masks(causal, window))
    ref.square().sum().backward()
    assert (out - ref).abs().max() < 2e-5
    for a, b in ((q, qd), (k, kd), (v, vd), (rel, reld)):
        assert (a.grad - b.grad).abs().max() < 1e-4 * max(1.0, b.grad.abs().max().item())
    # float64 throughout, on a smaller shape: to float64 rounding
    compare(score_mod=score_mod64, mask_mod=and_masks(causal, window), learned=(reld,), Hq=8, Hkv=8, Sq=S, Skv=S,
            D=16, B=1, block=64)


def test_t5_bucketed_learnable_bias():
    buckets, max_distance, H = 16, 64, 2
    table = torch.randn(buckets, H, generator=torch.Generator().manual_seed(4), dtype=torch.float64).requires_grad_()

    def bucket(q_idx, kv_idx):  # T5's causal buckets: exact below 8, logarithmic to max_distance
        n = (q_idx - kv_idx).clamp(min=0)
        exact = buckets // 2
        large = exact + (torch.log(n.clamp(min=1).to(torch.float32) / exact) / math.log(max_distance / exact)
                         * (buckets - exact)).to(torch.int64)
        large = torch.clamp(large, 0, buckets - 1)
        return torch.where(n < exact, n, large)

    def t5(score, b, h, q_idx, kv_idx):
        return score + table[bucket(q_idx, kv_idx), h]

    compare(score_mod=t5, mask_mod=causal, learned=(table,))


def test_natten_neighbourhood_over_an_image():
    W, K = 10, 2  # a 7 x 10 image, each pixel sees a 5 x 5 neighbourhood

    def natten(b, h, q_idx, kv_idx):
        return ((q_idx // W - kv_idx // W).abs() <= K) & ((q_idx % W - kv_idx % W).abs() <= K)

    compare(mask_mod=natten)


def test_dilated_sliding_window():
    def dilated(b, h, q_idx, kv_idx):
        d = q_idx - kv_idx
        return (d.abs() <= 24) & (d % 3 == 0)

    compare(mask_mod=dilated)


def test_three_mods_combined_per_head_mask():
    rel = torch.randn(2, 139, generator=torch.Generator().manual_seed(5), dtype=torch.float64).requires_grad_()
    slopes = torch.tensor([0.25, 0.0625], dtype=torch.float64)

    def mods(score, b, h, q_idx, kv_idx):
        s = 3.0 * torch.tanh(score / 3.0)
        s = s + rel[h, q_idx - kv_idx + 69] * torch.sigmoid(score)
        return torch.where(q_idx > kv_idx, s - slopes[h] * (q_idx - kv_idx), s)

    def per_head(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= 10 + 20 * h) & causal(b, h, q_idx, kv_idx)

    compare(score_mod=mods, mask_mod=per_head, learned=(rel,), mask_h=2)


def test_a_row_that_sees_no_key_gives_zero_and_minus_infinity():
    def hole(b, h, q_idx, kv_idx):
        return (q_idx != 3) & causal(b, h, q_idx, kv_idx)

    q, k, v = inputs()
    bm = create_block_mask(hole, None, None, 70, 70, BLOCK_SIZE=16)
    out, lse = flex_attention(q, k, v, block_mask=bm, return_lse=True)
    assert (out[:, :, 3] == 0).all() and torch.isinf(lse[:, :, 3]).all() and (lse[:, :, 3] < 0).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[:, :, 3] == 0).all()
    compare(mask_mod=hole)


def test_empty_shapes():
    for B, Sq in ((0, 5), (2, 0)):
        q, k, v = inputs(B=B, Sq=Sq, Skv=6)
        out, lse = flex_attention(q, k, v, return_lse=True)
        assert out.shape == (B, 2, Sq, 8) and lse.shape == (B, 2, Sq)
        out.sum().backward()
        assert q.grad.shape == q.shape and (k.grad == 0).all()


def test_float32_bfloat16_and_numpy():
    S, H = 70, 2
    rel = torch.randn(H, 2 * S - 1, generator=torch.Generator().manual_seed(6)).requires_grad_()

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx - kv_idx + S - 1]

    compare(score_mod=score_mod, mask_mod=causal, learned=(rel,), dtype=torch.float32, tol=2e-5)
    compare(score_mod=score_mod, mask_mod=causal, learned=(rel,), dtype=torch.bfloat16, tol=3e-2)
    q, k, v = (x.detach().float().numpy() for x in inputs())
    with torch.no_grad():
        out = flex_attention(q, k, v, score_mod=score_mod)
        ref, _ = naive(*(torch.from_numpy(x).double() for x in (q, k, v)), score_mod)
    assert isinstance(out, np.ndarray) and np.abs(out - ref.numpy()).max() < 2e-5


def test_table_gradient_is_deterministic_across_thread_counts():
    S = 70
    rel = torch.randn(2, 2 * S - 1, generator=torch.Generator().manual_seed(8), dtype=torch.float64).requires_grad_()

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx - kv_idx + S - 1]

    grads = []
    for threads in (1, 2, 1):
        q, k, v = inputs()
        rel.grad = None
        flex_attention(q, k, v, score_mod=score_mod, threads=threads).sum().backward()
        grads.append(rel.grad.clone())
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0], grads[2])


def test_captures_changed_in_place_between_calls_are_read_as_they_are_now():
    S = 40
    rel = torch.zeros(2, 2 * S - 1, requires_grad=True)  # float32: the kernel reads a float64 copy
    ids = torch.zeros(S, dtype=torch.int32)  # int32: read as an int64 copy

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx - kv_idx + S - 1] + ids[kv_idx]

    q, k, v = (x.detach() for x in inputs(Sq=S, Skv=S))
    opt = torch.optim.SGD([rel], lr=1.0)
    for step in range(3):
        out = flex_attention(q, k, v, score_mod=score_mod)
        with torch.no_grad():
            ref, _ = naive(q, k, v, lambda s, b, h, i, j: s + rel.double()[h, i - j + S - 1] + ids.double()[j])
        assert (out - ref).abs().max().item() < 1e-12, step
        (out * torch.arange(out.numel(), dtype=out.dtype).view(out.shape).sin()).sum().backward()
        opt.step()  # in place: the next call must see the new table
        opt.zero_grad()
    ids.copy_(torch.arange(S) % 3)
    for _ in range(2):
        with torch.no_grad():
            out = flex_attention(q, k, v, score_mod=score_mod)
            ref, _ = naive(q, k, v, lambda s, b, h, i, j: s + rel.double()[h, i - j + S - 1] + ids.double()[j])
        assert rel.abs().max() > 0.1 and (out - ref).abs().max().item() < 1e-12
        rel.data.mul_(3)  # in place without a version bump
    table = torch.zeros(2, 3, dtype=torch.float64)

    def lookup(score, b, h, q_idx, kv_idx):
        return score + table[h, ids[kv_idx]]

    flex_attention(q, k, v, score_mod=lookup)
    ids[3] = 3  # now out of the table's range: checked again, not run
    with pytest.raises(IndexError, match="lookup"):
        flex_attention(q, k, v, score_mod=lookup)


def test_out_receives_the_result_in_place_and_backpropagates():
    B, H, S, D = 1, 2, 40, 16
    q, k, v = (torch.randn(B, H, S, D, dtype=torch.float64, requires_grad=True) for _ in range(3))

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def bias(score, b, h, q_idx, kv_idx):
        return score - 0.1 * (q_idx - kv_idx)

    mask = create_block_mask(causal, None, None, S, S)
    buffer = torch.zeros(B, S, H, D, dtype=torch.float64)
    out = flex_attention(q, k, v, score_mod=bias, block_mask=mask, out=buffer.transpose(1, 2))
    want, _ = naive(q, k, v, bias, causal)
    assert out.data_ptr() == buffer.data_ptr()
    assert torch.allclose(buffer.transpose(1, 2), want, rtol=0, atol=1e-12)
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected = torch.autograd.grad(want.square().sum(), (q, k, v))
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, rtol=0, atol=1e-11)
    with pytest.raises(ValueError, match=r"out must be a torch tensor of shape \(1, 2, 40, 16\)"):
        flex_attention(q, k, v, out=torch.zeros(B, H, S, D))


def test_gradcheck_small():
    q, k, v = inputs(B=1, Hq=1, Hkv=1, Sq=6, Skv=7, D=3)
    bias = torch.randn(1, 13, dtype=torch.float64, requires_grad=True)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score * torch.exp(bias[h, q_idx - kv_idx + 6] / 4)

    bm = create_block_mask(lambda b, h, i, j: (i + j) % 4 != 1, None, None, 6, 7, BLOCK_SIZE=2)
    assert torch.autograd.gradcheck(lambda q, k, v, bias: flex_attention(q, k, v, score_mod=score_mod, block_mask=bm),
                                    (q, k, v, bias))


def test_what_cannot_be_traced_is_named_with_its_line():
    q, k, v = inputs(Sq=8, Skv=8)

    def branches(score, b, h, q_idx, kv_idx):
        if q_idx > kv_idx:
            return score
        return score * 2

    with pytest.raises(TraceError, match=r"Python `if`.*branches at test_flex.py, line \d+"):
        flex_attention(q, k, v, score_mod=branches)

    def sine(score, b, h, q_idx, kv_idx):
        return torch.sin(score)

    with pytest.raises(TraceError, match=r"torch.sin is not supported.*sine at test_flex.py"):
        flex_attention(q, k, v, score_mod=sine)

    short = torch.zeros(2, 14)

    def out_of_range(score, b, h, q_idx, kv_idx):
        return score + short[h, q_idx - kv_idx + 7]

    with pytest.raises(IndexError, match=r"shape \(2, 14\) at index .* on axis 1, which ranges over \[0, 14\]"):
        flex_attention(q, k, v, score_mod=out_of_range)

    def float_index(score, b, h, q_idx, kv_idx):
        return score + short[h, q_idx / 2]

    with pytest.raises(TraceError, match="a float used as an index"):
        flex_attention(q, k, v, score_mod=float_index)
    with pytest.raises(ValueError, match="enable_gqa"):
        flex_attention(q, k[:, :1], v[:, :1])
    bm = create_block_mask(causal, None, None, 16, 16)
    with pytest.raises(ValueError, match="block_mask has shape"):
        flex_attention(q, k, v, block_mask=bm)
    assert isinstance(bm, BlockMask)
