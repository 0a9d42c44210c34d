#!/usr/bin/env python3
"""Turn xattn-bench's Google Benchmark JSON into results.md and gnuplot .dat/.gp/.png plots: GFLOP/s
against sequence length (forward), and bars for the backward and the 16-bit rows.

usage: report.py RESULTS_JSON OUT_DIR [EXTRA_JSON...]   (extra: ONNX Runtime, compile time, PyTorch, MPI)
       report.py --summary [--out FILE] [--cpu LABEL] RESULTS_JSON [EXTRA_JSON...]

The second form prints (or writes to FILE) one markdown section for bench/results/<cpu>-<date>/: the CPU
(from the JSON "context": the CPU's name, family and model that xattn-bench records, num_cpus,
mhz_per_cpu, caches, the SIMD architecture) and one table of the main rows of the run, each a
range over the shapes it covers, for one and two threads. LABEL replaces the heading's CPU name.
bench/run.sh writes it to BUILD_DIR/bench/summary.md.

Standard library only. Any variant may be missing (the xattn variant, a filtered run, an extra file
that is absent or unreadable): its cells stay empty. Per benchmark the median over repetitions is
used (Google Benchmark's median aggregate when present, else the median of the individual runs);
for peak_fma the best repetition.
"""
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

FUSED = "xattn"
BASELINES = ["blas_unfused", "blas_products", "xtensor_eager", "ort"]
OTHER = ("additive", "user_policy", "documents", "memory", "compile", "tile", "bandwidth")  # measurements outside the shape table
PEAK = "peak_fma"
PEAK_BF16 = "peak_bf16"
# 16-bit operands: their own table over the same shapes, and grouped-query decode rows
# "<variant>_gqa/<B>/<Hq>/<Hkv>/<Sq>/<Skv>/<D>/<threads>" with a gbytes_per_s counter.
SIXTEEN = ["xattn_bf16", "xattn_f16"]
GQA = ["xattn_gqa", "xattn_bf16_gqa", "xattn_f16_gqa"]
# Decoding from a kv_cache: "cache_decode/<type>/<B>/<Hq>/<Hkv>/<Skv|ragged>/<D>/<threads>", gbytes_per_s
# counting the bytes stored (bench/cache.cpp).
CACHE = "cache_decode"
PAGE_TYPES = ["float", "bfloat16", "int8"]
# The backward pass: its own table, same shape fields, FlashAttention-2's flop count.
# blas_products_bwd: the backward's five matrix products alone, by OpenBLAS (no softmax gradient).
BACKWARD = ["xattn_bwd", "blas_products_bwd", "blas_unfused_bwd", "xattn_fwd_bwd", "blas_unfused_fwd_bwd",
            "torch_d2l_fwd_bwd", "xattn_bf16_bwd", "xattn_bf16_fwd_bwd"]
# Today's attention words beside the plain rows of the same shapes: (row, the row it costs against).
MODERN = [("xattn_sinks", "xattn"), ("xattn_sinks_fwd_bwd", "xattn_fwd_bwd"), ("xattn_rope", "xattn"),
          ("xattn_rope_fwd_bwd", "xattn_fwd_bwd")]
SHAPE_FIELDS = ["B", "H", "Sq", "Skv", "D", "causal", "threads"]
# Google Benchmark appends these to the registered name.
NAME_SUFFIXES = {"real_time", "manual_time", "process_time"}


def registered_name(run_name):
    parts = [p for p in run_name.split("/") if p not in NAME_SUFFIXES and ":" not in p]
    return parts


def collect(benchmarks):
    """{registered name parts (tuple): gflops or 'error: …'} in first-seen order, the median over
    repetitions, except for the FMA peak: the best repetition, as the machine's ceiling (a neighbour
    briefly using a core should not lower the 100 % line)."""
    runs, medians, errors = {}, {}, {}
    for b in benchmarks:
        key = tuple(registered_name(b.get("run_name", b["name"])))
        runs.setdefault(key, [])
        if b.get("error_occurred"):
            errors[key] = b.get("error_message", "error")
        elif b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median" and "gflops" in b:
                medians[key] = b["gflops"]
        elif "gflops" in b:
            runs[key].append(b["gflops"])
    result = {}
    for key, values in runs.items():
        if key in errors:
            result[key] = "error: " + errors[key]
        elif key[0] == PEAK and values:
            result[key] = max(values)
        elif key in medians:
            result[key] = medians[key]
        elif values:
            result[key] = statistics.median(values)
    return result


def split(results):
    """-> (peaks {threads: gflops}, table {shape tuple: {variant: gflops|str}}, variants in order)."""
    peaks, table, variants = {}, {}, []
    for parts, value in results.items():
        variant, rest = parts[0], parts[1:]
        if variant == PEAK and len(rest) == 1:
            peaks[int(rest[0])] = value
        elif (variant in BACKWARD or variant in SIXTEEN or variant in GQA or variant == PEAK_BF16
              or variant in dict(MODERN)):
            continue  # their own tables
        elif len(rest) == len(SHAPE_FIELDS) and all(p.isdigit() for p in rest):
            table.setdefault(tuple(int(p) for p in rest), {})[variant] = value
            if variant not in variants:
                variants.append(variant)
    known = [v for v in [FUSED] + BASELINES if v in variants]
    return peaks, table, known + sorted(v for v in variants if v not in known)


def number(value):
    return isinstance(value, (int, float))


def cell(value, fmt="{:.1f}"):
    if value is None:
        return ""
    return fmt.format(value) if number(value) else "error"


def ratio(a, b):
    return a / b if number(a) and number(b) and b > 0 else None


