"""xattn.KVCache: a decode loop over a ragged batch with a fork, equal at every step to the same
attention recomputed from plain tensors; every cache format against float64; the options
(causal, window, softcap, sinks) at each sequence's own end; out=; and bad input, after which the
cache is as it was."""

import math

import numpy as np
import pytest
import torch

import xattn


def recomputed(q, k, v, causal=True, window=None, softcap=None, sinks=None, alibi=None, mask=None):
    """One sequence's attention in float64 torch ops: q (Hq, n, D) the newest n of k, v (Hkv, S, D);
    mask (Hq, n, S) bool."""
    Hq, n, D = q.shape
    Hkv, S = k.shape[0], k.shape[1]
    k, v = k.double().repeat_interleave(Hq // Hkv, 0), v.double().repeat_interleave(Hq // Hkv, 0)
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(D)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    pos = torch.arange(n).view(-1, 1) + S - n
    j = torch.arange(S).view(1, -1)
    if alibi is not None:
        s = s - alibi.double().view(Hq, 1, 1) * (pos - j).abs()
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    seen = torch.ones(n, S, dtype=torch.bool)
    if causal:
        seen &= j <= pos
    if window is not None:
        left, right = window
        seen &= j >= pos - left
        if right is not None:
            seen &= j <= pos + right
    s = s.masked_fill(~seen, -math.inf)
    if sinks is not None:
        s = torch.cat([s, sinks.double().view(Hq, 1, 1).expand(Hq, n, 1)], -1)
    p = torch.softmax(s, -1)
    if sinks is not None:
        p = p[..., :-1]
    return p @ v


def test_a_decode_loop_equals_recomputation_at_every_step():
    g = torch.Generator().manual_seed(0)
    Hkv, Hq, D = 2, 8, 64
    cache = xattn.KVCache(kv_heads=Hkv, head_dim=D, dtype="float32", page_size=16, max_tokens=1 << 14)
    rows = lambda n: (torch.randn(Hkv, n, D, generator=g), torch.randn(Hkv, n, D, generator=g))
    ids, keys, values = [], [], []
    for n in (100, 377, 640, 1000):  # the prompts: appended whole
        a = cache.add_sequence()
        k, v = rows(n)
        cache.append(a, k, v)
        ids.append(a), keys.append(k), values.append(v)
    ids.append(cache.fork(ids[1]))  # a second continuation of the second prompt, sharing its pages
    keys.append(keys[1]), values.append(values[1])
    for step in range(64):
        for b in range(len(ids)):  # each sequence's newest token
            k, v = rows(1)
            cache.append(ids[b], k, v)
            keys[b], values[b] = torch.cat([keys[b], k], 1), torch.cat([values[b], v], 1)
        q = torch.randn(len(ids), Hq, 1, D, generator=g)
        out = cache.attention(q, ids, causal=True)
        for b in range(len(ids)):
            assert cache.length(ids[b]) == keys[b].shape[1]
            again = xattn.attention(q[b:b + 1], keys[b][None], values[b][None], causal="bottom_right")
            assert (out[b] - again[0]).abs().max() < 2e-6, (step, b)
            if step % 16 == 0:
                assert (out[b].double() - recomputed(q[b], keys[b], values[b])).abs().max() < 2e-6
    cache.release(ids.pop())
    assert cache.length(ids[1]) == keys[1].shape[1]  # the fork's release leaves the prompt's pages


@pytest.mark.parametrize("dtype,tol", [("float32", 2e-6), ("bfloat16", 2e-2), ("float16", 3e-3), ("int8", 2e-2),
                                       (("int8", "bfloat16"), 2e-2), ("float8_e4m3", 0.15), ("q4_0", 0.4),
                                       (("q4c", "q4_0"), 0.4)])
def test_formats_and_options_at_each_sequences_end(dtype, tol):
    g = torch.Generator().manual_seed(1)
    Hkv, Hq, D = 2, 4, 32
    cache = xattn.KVCache(kv_heads=Hkv, head_dim=D, dtype=dtype, page_size=8, max_tokens=4096)
    lengths = (45, 9, 120)
    ids, kv = [], []
    for n in lengths:
        k, v = torch.randn(Hkv, n, D, generator=g).double(), torch.randn(Hkv, n, D, generator=g).double()
        a = cache.add_sequence()
        cache.append(a, k[:, : n // 2], v[:, : n // 2].numpy())  # torch or numpy, float64 rows
        cache.append(a, k[:, n // 2:].float(), v[:, n // 2:].bfloat16())
        ids.append(a), kv.append((k, torch.cat([v[:, : n // 2], v[:, n // 2:].bfloat16().double()], 1)))
    q = torch.randn(3, Hq, 4, D, generator=g)
    sinks = torch.randn(Hq, generator=g)
    flags = torch.rand(3, Hq, 4, max(lengths), generator=g) > 0.5
    flags[..., 0] = True  # each row sees a key: a row that sees none outputs 0
    for options in (dict(causal=True), dict(causal=True, window=(6, 0)), dict(window=(20, None), softcap=1.5),
                    dict(causal=True, sinks=sinks), dict(causal=True, alibi=torch.tensor([0.5, 0.25, 0.125, 0.0625])),
                    dict(mask=flags)):
        out = cache.attention(q, ids, **options)
        assert out.dtype == torch.float32 and out.shape == (3, Hq, 4, D)
        for b, (k, v) in enumerate(kv):
            mask = options["mask"][b, :, :, :lengths[b]] if "mask" in options else None
            want = recomputed(q[b], k, v, options.get("causal", False), options.get("window"),
                              options.get("softcap"), options.get("sinks"), options.get("alibi"), mask)
            assert (out[b].double() - want).abs().max() < tol, (options, b)
    half = cache.attention(q.bfloat16(), ids, causal=True)  # 16-bit queries: a result of their type
    assert half.dtype == torch.bfloat16


def test_a_rotary_cache_turns_keys_as_stored_and_queries_at_their_positions():
    g = torch.Generator().manual_seed(3)
    Hkv, Hq, D = 2, 4, 32
    for rope in ("half", {"style": "interleaved", "base": 500.0, "dims": 16}):
        cache = xattn.KVCache(kv_heads=Hkv, head_dim=D, rope=rope)
        ids, kv = [], []
        for n in (30, 11):
            a = cache.add_sequence()
            k, v = torch.randn(Hkv, n, D, generator=g), torch.randn(Hkv, n, D, generator=g)
            cache.append(a, k[:, :7], v[:, :7])
            cache.append(a, k[:, 7:], v[:, 7:])  # positions go on from the sequence's length
            ids.append(a), kv.append((k, v))
        q = torch.randn(2, Hq, 3, D, generator=g)
        out = cache.attention(q, ids, causal=True)
        options = dict(rope) if isinstance(rope, dict) else {"style": rope}
        for b, (k, v) in enumerate(kv):
            n = k.shape[1]
            want = xattn.attention(q[b:b + 1], k[None], v[None], causal="bottom_right",
                                   rope=dict(options, q_positions=torch.arange(n - 3, n), k_positions=torch.arange(n)))
            assert (out[b] - want[0]).abs().max() < 2e-6


def test_out_is_written_in_place():
    cache = xattn.KVCache(kv_heads=1, head_dim=16)
    a = cache.add_sequence()
    rng = np.random.default_rng(2)
    k, v = rng.standard_normal((1, 30, 16)), rng.standard_normal((1, 30, 16))
    cache.append(a, k, v)
    q = rng.standard_normal((1, 4, 2, 16)).astype(np.float32)
    buffer = np.zeros((1, 2, 4, 16), np.float32)  # (B, n, Hq, D)
    into = buffer.transpose(0, 2, 1, 3)
    assert cache.attention(q, [a], causal=True, out=into) is into
    want = recomputed(torch.from_numpy(q[0]), torch.from_numpy(k), torch.from_numpy(v))
    assert np.abs(buffer.transpose(0, 2, 1, 3)[0] - want.numpy()).max() < 2e-6


def test_rotate_spreads_outlier_channels_and_leaves_scores_as_they_are():
    g = torch.Generator().manual_seed(4)
    Hkv, Hq, D, n = 2, 8, 64, 256
    k, v = torch.randn(Hkv, n, D, generator=g), torch.randn(Hkv, n, D, generator=g)
    k[:, :, 7] *= 20  # an outlier channel
    q = torch.randn(1, Hq, 1, D, generator=g)
    want = recomputed(q[0], k.double(), v.double())
    errors = {}
    for dtype in ("float32", "q4_0"):
        for rotate in (False, True):
            cache = xattn.KVCache(kv_heads=Hkv, head_dim=D, dtype=dtype, rotate=rotate)
            a = cache.add_sequence()
            cache.append(a, k, v)
            errors[dtype, rotate] = (cache.attention(q, [a])[0].double() - want).abs().max().item()
    assert errors["float32", True] < 2e-5 and errors["float32", False] < 2e-5
    assert errors["q4_0", True] < errors["q4_0", False] / 2, errors


def test_bad_input_raises_and_leaves_the_cache_as_it_was():
    with pytest.raises(ValueError, match="dtype 'int4' is not a cache format"):
        xattn.KVCache(kv_heads=2, head_dim=8, dtype="int4")
    with pytest.raises(ValueError, match="options.kv_heads is 0"):
        xattn.KVCache(kv_heads=0, head_dim=8)
    with pytest.raises(ValueError, match="XATTN_Q4_0 keys and values go together"):
        xattn.KVCache(kv_heads=2, head_dim=32, dtype=("q4_0", "float32"))
    with pytest.raises(ValueError, match="XATTN_Q4C keys take XATTN_Q4_0 values"):
        xattn.KVCache(kv_heads=2, head_dim=32, dtype=("q4c", "int8"))
    with pytest.raises(ValueError, match="options.value_dtype is XATTN_Q4C"):
        xattn.KVCache(kv_heads=2, head_dim=32, dtype="q4c")
    cache = xattn.KVCache(kv_heads=2, head_dim=8, page_size=4, max_tokens=16)
    a = cache.add_sequence()
    k = torch.randn(2, 10, 8)
    cache.append(a, k, k)
    q = torch.randn(1, 2, 1, 8)
    before = cache.attention(q, [a])

    def unchanged():
        assert cache.length(a) == 10
        assert torch.equal(cache.attention(q, [a]), before)

    with pytest.raises(ValueError, match=r"k_rows has shape \(2,10,4\) but the cache holds"):
        cache.append(a, torch.randn(2, 10, 4), k)
    unchanged()
    with pytest.raises(MemoryError, match="xattn_cache_append: "):  # 10 tokens in pages of 4; 7 more need 2 of 1
        cache.append(a, torch.randn(2, 7, 8), torch.randn(2, 7, 8))
    unchanged()
    b = cache.fork(a)
    cache.release(b)
    with pytest.raises(ValueError, match="is not in this cache or was released"):
        cache.append(b, k, k)
    with pytest.raises(ValueError, match="is not in this cache or was released"):
        cache.attention(q, [a, b][1:])
    with pytest.raises(TypeError, match="a sequence id is the int"):
        cache.length("a")
    unchanged()
    with pytest.raises(NotImplementedError, match="attention over a cache has no backward"):
        cache.attention(q.clone().requires_grad_(), [a])
    with pytest.raises(ValueError, match="3 heads are not a multiple of the cache's 2 kv_heads"):
        cache.attention(torch.randn(1, 3, 1, 8), [a])
    out = torch.full((1, 2, 1, 8), 7.0)
    with pytest.raises(ValueError, match="out has shape"):
        cache.attention(q, [a], out=out[..., :4])
    assert torch.all(out == 7.0)
    unchanged()


def test_truncate_rolls_back_a_draft_and_leaves_a_fork_its_tokens():
    torch.manual_seed(12)
    cache = xattn.KVCache(kv_heads=2, head_dim=32, dtype="bfloat16", page_size=4, max_tokens=64)
    direct = xattn.KVCache(kv_heads=2, head_dim=32, dtype="bfloat16", page_size=4, max_tokens=64)
    prompt, draft, accepted = torch.randn(2, 7, 32), torch.randn(2, 5, 32), torch.randn(2, 2, 32)
    a = cache.add_sequence()
    cache.append(a, prompt, prompt)
    b = cache.fork(a)
    cache.append(a, draft, draft)
    qb = torch.randn(1, 4, 1, 32)
    before_b = cache.attention(qb, [b])
    cache.truncate(a, 8)  # the draft's first token accepted, the other four rejected
    cache.append(a, accepted, accepted)
    d = direct.add_sequence()
    for x in (prompt, draft[:, :1], accepted):
        direct.append(d, x, x)
    assert cache.length(a) == 10 and cache.length(b) == 7
    q = torch.randn(1, 4, 3, 32)
    assert torch.equal(cache.attention(q, [a], causal=True), direct.attention(q, [d], causal=True))
    with pytest.raises(ValueError, match="xattn_cache_truncate: length 11 is beyond the sequence's 10 tokens"):
        cache.truncate(a, 11)
    with pytest.raises(ValueError, match="length is -1"):
        cache.truncate(a, -1)
    with pytest.raises(TypeError, match="length is 2.5"):
        cache.truncate(a, 2.5)
    assert cache.length(a) == 10
    assert torch.equal(cache.attention(qb, [b]), before_b)  # the fork kept its pages and tokens


def test_keep_evicts_to_the_given_positions_and_leaves_a_fork_its_tokens():
    torch.manual_seed(13)
    cache = xattn.KVCache(kv_heads=2, head_dim=32, dtype="int8", page_size=4, max_tokens=64)
    direct = xattn.KVCache(kv_heads=2, head_dim=32, dtype="int8", page_size=4, max_tokens=64)
    k, v = torch.randn(2, 13, 32), torch.randn(2, 13, 32)
    a = cache.add_sequence()
    cache.append(a, k, v)
    b = cache.fork(a)
    qb = torch.randn(1, 4, 1, 32)
    before_b = cache.attention(qb, [b])
    kept = [0, 1, 5, 10, 11, 12]  # two sink tokens, a heavy hitter, the newest three
    cache.keep(a, kept)
    d = direct.add_sequence()
    direct.append(d, k[:, kept], v[:, kept])
    assert cache.length(a) == 6 and cache.length(b) == 13
    q = torch.randn(1, 4, 2, 32)
    assert torch.equal(cache.attention(q, [a], causal=True), direct.attention(q, [d], causal=True))
    assert torch.equal(cache.attention(qb, [b]), before_b)  # the fork kept its pages and tokens
    with pytest.raises(ValueError, match="xattn_cache_keep: positions must increase"):
        cache.keep(a, [2, 1])
    with pytest.raises(ValueError, match=r"positions\[1\] = 6 is not below the sequence's 6 tokens"):
        cache.keep(a, [0, 6])
    with pytest.raises(ValueError, match=r"positions\[0\] is -1"):
        cache.keep(a, [-1])
    with pytest.raises(TypeError, match="positions holds 1.5"):
        cache.keep(a, [1.5])
    with pytest.raises(TypeError, match="must be a sequence of ints"):
        cache.keep(a, 3)
    assert cache.length(a) == 6
    cache.keep(a, torch.tensor([0, 5]))  # a tensor of positions too
    assert cache.length(a) == 2


def test_the_documented_example():
    # [snippet kvcache]
    cache = xattn.KVCache(kv_heads=2, head_dim=64, dtype="int8", page_size=16, max_tokens=1 << 16)
    a = cache.add_sequence()
    cache.append(a, torch.randn(2, 300, 64), torch.randn(2, 300, 64))  # the prompt's keys and values
    b = cache.fork(a)  # a second continuation, sharing the prompt's pages
    for step in range(4):
        for s in (a, b):
            cache.append(s, torch.randn(2, 1, 64), torch.randn(2, 1, 64))  # each sequence's newest token
        q = torch.randn(2, 8, 1, 64)  # (sequences, query heads, new tokens, head_dim)
        out = cache.attention(q, [a, b], causal=True, window=(256, 0), softcap=30.0, sinks=torch.zeros(8))
    cache.release(b)
    # [end kvcache]
    assert out.shape == (2, 8, 1, 64) and cache.length(a) == 304
