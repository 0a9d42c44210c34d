#!/usr/bin/python3
"""usage: bench/flex.py BUILD_DIR [OUT_JSON] [--quick]

xattn.flex (score_mod / mask_mod written in Python) against (a) the same attention in the
package's own words (xattn.attention with window=, alibi=, documents=) and (b) PyTorch 1.13 eager
running the same formula with autograd (the only way to train a custom score on a CPU in
PyTorch), forward and forward + backward, 1 and 2 threads, medians of 3. Rows, with counter "ms":
  flex/<mod>/<form>/<impl>/<B>/<H>/<Sq>/<Skv>/<D>/<threads>
form fwd or fwd_bwd; impl flex, words or torch. Also the first compile of a new graph, a cached
load in a new process, and one call's overhead at (1, 8, 1, 256, 64):
  flex/compile/{first,cached}_s, flex/overhead/<impl>/1/8/1/256/64/1 (ms; impl flex, kernel: the
  generated kernel called with its arguments built, attention: xattn.attention).
--quick: the small shapes only. Skipped without torch. Run with OMP_WAIT_POLICY=passive, as
bench/run.sh does: PyTorch's OpenMP threads spinning beside its OpenBLAS threads otherwise make
its own 2-thread rows 2-8x slower, and ours too after its rows.
"""
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
sys.path.insert(0, os.path.join(BUILD, "python"))
try:
    import torch
except ImportError:
    print("flex.py: no torch (apt-get install python3-torch); skipped", file=sys.stderr)
    sys.exit(0)
import xattn  # noqa: E402
from xattn import flex  # noqa: E402
from xattn.flex import and_masks, create_block_mask, flex_attention  # noqa: E402

QUICK = "--quick" in sys.argv


def median_ms(f, reps=3, min_s=0.25):
    """The median over reps repetitions of one call's time, each repetition calling f for at least
    min_s seconds (as Google Benchmark's --benchmark_min_time): single calls of a millisecond are
    mostly noise on a shared host."""
    start = time.perf_counter()
    f()
    n = max(1, int(min_s / max(time.perf_counter() - start, 1e-6)))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(n):
            f()
        times.append((time.perf_counter() - start) * 1e3 / n)
    return statistics.median(times)


def tensors(B, H, S, D, grad):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, S, D, generator=g).requires_grad_(grad) for _ in range(3)]


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def timed(run, backward):
    def once():
        out = run()
        if backward:
            out.sum().backward()
    return median_ms(once)


def words_rows(rows, threads):
    """Mods the package has words for: flex in Python against the words, (1, 8, 4096², 64)."""
    B, H, S, D = (1, 8, 1024, 64) if QUICK else (1, 8, 4096, 64)
    slopes = torch.tensor([2.0 ** (-8 * (i + 1) / H) for i in range(H)])
    doc = torch.arange(S).div(S // 8, rounding_mode="floor").view(1, S)  # 8 documents

    def window(b, h, q_idx, kv_idx):
        return q_idx - kv_idx <= 256

    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    def documents(b, h, q_idx, kv_idx):
        return doc[0, q_idx] == doc[0, kv_idx]

    cases = {
        "window_causal": (dict(block_mask=create_block_mask(and_masks(causal, window), None, None, S, S)),
                          dict(causal=True, window=(256, 0))),
        "alibi": (dict(score_mod=alibi), dict(alibi=slopes)),
        "documents": (dict(block_mask=create_block_mask(documents, None, None, S, S)), dict(documents=doc)),
    }
    for mod, (flex_args, word_args) in cases.items():
        for backward in (False, True):
            q, k, v = tensors(B, H, S, D, backward)
            impls = {"flex": lambda: flex_attention(q, k, v, threads=threads, **flex_args),
                     "words": lambda: xattn.attention(q, k, v, threads=threads, **word_args)}
            for impl, run in impls.items():
                ms = timed(run, backward)
                rows.append(("flex/%s/%s/%s/%d/%d/%d/%d/%d/%d" % (mod, "fwd_bwd" if backward else "fwd", impl, B, H, S,
                                                                  S, D, threads), ms))
                print("%-64s %10.3f ms" % rows[-1], flush=True)


def training_rows(rows, threads):
    """Learnable biases, causal: flex against PyTorch eager with autograd on the same formula."""
    shapes = [(1, 4, 256, 64)] + ([] if QUICK else [(1, 8, 2048, 64)])
    for B, H, S, D in shapes:
        rel = torch.zeros(H, 2 * S - 1).normal_(0, 0.1).requires_grad_()
        buckets, max_distance = 32, 128
        t5_table = torch.zeros(buckets, H).normal_(0, 0.1).requires_grad_()

        def relative_bias(score, b, h, q_idx, kv_idx):
            return score + rel[h, q_idx - kv_idx + S - 1]

        def bucket(q_idx, kv_idx):
            n = (q_idx - kv_idx).clamp(min=0)
            exact = buckets // 2
            large = exact + (torch.log(n.clamp(min=1).to(torch.float32) / exact) / math.log(max_distance / exact)
                             * (buckets - exact)).to(torch.int64)
            return torch.where(n < exact, n, torch.clamp(large, 0, buckets - 1))

        def t5_bias(score, b, h, q_idx, kv_idx):
            return score + t5_table[bucket(q_idx, kv_idx), h]

        i, j = torch.arange(S).view(-1, 1), torch.arange(S).view(1, -1)
        hidden = j > i
        torch_bias = {"relative_bias": lambda: rel[:, i - j + S - 1],
                      "t5_bias": lambda: t5_table[bucket(i, j)].permute(2, 0, 1)}
        block_mask = create_block_mask(causal, None, None, S, S)
        for mod, score_mod in (("relative_bias", relative_bias), ("t5_bias", t5_bias)):
            for backward in (False, True):
                q, k, v = tensors(B, H, S, D, backward)

                def eager():
                    s = q @ k.transpose(-1, -2) / math.sqrt(D) + torch_bias[mod]()
                    return torch.softmax(s.masked_fill(hidden, -math.inf), -1) @ v

                impls = {"flex": lambda: flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                                        threads=threads),
                         "torch": eager}
                for impl, run in impls.items():
                    torch.set_num_threads(threads)
                    with torch.set_grad_enabled(backward):
                        ms = timed(run, backward)
                    rows.append(("flex/%s/%s/%s/%d/%d/%d/%d/%d/%d" % (mod, "fwd_bwd" if backward else "fwd", impl, B,
                                                                      H, S, S, D, threads), ms))
                    print("%-64s %10.3f ms" % rows[-1], flush=True)


