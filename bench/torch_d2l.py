#!/usr/bin/python3
"""usage: bench/torch_d2l.py OUT_JSON

PyTorch 1.13 (Debian's python3-torch) running d2l's DotProductAttention recipe -- scores by bmm,
masked_softmax, bmm with the values -- forward and autograd backward, on the backward shapes of
bench/backward.cpp, with 1 and 2 threads. Written as Google-Benchmark-like JSON rows
"torch_d2l_fwd_bwd/<B>/<H>/<Sq>/<Skv>/<D>/<causal>/<threads>" with the same "gflops" count as
xattn_fwd_bwd (3.5 x 4·B·H·Sq·Skv·D, causal half), for report.py to merge. Skipped without torch.
"""
import json
import math
import sys
import time

try:
    import torch
except ImportError:
    print("torch_d2l.py: no torch (apt-get install python3-torch); skipped", file=sys.stderr)
    sys.exit(0)

SHAPES = [(1, 8, 2048, 2048, 64, 0), (1, 8, 2048, 2048, 128, 0), (1, 8, 4096, 4096, 64, 0), (1, 8, 2048, 2048, 64, 1)]


def d2l_attention(q, k, v, causal):
    # d2l's DotProductAttention.forward with (batch x heads) folded into bmm's batch, as d2l's
    # MultiHeadAttention does; causal as a -1e6 fill of the upper triangle (d2l's masked fill).
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    if causal:
        n = scores.shape[-1]
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(upper, -1e6)
    return torch.bmm(torch.softmax(scores, dim=-1), v)


def main(out_path):
    rows = []
    for (b, h, sq, skv, d, causal) in SHAPES:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            g = torch.Generator().manual_seed(1)
            q, k, v = (torch.rand(b * h, n, d, generator=g) * 2 - 1 for n in (sq, skv, skv))
            for t in (q, k, v):
                t.requires_grad_(True)
            d_out = torch.rand(b * h, sq, d, generator=g) * 2 - 1
            best = math.inf
            for rep in range(4):
                start = time.perf_counter()
                out = d2l_attention(q, k, v, causal)
                out.backward(d_out)
                best = min(best, time.perf_counter() - start) if rep > 0 else best
            flop = 3.5 * 4.0 * b * h * sq * skv * d / (2 if causal else 1)
            rows.append({"name": f"torch_d2l_fwd_bwd/{b}/{h}/{sq}/{skv}/{d}/{causal}/{threads}",
                         "run_type": "iteration", "real_time": best * 1e3, "time_unit": "ms", "gflops": flop / best / 1e9})
            print(rows[-1]["name"], f"{best * 1e3:.1f} ms", f"{rows[-1]['gflops']:.1f} gflops", file=sys.stderr)
    with open(out_path, "w") as f:
        json.dump({"benchmarks": rows}, f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "torch_d2l.json")