def markdown(context, peaks, table, variants):
    lines = ["# xattn-bench results", ""]
    ctx = [f"{k}: {context[k]}" for k in
           ("date", "host_name", "num_cpus", "mhz_per_cpu", "xsimd_arch", "openblas_core", "omp_wait_policy",
            "assertions")
           if k in context]
    if "load_avg" in context:  # a busy machine (shared cores) shows here first
        ctx.append("load_avg at start: " + " ".join(f"{x:.2f}" for x in context["load_avg"]))
    if ctx:
        lines += ["- " + "; ".join(ctx), ""]
    if peaks:
        lines += ["FMA peak (best repetition): " +
                  ", ".join(f"{PEAK}/{t} = {cell(v)} GFLOP/s" for t, v in sorted(peaks.items())), ""]
        one = peaks.get(1)
        for t, v in sorted(peaks.items()):
            # The cores are shared: a peak that does not scale means other work held a core during the run.
            if t > 1 and number(one) and number(v) and v < 0.75 * t * one:
                lines += [f"**Warning:** {PEAK}/{t} is only {v / one:.2f}× {PEAK}/1: cores were busy with "
                          f"other work, so {t}-thread numbers in this run are not meaningful.", ""]
    lines += ["GFLOP/s = 4·B·H·Sq·Skv·D / wall time (causal: half). Median over repetitions; higher is better.", ""]

    header = SHAPE_FIELDS + [f"{v} GFLOP/s" for v in variants] + [
        f"{FUSED} % of {PEAK}", f"{FUSED} / blas_unfused", f"{FUSED} / xtensor_eager", f"{FUSED} / ort"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---:"] * len(header)) + "|")
    errors = []
    for shape, row in table.items():
        fused = row.get(FUSED)
        pct = ratio(fused, peaks.get(shape[-1]))
        cells = [str(x) for x in shape] + [cell(row.get(v)) for v in variants] + [
            cell(None if pct is None else 100 * pct, "{:.0f} %"),
            cell(ratio(fused, row.get("blas_unfused")), "{:.2f}×"),
            cell(ratio(fused, row.get("xtensor_eager")), "{:.2f}×"),
            cell(ratio(fused, row.get("ort")), "{:.2f}×")]
        lines.append("| " + " | ".join(cells) + " |")
        errors += [f"- {v} {'/'.join(map(str, shape))}: {x}" for v, x in row.items() if not number(x)]
    if errors:
        lines += ["", "Failed benchmarks:", *errors]
    return "\n".join(lines) + "\n"


def shape_rows(results, variants):
    """{shape tuple: {variant: gflops|str}} for the given variants' rows with the shape fields."""
    rows = {}
    for parts, value in results.items():
        if parts[0] in variants and len(parts) == len(SHAPE_FIELDS) + 1 and all(p.isdigit() for p in parts[1:]):
            rows.setdefault(tuple(int(p) for p in parts[1:]), {})[parts[0]] = value
    return rows


def backward_table(results, peaks, benchmarks=()):
    """The backward rows: GFLOP/s by FlashAttention-2's count (2.5 x 4·B·H·Sq·Skv·D per backward,
    3.5 x for forward + backward; causal half), % of peak_fma, the ratios the targets name, and
    xattn_bwd's busy counter (CPU time over threads x wall time: what the code kept busy, whatever
    the host did to the threads' speed) and xattn_fwd_bwd's bwd_per_fwd (the backward's time over
    the forward's, measured in the same iterations)."""
    rows = shape_rows(results, BACKWARD)
    if not rows:
        return ""
    busy = {parts[1:]: v for parts, v in counter_medians(benchmarks, "busy").items() if parts[0] == "xattn_bwd"}
    per_fwd = {parts[1:]: v for parts, v in counter_medians(benchmarks, "bwd_per_fwd").items()
               if parts[0] == "xattn_fwd_bwd"}
    header = SHAPE_FIELDS + [f"{v} GFLOP/s" for v in BACKWARD] + [
        "xattn_bwd % of peak_fma", "blas_products_bwd % of peak_fma", "xattn_bwd / blas_unfused_bwd",
        "xattn_fwd_bwd / blas_unfused_fwd_bwd",
        "xattn_fwd_bwd / torch_d2l_fwd_bwd", "xattn_bwd busy", "xattn bwd / fwd time"]
    lines = ["", "## Backward (FlashAttention-2 flop count: 2.5 x forward per backward, 3.5 x both)", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(["---:"] * len(header)) + "|"]
    for shape, row in rows.items():
        pct = ratio(row.get("xattn_bwd"), peaks.get(shape[-1]))
        pct_products = ratio(row.get("blas_products_bwd"), peaks.get(shape[-1]))
        lines.append("| " + " | ".join([str(x) for x in shape] + [cell(row.get(v)) for v in BACKWARD] + [
            cell(None if pct is None else 100 * pct, "{:.0f} %"),
            cell(None if pct_products is None else 100 * pct_products, "{:.0f} %"),
            cell(ratio(row.get("xattn_bwd"), row.get("blas_unfused_bwd")), "{:.2f}×"),
            cell(ratio(row.get("xattn_fwd_bwd"), row.get("blas_unfused_fwd_bwd")), "{:.2f}×"),
            cell(ratio(row.get("xattn_fwd_bwd"), row.get("torch_d2l_fwd_bwd")), "{:.2f}×"),
            cell(busy.get(tuple(str(x) for x in shape)), "{:.2f}"),
            cell(per_fwd.get(tuple(str(x) for x in shape)), "{:.2f}×")]) + " |")
    return "\n".join(lines) + "\n"


def modern_table(results):
    """Each new word's row against the plain row of the same shape, in the same run: GFLOP/s (the
    plain attention's count) and the time it adds."""
    names = [n for pair in MODERN for n in pair]
    rows = {k: r for k, r in shape_rows(results, names).items() if any(r.get(n) for n, _ in MODERN)}
    if not rows:
        return ""
    header = SHAPE_FIELDS + [f"{v} GFLOP/s" for v in names] + [f"{n} extra time" for n, _ in MODERN]
    lines = ["", "## Sinks, rope and other new words against the plain rows", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(["---:"] * len(header)) + "|"]
    for shape, row in rows.items():
        extra = [ratio(row.get(base), row.get(n)) for n, base in MODERN]
        lines.append("| " + " | ".join([str(x) for x in shape] + [cell(row.get(v)) for v in names] + [
            cell(None if x is None else 100 * (x - 1), "{:+.1f} %") for x in extra]) + " |")
    return "\n".join(lines) + "\n"


def counter_medians(benchmarks, counter):
    """{registered name parts (tuple): median of `counter` over the non-aggregate runs}."""
    runs = {}
    for b in benchmarks:
        if b.get("run_type") != "aggregate" and counter in b and not b.get("error_occurred"):
            runs.setdefault(tuple(registered_name(b.get("run_name", b["name"]))), []).append(b[counter])
    return {k: statistics.median(v) for k, v in runs.items()}


def time_medians(benchmarks):
    """{registered name parts (tuple): median real time in ms over the non-aggregate runs}."""
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    runs = {}
    for b in benchmarks:
        if b.get("run_type") != "aggregate" and "real_time" in b and not b.get("error_occurred"):
            runs.setdefault(tuple(registered_name(b.get("run_name", b["name"]))), []).append(
                b["real_time"] * scale.get(b.get("time_unit", "ns"), 1e-6))
    return {k: statistics.median(v) for k, v in runs.items()}


def cache_kind(parts):
    """mha (as many KV heads as query heads), gqa, or ragged (a batch of sequence lengths), or None."""
    if parts[0] != CACHE or len(parts) != 8:
        return None
    return "ragged" if parts[5] == "ragged" else "mha" if parts[3] == parts[4] else "gqa"


def sixteen_rows(results):
    """The shapes with a 16-bit row: {shape: {variant: gflops|str}}, fp32 included."""
    return {k: r for k, r in shape_rows(results, SIXTEEN + [FUSED]).items() if any(v in r for v in SIXTEEN)}


def sixteen_table(results, peaks):
    """16-bit operands against fp32 over the same shapes: GFLOP/s, the ratios the targets name, and
    bf16 against peak_bf16 (an error row where the CPU has no AVX512-BF16)."""
    peak16 = {int(parts[1]): value for parts, value in results.items() if parts[0] == PEAK_BF16 and len(parts) == 2}
    rows = sixteen_rows(results)
    if not rows:
        return ""
    lines = ["", "## 16-bit operands (fp32 accumulation and output)", ""]
    if peak16:
        lines += [", ".join(f"{PEAK_BF16}/{t} = {cell(v)}" + ("" if number(v) else f" ({v})")
                            for t, v in sorted(peak16.items())), ""]
    header = SHAPE_FIELDS + ["xattn fp32 GFLOP/s", "xattn_bf16 GFLOP/s", "xattn_f16 GFLOP/s", "bf16 / fp32",
                             "f16 / fp32", "bf16 % of peak_bf16", "bf16 % of peak_fma", "fp32 % of peak_fma"]
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join(["---:"] * len(header)) + "|"]
    for shape, row in rows.items():
        fp32, bf16, f16 = row.get(FUSED), row.get("xattn_bf16"), row.get("xattn_f16")
        pct16, pctb, pct32 = (ratio(bf16, peak16.get(shape[-1])), ratio(bf16, peaks.get(shape[-1])),
                              ratio(fp32, peaks.get(shape[-1])))
        lines.append("| " + " | ".join([str(x) for x in shape] + [cell(fp32), cell(bf16), cell(f16)] + [
            cell(ratio(bf16, fp32), "{:.2f}×"), cell(ratio(f16, fp32), "{:.2f}×"),
            cell(None if pct16 is None else 100 * pct16, "{:.0f} %"),
            cell(None if pctb is None else 100 * pctb, "{:.0f} %"),
            cell(None if pct32 is None else 100 * pct32, "{:.0f} %")]) + " |")
    return "\n".join(lines) + "\n"