_PROBE = """
import sys, time, torch
sys.path.insert(0, %r)
from xattn.flex import flex_attention
q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
w = torch.randn(2, 127)
def mod(score, b, h, q_idx, kv_idx):
    return score * %r + w[h, q_idx - kv_idx + 63]
start = time.perf_counter()
flex_attention(q, k, v, score_mod=mod)
print(time.perf_counter() - start)
"""


def compile_rows(rows):
    """A graph never seen (a fresh constant in it), in a new process, then again in another."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, XATTN_CACHE=cache)
        src = _PROBE % (os.path.join(BUILD, "python"), 1.0 + time.time() % 1)
        for name in ("first", "cached"):
            out = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True, text=True, check=True)
            rows.append(("flex/compile/%s_s" % name, float(out.stdout.strip()) * 1e3))
            print("%-64s %10.3f ms" % rows[-1], flush=True)


def overhead_rows(rows):
    q = torch.randn(1, 8, 1, 64)
    k, v = torch.randn(1, 8, 256, 64), torch.randn(1, 8, 256, 64)
    w = torch.randn(8, 512)

    def mod(score, b, h, q_idx, kv_idx):
        return score + w[h, q_idx - kv_idx + 255]

    # the generated kernel alone, called with its arguments built: flex minus kernel is the overhead
    with torch.no_grad():
        flex_attention(q, k, v, score_mod=mod, threads=1)
        call = flex._call(flex._trace_score(mod, False), None, None, 0.125, 1, False, (1, 8, 1, 256))
        outputs = call.forward(q, k, v)  # kept alive: the views hold their addresses only
        views = [flex._view(x) for x in (q, k, v, *outputs)]
        kernel_args = [ctypes.byref(x) for x in views[:3]] + [call._desc] + [ctypes.byref(x) for x in views[3:]]
        kernel_args += call._reads
    for impl, f in (("flex", lambda: flex_attention(q, k, v, score_mod=mod, threads=1)),
                    ("kernel", lambda: call.lib.xattn_flex_forward(*kernel_args)),
                    ("attention", lambda: xattn.attention(q, k, v, threads=1))):
        with torch.no_grad():
            us = median_ms(f, reps=5) * 1e3
        rows.append(("flex/overhead/%s/1/8/1/256/64/1" % impl, us / 1e3))
        print("%-64s %10.1f µs" % (rows[-1][0], us), flush=True)


def main():
    rows = []
    compile_rows(rows)
    overhead_rows(rows)
    for threads in (1, 2):
        training_rows(rows, threads)
        words_rows(rows, threads)
    out = [a for a in sys.argv[2:] if not a.startswith("--")]
    if out:
        with open(out[0], "w") as f:
            json.dump({"benchmarks": [{"name": n, "run_type": "iteration", "real_time": ms, "time_unit": "ms", "ms": ms}
                                      for n, ms in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
