#!/usr/bin/env bash
# usage: bench/ort.sh OUT_JSON
# ONNX Runtime's CPU attention on the shape table and the encoder-sized batch, same threads,
# written as Google-Benchmark-like JSON ("ort/<B>/<H>/<Sq>/<Skv>/<D>/<causal>/<threads>" with "gflops") for report.py to merge.
# Runs only where the harness of ../shared/tools/ort is installed (ORT_DIR, default
# ~/.cache/xattn-ort; install with `bash ../shared/tools/ort/setup.sh ~/.cache/xattn-ort`).
# Dense shapes use ORT's fastest path (com.microsoft MultiHeadAttention, flash); causal ones its
# MultiHeadAttention with unidirectional=1 (correct for Sq = Skv).
set -euo pipefail
out=${1:?usage: bench/ort.sh OUT_JSON}
dir=${ORT_DIR:-$HOME/.cache/xattn-ort}
[[ -f $dir/ort_attention.mjs && -d $dir/node_modules/onnxruntime-node ]] || { echo "ort.sh: no ORT harness in $dir; skipped" >&2; exit 0; }
shapes="1,8,512,512,64,0 1,8,2048,2048,64,0 1,8,4096,4096,64,0 1,8,2048,2048,128,0 4,16,256,256,64,0 1,8,2048,2048,64,1 1,32,1,4096,128,0 32,12,128,128,64,0"
{
  echo '{"benchmarks": ['
  first=1
  for s in $shapes; do
    IFS=, read -r B H Sq Skv D causal <<<"$s"
    for t in 1 2; do
      extra=(); [[ $causal == 1 ]] && extra=(--causal)
      line=$(cd "$dir" && node ort_attention.mjs --form mha --shape "$B,$H,$Sq,$Skv,$D" --threads "$t" \
               --bench 10 --warmup 2 "${extra[@]}" 2>/dev/null | grep '^BENCH' || true)
      g=$(sed -n 's/.*GFLOPs=\([0-9.]*\).*/\1/p' <<<"$line")
      [[ -n $g ]] || continue
      [[ $first == 1 ]] || echo ','
      first=0
      echo "{\"name\": \"ort/$B/$H/$Sq/$Skv/$D/$causal/$t\", \"run_type\": \"iteration\", \"gflops\": $g}"
    done
  done
  echo ']}'
} > "$out"
echo "wrote $out"