def ring_table(results, benchmarks):
    """Context parallelism (bench/mpi_ring.cpp): each row's time and GFLOP/s, the per-rank compute
    imbalance, and the ratios the targets name against the one-process rows of the same shape."""
    rows = {parts: value for parts, value in results.items() if parts[0] in ("xattn_ring", "xattn_ring_nocomm")}
    if not rows:
        return ""
    imbalance = counter_medians(benchmarks, "compute_imbalance")
    flop = lambda parts: 4.0 * int(parts[2]) * int(parts[1]) ** 2 * int(parts[3]) / (2 if parts[4] == "1" else 1)
    seconds = {p: flop(p) / (v * 1e9) for p, v in rows.items() if number(v) and v > 0}
    lines = ["", "## Context parallelism over MPI (forward; time = the slowest rank's)", "",
             "| row | s | GFLOP/s | compute imbalance | vs single/1/1 | vs single/1/2 | vs nocomm |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for parts, value in rows.items():
        shape = parts[:5]
        base1 = seconds.get(("xattn_ring",) + shape[1:] + ("single", "1", "1"))
        base2 = seconds.get(("xattn_ring",) + shape[1:] + ("single", "1", "2"))
        nocomm = seconds.get(("xattn_ring_nocomm",) + parts[1:])
        t = seconds.get(parts)
        lines.append("| " + " | ".join([
            "/".join(parts), cell(t, "{:.2f}"), cell(value),
            cell(None if parts not in imbalance else 100 * imbalance[parts], "{:.1f} %"),
            cell(ratio(base1, t), "{:.2f}× faster"), cell(ratio(t, base2), "{:.2f}× the time"),
            cell(None if parts[0] == "xattn_ring_nocomm" else ratio(t, nocomm), "{:.2f}× the time")]) + " |")
    return "\n".join(lines) + "\n"


def decode_bandwidth(results, benchmarks):
    """Decode rows (Sq = 1) must read K and V once: their bytes per second (4 per fp32 element, 2 per
    16-bit one) against bandwidth/read/<threads> (median) from the same run; grouped-query rows
    report their own gbytes_per_s."""
    reads = {}
    for b in benchmarks:
        parts = registered_name(b.get("run_name", b["name"]))
        if parts[:2] == ["bandwidth", "read"] and b.get("run_type") != "aggregate" and "gbytes_per_s" in b:
            reads.setdefault(int(parts[2]), []).append(b["gbytes_per_s"])
    lines = []
    for variant, bytes_per in [(FUSED, 4), ("xattn_bf16", 2), ("xattn_f16", 2)]:
        for parts, fused in results.items():
            if parts[0] != variant or len(parts) != len(SHAPE_FIELDS) + 1 or not all(p.isdigit() for p in parts[1:]):
                continue
            bb, h, sq, skv, d, causal, threads = (int(p) for p in parts[1:])
            peak = reads.get(threads)
            if sq != 1 or not number(fused) or not peak:
                continue
            seconds = 4.0 * bb * h * sq * skv * d / (fused * 1e9)
            gbps = 2.0 * bb * h * skv * d * bytes_per / seconds / 1e9  # K and V; Hkv = H in the shape table
            read = statistics.median(peak)
            lines.append(f"| {variant}/{bb}/{h}/{sq}/{skv}/{d} | {threads} | {seconds * 1e3:.2f} | {gbps:.1f} | "
                         f"{read:.1f} | {100 * gbps / read:.0f} % |")
    for parts, gbps in counter_medians(benchmarks, "gbytes_per_s").items():
        if parts[0] in GQA and len(parts) == 8:
            threads, peak = int(parts[-1]), reads.get(int(parts[-1]))
            if peak:
                read = statistics.median(peak)
                bb, hq, hkv, sq, skv, d = (int(p) for p in parts[1:7])
                seconds = 2.0 * bb * hkv * skv * d * (4 if parts[0] == "xattn_gqa" else 2) / (gbps * 1e9)
                lines.append(f"| {'/'.join(parts[:-1])} | {threads} | {seconds * 1e3:.2f} | {gbps:.1f} | {read:.1f} | "
                             f"{100 * gbps / read:.0f} % |")
    ms = time_medians(benchmarks)
    for parts, gbps in counter_medians(benchmarks, "gbytes_per_s").items():
        if cache_kind(parts) and reads.get(int(parts[-1])):
            read = statistics.median(reads[int(parts[-1])])
            lines.append(f"| {'/'.join(parts[:-1])} | {parts[-1]} | {cell(ms.get(parts), '{:.2f}')} | {gbps:.1f} | "
                         f"{read:.1f} | {100 * gbps / read:.0f} % |")
    if not lines:
        return ""
    return "\n".join(["", "## Decode: K and V read against the read bandwidth of the same run", "",
                      "Grouped-query rows: <variant>_gqa/B/Hq/Hkv/Sq/Skv/D. From a kv_cache: "
                      "cache_decode/<page type>/B/Hq/Hkv/Skv/D (the bytes stored, int8 scales included).", "",
                      "| variant/B/H/Sq/Skv/D | threads | ms | K+V GB/s | bandwidth/read GB/s | fraction |",
                      "|---|---:|---:|---:|---:|---:|", *lines]) + "\n"


# llama.cpp's K/V type for each page type of the cache_decode rows (bench/ggml.sh's rows).
GGML_TYPES = {"float": "f32", "bfloat16": "bf16", "float16": "f16", "int8": "q8_0", "q4": "q4_0"}


def ggml_table(benchmarks):
    """cache_decode rows beside llama.cpp's flash attention on the same shape and K/V type."""
    ms = time_medians(benchmarks)
    lines = []
    for parts, t in ms.items():
        if not cache_kind(parts) or parts[1] not in GGML_TYPES or parts[5] == "ragged":
            continue
        peer = ms.get(("ggml", GGML_TYPES[parts[1]], *parts[2:]))
        if peer:
            lines.append(f"| {'/'.join(parts[:-1])} | {parts[-1]} | {t:.2f} | {GGML_TYPES[parts[1]]} | {peer:.2f} | "
                         f"{peer / t:.2f}× |")
    if not lines:
        return ""
    return "\n".join(["", "## Decoding against llama.cpp (ggml_flash_attn_ext, bench/ggml.sh)", "",
                      "| row | threads | xattn ms | llama.cpp K/V | llama.cpp ms | xattn speed ÷ llama.cpp |",
                      "|---|---:|---:|---|---:|---:|", *lines]) + "\n"


def seqlen_series(table, variants):
    """D = 64, non-causal, Sq == Skv rows: {seq: {(variant, threads): gflops}} (first shape per seq wins)."""
    points = {}
    for (b, h, sq, skv, d, causal, threads), row in table.items():
        if d != 64 or causal or sq != skv:
            continue
        for v in variants:
            if number(row.get(v)):
                points.setdefault(sq, {}).setdefault((v, threads), row[v])
    columns = sorted({c for p in points.values() for c in p},
                     key=lambda c: (variants.index(c[0]), c[1]))
    return points, columns


def write_dat(path, points, columns):
    with open(path, "w") as f:
        f.write(" ".join(['"seq"'] + [f'"{v} ({t} thr)"' for v, t in columns]) + "\n")
        for seq in sorted(points):
            f.write(" ".join([str(seq)] + [f"{points[seq][c]:.3f}" if c in points[seq] else "?"
                                           for c in columns]) + "\n")


def png_terminal(gnuplot):
    probe = subprocess.run([gnuplot, "-e", "set terminal pngcairo"], capture_output=True, text=True)
    return "pngcairo" if probe.returncode == 0 and not probe.stderr.strip() else "png"


def run_gnuplot(gnuplot, out_dir, gp, png):
    """Renders script gp (in out_dir) into png, or says why not."""
    if not gnuplot:
        print(f"report.py: gnuplot not found; wrote {gp} but no PNG", file=sys.stderr)
        return
    run = subprocess.run([gnuplot, gp.name], cwd=out_dir, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"report.py: gnuplot failed:\n{run.stderr}", file=sys.stderr)
    else:
        print(f"wrote {png}")


def write_plot(out_dir, dat, points, peaks, columns, variants):
    png = out_dir / "gflops_vs_seqlen.png"
    gp = out_dir / "gflops_vs_seqlen.gp"
    gnuplot = shutil.which("gnuplot")
    plots = [f'"{dat.name}" using 1:{i + 2} with linespoints lw 2 pt {7 if t == 1 else 5} '
             f'dt {1 if t == 1 else 2} lc {variants.index(v) + 1} title columnheader({i + 2})'
             for i, (v, t) in enumerate(columns)]
    plots += [f'{value:.3f} with lines lw 1.5 dt {2 * t} lc rgb "gray30" title "{PEAK}/{t}"'
              for t, value in sorted(peaks.items()) if number(value)]
    seqs = sorted(points)
    script = "\n".join([
        f"set terminal {png_terminal(gnuplot) if gnuplot else 'pngcairo'} size 900,560 noenhanced",
        f'set output "{png.name}"',
        'set title "fp32 attention, D = 64, non-causal: GFLOP/s vs sequence length"',
        'set xlabel "sequence length (Sq = Skv)"', 'set ylabel "GFLOP/s"',
        "set logscale x 2", f"set xrange [{seqs[0] / 1.5}:{seqs[-1] * 1.5}]",
        "set xtics (" + ", ".join(str(x) for x in seqs) + ")", "set yrange [0:*]", "set grid", "set key outside right top",
        'set datafile missing "?"',
        "plot " + ", \\\n     ".join(plots), ""])
    gp.write_text(script)
    run_gnuplot(gnuplot, out_dir, gp, png)


def peak_lines(results, name):
    """[(title, gflops)] of a peak's rows (name/<threads>), for write_bars."""
    return [(f"{name}/{parts[1]}", v) for parts, v in sorted(results.items())
            if parts[0] == name and len(parts) == 2 and number(v)]


def write_bars(out_dir, stem, title, rows, variants, peaks):
    """A clustered bar chart of GFLOP/s, one cluster per shape row and one bar per variant, with
    peaks [(title, gflops)] as horizontal lines: <stem>.dat, .gp and .png in out_dir."""
    variants = [v for v in variants if any(number(r.get(v)) for r in rows.values())]
    if not variants:
        return
    dat, gp, png = (out_dir / f"{stem}.{ext}" for ext in ("dat", "gp", "png"))
    with open(dat, "w") as f:
        f.write(" ".join(['"shape"'] + [f'"{v}"' for v in variants]) + "\n")
        for shape, row in rows.items():
            label = "/".join(map(str, shape[:5])) + (" causal" if shape[5] else "") + f" {shape[6]} thr"
            f.write(" ".join([f'"{label}"'] + [f"{row[v]:.3f}" if number(row.get(v)) else "?" for v in variants])
                    + "\n")
    gnuplot = shutil.which("gnuplot")
    plots = [f'"{dat.name}" using {i + 2}:xtic(1) title columnheader({i + 2})' for i in range(len(variants))]
    plots += [f'{value:.3f} with lines lw 1.5 dt {i + 2} lc rgb "gray30" title "{name}"'
              for i, (name, value) in enumerate(peaks)]
    gp.write_text("\n".join([
        f"set terminal {png_terminal(gnuplot) if gnuplot else 'pngcairo'} size 1100,600 noenhanced",
        f'set output "{png.name}"', f'set title "{title}"', 'set ylabel "GFLOP/s"', "set yrange [0:*]",
        "set style data histogram", "set style histogram cluster gap 1", "set style fill solid 0.85 border -1",
        "set xtics rotate by 25 right scale 0", "set lmargin 16", "set grid ytics", "set key outside right top", 'set datafile missing "?"',
        "plot " + ", \\\n     ".join(plots), ""]))
    run_gnuplot(gnuplot, out_dir, gp, png)


def other_measurements(benchmarks):
    """Rows for additive/, memory/ and compile/ entries: their user counters (median over runs)."""
    skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
            "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index",
            "aggregate_name", "aggregate_unit", "error_occurred", "error_message"}
    rows = {}
    for b in benchmarks:
        name = "/".join(registered_name(b.get("run_name", b["name"])))
        if not name.startswith(OTHER) or b.get("run_type") == "aggregate":
            continue
        for k, v in b.items():
            if k not in skip and number(v):
                rows.setdefault(name, {}).setdefault(k, []).append(v)
    if not rows:
        return ""
    lines = ["", "## Other measurements", "", "| benchmark | counters (median) |", "|---|---|"]
    for name, counters in rows.items():
        text = ", ".join(f"{k} = {statistics.median(v):.4g}" for k, v in counters.items())
        lines.append(f"| {name} | {text} |")
    def forms_of(family):  # {(shape fields): {form: median ms}} of rows family/<form>/<shape...>
        out = {}
        for name, counters in rows.items():
            parts = name.split("/")
            if parts[0] == family and "ms" in counters:
                out.setdefault(tuple(parts[2:]), {})[parts[1]] = statistics.median(counters["ms"])
        return out

    def ratios(family, wanted):  # wanted: (numerator form, denominator form, label suffix, digits)
        for key, forms in forms_of(family).items():
            for num, den, note, digits in wanted:
                if num in forms and den in forms:
                    lines.append(f"| {family}/{'/'.join(key)}: {num} / {den}{note} | {forms[num] / forms[den]:.{digits}f}× |")

    # fused vs materialised additive attention, same threads; user policies: forward, forward +
    # backward, PyTorch
    ratios("additive", [("d2l_materialised", "fused", "", 1),
                        ("torch_d2l_fwd_bwd", "fused_fwd_bwd", " (target ≥ 4)", 1)])
    ratios("user_policy", [("fused_fwd_bwd", "fused", " (the backward's cost, target ≤ 4)", 1),
                           ("torch_fwd", "fused", " (PyTorch's time over xattn's)", 2),
                           ("torch_fwd_bwd", "fused_fwd_bwd", " (PyTorch's time over xattn's)", 2)])
    user = forms_of("user_policy")  # a user's cosine against the built-in scaled dot product, same shape
    for key, forms in user.items():
        if key[0] != "cosine_temperature":
            continue
        dot = user.get(("scaled_dot",) + key[1:], {})
        for form, target in (("fused", "1.3"), ("fused_fwd_bwd", "1.5")):
            if form in forms and form in dot:
                lines.append(f"| user_policy/{'/'.join(key)}: {form} over scaled_dot's (target ≤ {target}) | "
                             f"{forms[form] / dot[form]:.2f}× |")
    for name, counters in rows.items():  # packed documents against dense, alternating in one loop
        if name.startswith("documents/") and "packed_over_dense" in counters:
            lines.append(f"| {name}: packed time / dense time (target ≤ 1/6 = 0.167) | "
                         f"{statistics.median(counters['packed_over_dense']):.3f} |")
    return "\n".join(lines) + "\n"


