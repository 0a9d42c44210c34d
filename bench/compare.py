#!/usr/bin/python3
"""usage: bench/compare.py BUILD_DIR [OUT_DIR]

xattn's Python package (BUILD_DIR/python) against PyTorch 1.13 on the same tensors: d2l's recipe
(scores by matmul, softmax, matmul with the values; what F.multi_head_attention_forward does
between its projections), dense and causal (a -1e6 fill), forward and forward + backward, with
1 and 2 threads (torch.set_num_threads and xattn's threads=), medians of 5. Also the cost of one
Python call at a decode shape against the same call made through ctypes with its arguments
prepared once (the C interface alone). Writes OUT_DIR/compare.md (a table), compare.json,
compare.dat and compare.png (gnuplot, when present). Skipped without torch.
"""
import ctypes
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

BUILD = sys.argv[1] if __name__ == "__main__" and len(sys.argv) > 1 else "build"
if __name__ == "__main__":  # imported by a test, the package is already on the path
    sys.path.insert(0, os.path.join(BUILD, "python"))
try:
    import torch
except ImportError:
    if __name__ != "__main__":
        raise
    print("compare.py: no torch (apt-get install python3-torch); skipped", file=sys.stderr)
    sys.exit(0)
import xattn  # noqa: E402
from xattn import _c  # noqa: E402

SHAPES = [(1, 8, 1024, 1024, 64), (1, 8, 2048, 2048, 64)]


def torch_d2l(q, k, v, causal):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), -1e6)
    return torch.softmax(scores, dim=-1) @ v


def median_ms(f, reps=5):
    f()  # warm up (first touch, thread pools)
    f()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run(shape, causal, threads, backward):
    B, H, S, T, D = shape
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D, generator=g, requires_grad=backward) for n in (S, T, T))
    d_out = torch.randn(B, H, S, D, generator=g)

    def ours():
        out = xattn.attention(q, k, v, causal=causal, threads=threads)
        if backward:
            out.backward(d_out)

    def theirs():
        out = torch_d2l(q, k, v, causal)
        if backward:
            out.backward(d_out)

    if not backward:
        with torch.no_grad():
            return median_ms(ours), median_ms(theirs)
    return median_ms(ours), median_ms(theirs)


def decode_calls(shape):
    """(c_call, py_call, out): the same decoding step through xattn.attention and through the C
    function alone with its arguments prepared once (c_call writes out), 1 thread."""
    B, H, S, T, D = shape
    q, k, v = torch.randn(B, H, S, D), torch.randn(B, H, T, D), torch.randn(B, H, T, D)
    opts = xattn._Options(scale=None, causal="bottom_right", window=None, lengths=None, softcap=None, dropout=0.0,
                          seed=0, threads=1, documents=None, mask=None, alibi=None, rope=None)
    out, lse = xattn._forward(q, k, v, None, None, opts)
    args = [xattn._view(x, n, 4) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
    desc = ctypes.byref(opts.with_tensors(None, None, None))
    o, l = xattn._view(out, "out", 4), xattn._view(lse, "lse", 3)

    def c_call():
        _c.check(_c.lib.xattn_forward(args[0], args[1], args[2], desc, o, l))

    def py_call():
        return xattn.attention(q, k, v, causal="bottom_right", threads=1)

    c_call.memory = (q, k, v, out, lse)  # the views hold bare pointers: their tensors must outlive the calls
    return c_call, py_call, out


def call_overhead_us(shape=(1, 8, 1, 256, 64), calls=2000):
    """A Python call against the C call alone (ctypes, arguments prepared once), 1 thread."""
    c_call, py_call, _ = decode_calls(shape)
    with torch.no_grad():
        per = {}
        for name, f in (("c", c_call), ("python", py_call)):
            samples = []
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(calls):
                    f()
                samples.append((time.perf_counter() - start) / calls * 1e6)
            per[name] = statistics.median(samples)
    return per


def main():
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(BUILD, "bench")
    rows = []
    for shape in SHAPES:
        for causal in (False, True):
            for backward in (False, True):
                for threads in (1, 2):
                    ours, theirs = run(shape, causal, threads, backward)
                    rows.append({"shape": shape, "causal": causal, "pass": "fwd+bwd" if backward else "fwd",
                                 "threads": threads, "xattn_ms": ours, "torch_ms": theirs, "speedup": theirs / ours})
                    print("%-22s %-6s %-7s %dt  xattn %8.2f ms  torch %8.2f ms  %.2fx" % (
                        "/".join(map(str, shape)), "causal" if causal else "dense", rows[-1]["pass"], threads, ours,
                        theirs, theirs / ours), flush=True)
    calls = call_overhead_us()
    print("decode (1,8,1,256,64) per call: python %.1f us, C alone %.1f us" % (calls["python"], calls["c"]))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "compare.json"), "w") as f:
        json.dump({"rows": rows, "decode_call_us": calls, "torch": torch.__version__}, f, indent=1)
    lines = ["| B/H/Sq/Skv/D | mask | pass | threads | xattn (ms) | PyTorch d2l (ms) | xattn speedup |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %s | %s | %d | %.2f | %.2f | %.2f× |" % (
            "/".join(map(str, r["shape"])), "causal" if r["causal"] else "dense", r["pass"], r["threads"],
            r["xattn_ms"], r["torch_ms"], r["speedup"]))
    lines.append("")
    lines.append("One call at (1,8,1,256,64), 1 thread: %.1f µs from Python, %.1f µs through ctypes with its "
                 "arguments prepared once (the C interface alone): %.1f µs of Python." % (
                     calls["python"], calls["c"], calls["python"] - calls["c"]))
    with open(os.path.join(out_dir, "compare.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "compare.dat"), "w") as f:
        for n, r in enumerate(rows):
            f.write('%d "%s %s %s %dt" %.3f\n' % (n, r["shape"][2], "causal" if r["causal"] else "dense",
                                                  r["pass"], r["threads"], r["speedup"]))
    if shutil.which("gnuplot"):
        script = """set terminal pngcairo size 980,460
set rmargin 10
set bmargin 8
set output '%s'
set style fill solid 0.6
set boxwidth 0.7
set ylabel 'xattn speedup over PyTorch (d2l recipe)'
set xtics rotate by -30 font ',8'
set yrange [0:*]
plot '%s' using 1:3:xtic(2) with boxes notitle, 1 with lines dt 2 notitle
""" % (os.path.join(out_dir, "compare.png"), os.path.join(out_dir, "compare.dat"))
        subprocess.run(["gnuplot"], input=script.encode(), check=False)


if __name__ == "__main__":
    main()
