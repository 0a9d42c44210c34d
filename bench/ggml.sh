#!/usr/bin/env bash
# usage: bench/ggml.sh OUT_JSON
# llama.cpp's CPU flash attention (ggml_flash_attn_ext) on the decoding steps of the cache_decode
# rows, one K/V type at a time, written as Google-Benchmark-like JSON ("ggml/<type>/<B>/<Hq>/<Hkv>/
# <Skv>/<D>/<threads>" with real_time in ms) for report.py to merge. Runs only where the harness of
# ../shared/tools/ggml is built (GGML_BENCH_FA, default ~/.cache/xattn-ggml/bench_fa; build it with
# `bash ../shared/tools/ggml/build.sh <ggml checkout> ~/.cache/xattn-ggml`).
set -euo pipefail
out=${1:?usage: bench/ggml.sh OUT_JSON}
exe=${GGML_BENCH_FA:-$HOME/.cache/xattn-ggml/bench_fa}
[[ -x $exe ]] || { echo "ggml.sh: no bench_fa at $exe; skipped" >&2; exit 0; }
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
# the rows' shapes: 32 heads over 4096 keys, and 32 query heads on 8 key/value heads over 8192
"$exe" --bench --case 1,32,1,4096,128 --case 1,32,1,8192,128,none,8 --types f32,f16,bf16,q8_0,q4_0 \
  --threads 1,2 --no-unfused --runs 5 --min-time 0.3 --csv "$csv" >/dev/null
python3 - "$csv" "$out" <<'PY'
import csv, json, sys
rows = []
for r in csv.DictReader(open(sys.argv[1])):
    name = "ggml/%s/%s/%s/%s/%s/%s/%s" % (r["kv_type"], r["B"], r["H"], r["Hkv"], r["Skv"], r["D"], r["threads"])
    rows.append({"name": name, "run_type": "iteration", "real_time": float(r["fused_ms"]), "time_unit": "ms",
                 "gbytes_per_s": float(r["fused_gbs"] or 0)})
json.dump({"benchmarks": rows}, open(sys.argv[2], "w"), indent=1)
PY
echo "wrote $out"