def read_json(path, required):
    """A JSON file's object; {} for an extra file that is missing or unreadable (a comparison that
    failed half-way), with a note on stderr. The results file itself must be readable."""
    try:
        data = json.loads(Path(path).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError) as e:
        if required:
            sys.exit(f"report.py: cannot read {path}: {e}")
        if Path(path).exists():
            print(f"report.py: skipping {path}: {e}", file=sys.stderr)
        return {}


def load_run(results_json, extras):
    """RESULTS_JSON with the benchmarks of every readable extra file appended."""
    data = read_json(results_json, required=True)
    data.setdefault("benchmarks", [])
    for extra in extras:
        data["benchmarks"].extend(b for b in read_json(extra, required=False).get("benchmarks", [])
                                  if isinstance(b, dict) and "name" in b)
    return data


# ---- summary mode: one table per CPU for bench/results/<cpu>-<date>/summary.md ----

# (vendor, family, models, steppings or None, name); the first match names the heading.
MICROARCHITECTURES = [
    ("AuthenticAMD", 23, range(0x00, 0x30), None, "AMD Zen / Zen+"),
    ("AuthenticAMD", 23, range(0x30, 0x100), None, "AMD Zen 2"),
    ("AuthenticAMD", 25, range(0x00, 0x10), None, "AMD Zen 3"),
    ("AuthenticAMD", 25, range(0x20, 0x30), None, "AMD Zen 3"),
    ("AuthenticAMD", 25, range(0x40, 0x50), None, "AMD Zen 3+"),
    ("AuthenticAMD", 25, range(0x10, 0x20), None, "AMD Zen 4"),
    ("AuthenticAMD", 25, range(0x60, 0x80), None, "AMD Zen 4"),
    ("AuthenticAMD", 25, range(0xa0, 0xb0), None, "AMD Zen 4"),
    ("AuthenticAMD", 26, range(0x00, 0x100), None, "AMD Zen 5"),
    ("GenuineIntel", 6, (85,), range(0, 5), "Intel Skylake-SP"),
    ("GenuineIntel", 6, (85,), range(5, 8), "Intel Cascade Lake"),
    ("GenuineIntel", 6, (85,), range(8, 16), "Intel Cooper Lake"),
    ("GenuineIntel", 6, (106, 108), None, "Intel Ice Lake-SP"),
    ("GenuineIntel", 6, (143,), None, "Intel Sapphire Rapids"),
    ("GenuineIntel", 6, (207,), None, "Intel Emerald Rapids"),
]


def as_int(text):
    try:
        return int(str(text), 0)
    except ValueError:
        return None


def microarchitecture(context):
    vendor, family = context.get("cpu_vendor"), as_int(context.get("cpu_family", ""))
    model, stepping = as_int(context.get("cpu_model_number", "")), as_int(context.get("cpu_stepping", ""))
    for v, f, models, steppings, name in MICROARCHITECTURES:
        if vendor == v and family == f and model in models and (steppings is None or stepping in steppings):
            return name
    return None


def byte_size(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def cpu_facts(context, results):
    """The line under the heading: which CPU, its ISA as the build saw it, its caches."""
    name = context.get("cpu_model", "")
    ids = [f"{k} {context[key]}" for k, key in (("family", "cpu_family"), ("model", "cpu_model_number"),
                                                ("stepping", "cpu_stepping")) if context.get(key)]
    cpu = (name + (f" ({', '.join(ids)})" if ids else "")).strip()
    count = [f"{context['num_cpus']} CPUs" if "num_cpus" in context else "",
             f"at {context['mhz_per_cpu']:.0f} MHz" if number(context.get("mhz_per_cpu")) else ""]
    cpu = ", ".join(x for x in [cpu, " ".join(x for x in count if x)] if x)
    arch, lanes = context.get("xsimd_arch", ""), context.get("xsimd_float_lanes", "")
    family = "AVX-512" if "avx512" in arch else "AVX2 + FMA" if "avx2" in arch else arch
    isa = f"{family} (xsimd {arch}" + (f", {lanes} float lanes)" if lanes else ")") if arch else ""
    bf16 = context.get("avx512bf16")
    if bf16 is None:  # an older JSON: peak_bf16 is an error row exactly where the CPU lacks it
        peak16 = [v for parts, v in results.items() if parts[0] == PEAK_BF16]
        bf16 = None if not peak16 else "yes" if any(number(v) for v in peak16) else "no"
    isa = ", ".join(x for x in [isa, f"AVX512-BF16: {bf16}" if bf16 else ""] if x)
    names = {("Data", 1): "L1d", ("Unified", 2): "L2", ("Unified", 3): "L3"}
    caches = ", ".join(f"{names[(c.get('type'), c.get('level'))]} {byte_size(c['size'])}"
                       for c in context.get("caches", []) if (c.get("type"), c.get("level")) in names and "size" in c)
    parts = [f"CPU: {cpu}." if cpu else "", f"ISA: {isa}." if isa else "", f"Caches: {caches}." if caches else ""]
    return " ".join(x for x in parts if x)


def span(values, fmt, unit):
    """'lo–hi unit' over the numbers in values, one number when both print the same, '' when none."""
    values = [v for v in values if number(v)]
    if not values:
        return ""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return (lo if lo == hi else f"{lo}–{hi}") + unit


def percent(values):
    return span([100 * v for v in values if number(v)], "{:.0f}", " %")


def times(values):
    return span(values, "{:.2f}", "×")


# The encoder-sized batches (B, H, Sq, Skv, D) whose rows the summary states on their own.
ENCODER_SHAPES = {(32, 12, 128, 128, 64), (4, 16, 256, 256, 64)}


def encoder(shape):
    """Whether a row is one of the dense encoder-sized batches."""
    return shape[:5] in ENCODER_SHAPES and not shape[5]


def kind(shape):
    """decode (Sq = 1), causal, long (dense, Sq >= 2048) or short (dense, Sq < 2048)."""
    b, h, sq, skv, d, causal, threads = shape
    return "decode" if sq == 1 else "causal" if causal else "long" if sq >= 2048 else "short"


def summary(context, results, benchmarks, label=None):
    """One markdown section: heading (CPU and date), the CPU's facts, and the table of the run's main
    rows. Every cell is a range over the shapes a row covers, with ratios taken within this run."""
    peaks = {int(p[1]): v for p, v in results.items() if p[0] == PEAK and len(p) == 2}
    peak16 = {int(p[1]): v for p, v in results.items() if p[0] == PEAK_BF16 and len(p) == 2}
    reads = {}
    for parts, v in counter_medians(benchmarks, "gbytes_per_s").items():
        if parts[:2] == ("bandwidth", "read") and len(parts) == 3:
            reads[int(parts[2])] = v
    rows = shape_rows(results, [FUSED] + BASELINES + SIXTEEN + BACKWARD + ["torch_d2l_fwd_bwd"]
                      + [n for pair in MODERN for n in pair])
    per_fwd = {tuple(int(x) for x in p[1:]): v for p, v in counter_medians(benchmarks, "bwd_per_fwd").items()
               if p[0] == "xattn_fwd_bwd" and len(p) == len(SHAPE_FIELDS) + 1 and all(x.isdigit() for x in p[1:])}
    threads = (1, 2)

    def pick(t, kinds):
        """The rows of t threads whose kind is in kinds (or, kinds a function, for which it holds)."""
        keep = kinds if callable(kinds) else (lambda s: kind(s) in kinds)
        return [(s, r) for s, r in rows.items() if s[-1] == t and keep(s)]

    def of_peak(variant, kinds, ceiling):
        return lambda t: percent([ratio(r.get(variant), ceiling.get(t)) for s, r in pick(t, kinds)])

    def versus(a, b, kinds):
        return lambda t: times([ratio(r.get(a), r.get(b)) for s, r in pick(t, kinds)])

    def two_over_one(variant, kinds):
        def cells(t):
            if t != 2:
                return ""
            return times([ratio(r.get(variant), rows.get(s[:-1] + (1,), {}).get(variant)) for s, r in pick(2, kinds)])
        return cells

    def decode(variant, bytes_per):
        def cells(t):
            fractions = []
            for (b, h, sq, skv, d, causal, tt), r in pick(t, {"decode"}):
                if number(r.get(variant)) and r[variant] > 0 and number(reads.get(t)) and reads[t] > 0:
                    seconds = 4.0 * b * h * sq * skv * d / (r[variant] * 1e9)
                    fractions.append(2.0 * b * h * skv * d * bytes_per / seconds / 1e9 / reads[t])
            return percent(fractions)
        return cells

    def grouped(t):
        return percent([ratio(v, reads.get(t)) for p, v in counter_medians(benchmarks, "gbytes_per_s").items()
                        if p[0] in GQA and len(p) == 8 and p[-1] == str(t)])

    cache_gbps = {p: v for p, v in counter_medians(benchmarks, "gbytes_per_s").items() if cache_kind(p)}
    cache_ms = {p: v for p, v in time_medians(benchmarks).items() if cache_kind(p)}

    def by_page_type(kind, t, value, show):
        """"a / b / c" over PAGE_TYPES: show(value(parts) of that page type's rows of this kind and t threads)."""
        cells = [show([value(p) for p in cache_gbps if cache_kind(p) == kind and p[1] == page and p[-1] == str(t)])
                 for page in PAGE_TYPES]
        return "" if not any(cells) else " / ".join(c or "–" for c in cells)

    def cache_read(kind):
        return lambda t: by_page_type(kind, t, lambda p: ratio(cache_gbps[p], reads.get(t)), percent)

    def cache_two_over_one(kind):
        speedup = lambda p: ratio(cache_ms.get(p[:-1] + ("1",)), cache_ms.get(p))
        return lambda t: "" if t != 2 else by_page_type(kind, t, speedup, times)

    def cache_versus(page, variant):
        """The contiguous `variant` decode's time over the time of a step from `page` pages of the same
        (B, Hq, Skv, D), one KV head per query head."""
        def cells(t):
            out = []
            for p, v in cache_ms.items():
                if cache_kind(p) != "mha" or p[1] != page or p[-1] != str(t):
                    continue
                b, h, skv, d = (int(x) for x in (p[2], p[3], p[5], p[6]))
                r = rows.get((b, h, 1, skv, d, 0, t), {}).get(variant)
                if number(r) and r > 0:
                    out.append(4.0 * b * h * skv * d / (r * 1e9) * 1e3 / v)
            return times(out)
        return cells

    def additive(t):
        ms = {p: v for p, v in counter_medians(benchmarks, "ms").items() if p[0] == "additive" and p[-1] == str(t)}
        return times([ratio(v, ms.get(("additive", "fused_fwd_bwd") + p[2:]))
                      for p, v in ms.items() if p[1] == "torch_d2l_fwd_bwd"])

    def ring(t):
        if t != 2:
            return ""
        return times([ratio(v, results.get(p[:5] + ("single", "1", "1"))) for p, v in results.items()
                      if p[0] == "xattn_ring" and len(p) == 8 and p[5:] == ("zigzag", "2", "1")])

    def mla(variant, base=None, ceiling=None):
        """xattn_mla rows (one shape each): ÷ the base row's GFLOP/s, or % of a peak."""
        def cells(t):
            got = [(p, v) for p, v in results.items() if p[0] == variant and len(p) == 8 and p[-1] == str(t)]
            if base:
                return times([ratio(v, results.get((base,) + p[1:])) for p, v in got])
            return percent([ratio(v, ceiling.get(t)) for p, v in got])
        return cells

    def mla_threads(variant):
        def cells(t):
            if t != 2:
                return ""
            return times([ratio(v, results.get(p[:-1] + ("1",))) for p, v in results.items()
                          if p[0] == variant and len(p) == 8 and p[-1] == "2"])
        return cells

    def measured(values):
        def cells(t):
            v = values.get(t)
            if v is None:
                return ""
            return f"{v:.1f}" if number(v) else "none"
        return cells

    table = [
        ("`peak_fma`: FMA peak, GFLOP/s", measured(peaks)),
        ("`peak_bf16`: `vdpbf16ps` peak, GFLOP/s", measured(peak16)),
        ("`bandwidth/read`: read bandwidth, GB/s", measured(reads)),
        ("forward fp32, dense, S ≥ 2048: % of `peak_fma`", of_peak(FUSED, {"long"}, peaks)),
        ("forward fp32, dense, S ≤ 512: % of `peak_fma`", of_peak(FUSED, {"short"}, peaks)),
        ("forward fp32, causal: % of `peak_fma`", of_peak(FUSED, {"causal"}, peaks)),
        ("encoder batches (32, 12, 128², 64), (4, 16, 256², 64) fp32: % of `peak_fma`",
         of_peak(FUSED, encoder, peaks)),
        ("encoder batches bf16: % of `peak_bf16`", of_peak("xattn_bf16", encoder, peak16)),
        ("encoder batches fp32: two threads ÷ one", two_over_one(FUSED, encoder)),
        ("encoder batches bf16: two threads ÷ one", two_over_one("xattn_bf16", encoder)),
        ("encoder batches fp32: xattn ÷ ONNX Runtime", versus(FUSED, "ort", encoder)),
        ("encoder batches fp32: OpenBLAS's two products alone, % of `peak_fma`",
         of_peak("blas_products", encoder, peaks)),
        ("encoder batches fp32: xattn ÷ OpenBLAS's products alone", versus(FUSED, "blas_products", encoder)),
        ("forward fp32: two threads ÷ one", two_over_one(FUSED, {"long", "short", "causal"})),
        ("forward: xattn ÷ OpenBLAS unfused, dense", versus(FUSED, "blas_unfused", {"long", "short"})),
        ("forward: xattn ÷ OpenBLAS unfused, causal", versus(FUSED, "blas_unfused", {"causal"})),
        ("forward: xattn ÷ ONNX Runtime, dense", versus(FUSED, "ort", {"long", "short"})),
        ("forward: xattn ÷ ONNX Runtime, causal", versus(FUSED, "ort", {"causal"})),
        ("forward: xattn ÷ d2l recipe in xtensor, dense", versus(FUSED, "xtensor_eager", {"long", "short"})),
        ("backward fp32, dense: % of `peak_fma`", of_peak("xattn_bwd", {"long", "short"}, peaks)),
        ("backward fp32, causal: % of `peak_fma`", of_peak("xattn_bwd", {"causal"}, peaks)),
        ("backward fp32: two threads ÷ one", two_over_one("xattn_bwd", {"long", "short", "causal"})),
        ("backward time ÷ forward time (`bwd_per_fwd`)",
         lambda t: times([v for s, v in per_fwd.items() if s[-1] == t])),
        ("forward + backward: xattn ÷ OpenBLAS unfused, dense",
         versus("xattn_fwd_bwd", "blas_unfused_fwd_bwd", {"long", "short"})),
        ("forward + backward: xattn ÷ OpenBLAS unfused, causal",
         versus("xattn_fwd_bwd", "blas_unfused_fwd_bwd", {"causal"})),
        ("forward + backward: xattn ÷ PyTorch (d2l recipe), dense",
         versus("xattn_fwd_bwd", "torch_d2l_fwd_bwd", {"long", "short"})),
        ("bf16 ÷ fp32, forward, dense, S ≥ 2048", versus("xattn_bf16", FUSED, {"long"})),
        ("bf16 ÷ fp32, forward, causal", versus("xattn_bf16", FUSED, {"causal"})),
        ("bf16 forward, dense, S ≥ 2048: % of `peak_bf16`", of_peak("xattn_bf16", {"long"}, peak16)),
        ("bf16 ÷ fp32, backward, dense", versus("xattn_bf16_bwd", "xattn_bwd", {"long", "short"})),
        ("bf16 ÷ fp32, forward + backward, dense", versus("xattn_bf16_fwd_bwd", "xattn_fwd_bwd", {"long", "short"})),
        ("bf16 backward, dense: % of `peak_bf16`", of_peak("xattn_bf16_bwd", {"long", "short"}, peak16)),
        ("bf16 backward: two threads ÷ one", two_over_one("xattn_bf16_bwd", {"long", "short", "causal"})),
        ("f16 ÷ fp32, forward, dense, S ≥ 2048", versus("xattn_f16", FUSED, {"long"})),
        ("decode fp32 (Sq = 1): K and V read at % of `bandwidth/read`", decode(FUSED, 4)),
        ("decode bf16: % of `bandwidth/read`", decode("xattn_bf16", 2)),
        ("decode f16: % of `bandwidth/read`", decode("xattn_f16", 2)),
        ("grouped-query decode (32 query heads on 8 KV heads; fp32, bf16, f16): % of `bandwidth/read`", grouped),
        ("decode from kv_cache pages, float / bfloat16 / int8, one KV head per query head: % of `bandwidth/read`",
         cache_read("mha")),
        ("decode from kv_cache pages, grouped-query: % of `bandwidth/read`", cache_read("gqa")),
        ("decode from kv_cache pages, a ragged batch of 16 sequences: % of `bandwidth/read`", cache_read("ragged")),
        ("decode from kv_cache pages, ragged batch: two threads ÷ one", cache_two_over_one("ragged")),
        ("decode from int8 pages: time of the contiguous fp32 decode ÷ its time", cache_versus("int8", FUSED)),
        ("decode from bfloat16 pages: time of the contiguous bf16 decode ÷ its time",
         cache_versus("bfloat16", "xattn_bf16")),
        ("sinks: time ÷ the same attention's without, forward (dense and causal, S = 2048)",
         versus(FUSED, "xattn_sinks", {"long", "causal"})),
        ("sinks: time ÷ the same attention's without, forward + backward",
         versus("xattn_fwd_bwd", "xattn_sinks_fwd_bwd", {"long", "causal"})),
        ("rope on Q and K: time ÷ the same attention's without, forward",
         versus(FUSED, "xattn_rope", {"long", "causal"})),
        ("rope on Q and K: time ÷ the same attention's without, forward + backward",
         versus("xattn_fwd_bwd", "xattn_rope_fwd_bwd", {"long", "causal"})),
        ("MLA training form (nope 128 + rope 64, K2 shared), forward + backward ÷ plain attention at D = 192",
         mla("xattn_mla_fwd_bwd", base="xattn_mla_plain_fwd_bwd")),
        ("MLA absorbed decoding (128 heads, latent 512 + rope 64, Skv 4096) fp32: % of `peak_fma`",
         mla("xattn_mla", ceiling=peaks)),
        ("MLA absorbed decoding, bfloat16 operands: % of `peak_bf16`", mla("xattn_mla_bf16", ceiling=peak16)),
        ("MLA absorbed decoding fp32: two threads ÷ one", mla_threads("xattn_mla")),
        ("additive attention, forward + backward: PyTorch (d2l) time ÷ xattn time", additive),
        ("causal S = 32768 on 2 MPI ranks × 1 thread ÷ one process × 1 thread", ring),
    ]
    name = label or microarchitecture(context) or context.get("cpu_model") or context.get("host_name") or "this CPU"
    date = str(context.get("date", ""))[:10]
    lines = [f"### {name}" + (f": measured {date}" if date else ""), ""]
    facts = cpu_facts(context, results)
    if facts:
        lines += [facts, ""]
    lines += ["| row | 1 thread | 2 threads |", "|---|---:|---:|"]
    lines += [f"| {what} | " + " | ".join(cells(t) for t in threads) + " |" for what, cells in table]
    return "\n".join(lines) + "\n"


def summary_main(argv):
    out, label, files = None, None, []
    args = iter(argv)
    for a in args:
        if a in ("--out", "--cpu"):
            value = next(args, None)
            if value is None:
                sys.exit(f"report.py: {a} needs a value")
            out, label = (value, label) if a == "--out" else (out, value)
        else:
            files.append(a)
    if not files:
        sys.exit("usage: report.py --summary [--out FILE] [--cpu LABEL] RESULTS_JSON [EXTRA_JSON...]")
    data = load_run(files[0], files[1:])
    md = summary(data.get("context", {}), collect(data["benchmarks"]), data["benchmarks"], label)
    if out:
        Path(out).write_text(md)
        print(f"wrote {out}")
    else:
        print(md, end="")


def main(argv):
    if len(argv) > 1 and argv[1] == "--summary":
        return summary_main(argv[2:])
    if len(argv) < 3:
        sys.exit("usage: report.py RESULTS_JSON OUT_DIR [EXTRA_JSON...]\n"
                 "       report.py --summary [--out FILE] [--cpu LABEL] RESULTS_JSON [EXTRA_JSON...]")
    data = load_run(argv[1], argv[3:])
    out_dir = Path(argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)

    results = collect(data.get("benchmarks", []))
    peaks, table, variants = split(results)
    md = (markdown(data.get("context", {}), peaks, table, variants) + backward_table(results, peaks, data.get("benchmarks", []))
          + sixteen_table(results, peaks) + modern_table(results) + other_measurements(data.get("benchmarks", []))
          + decode_bandwidth(results, data.get("benchmarks", [])) + ggml_table(data.get("benchmarks", []))
          + ring_table(results, data.get("benchmarks", [])))
    (out_dir / "results.md").write_text(md)
    print(md)
    print(f"wrote {out_dir / 'results.md'}")

    points, columns = seqlen_series(table, variants)
    dat = out_dir / "gflops_vs_seqlen.dat"
    write_dat(dat, points, columns)
    print(f"wrote {dat}")
    if columns:
        write_plot(out_dir, dat, points, peaks, columns, variants)
    else:
        print("report.py: no D = 64 non-causal results to plot", file=sys.stderr)
    write_bars(out_dir, "backward", "backward and forward + backward: GFLOP/s by FlashAttention-2's count",
               shape_rows(results, BACKWARD), BACKWARD, peak_lines(results, PEAK))
    write_bars(out_dir, "sixteen_bit", "16-bit operands against fp32 (fp32 accumulation): GFLOP/s",
               sixteen_rows(results), [FUSED] + SIXTEEN, peak_lines(results, PEAK) + peak_lines(results, PEAK_BF16))


if __name__ == "__main__":
    main(sys.argv)
