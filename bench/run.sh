#!/usr/bin/env bash
# usage: bench/run.sh BUILD_DIR [extra Google Benchmark flags]
#   BENCH_FILTER       regex on benchmark names (default: all), e.g. 'peak_fma|/512/512/'
#   BENCH_MIN_TIME     seconds per repetition (default 1; the whole suite then takes about 11 minutes)
#   BENCH_REPETITIONS  repetitions per benchmark, reported as their median (default 5)
# Writes BUILD_DIR/bench/results.{json,md}, plots (.dat, .gp, .png): gflops_vs_seqlen, backward, sixteen_bit,
# and summary.md: this CPU's table for bench/results/<cpu>-<date>/ (bench/report.py --summary).
set -euo pipefail

build=${1:?usage: bench/run.sh BUILD_DIR [benchmark flags]}
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$build/bench
exe=$out/xattn-bench
[[ -x $exe ]] || { echo "run.sh: $exe not built (cmake --build $build --target xattn-bench)" >&2; exit 1; }

# Idle OpenMP workers must sleep, not spin: spinning takes the cores OpenBLAS's threads need.
export OMP_WAIT_POLICY=passive

# The BLAS baselines are peers at their best: on an AVX-512 CPU whose OpenBLAS would run AVX2
# kernels (an OPENBLAS_CORETYPE naming them in the environment, or an OpenBLAS older than the CPU),
# name the AVX-512 ones. results.json records the core OpenBLAS used (openblas_core).
if grep -qw avx512f /proc/cpuinfo; then
  core=$(OPENBLAS_VERBOSE=2 "$exe" --benchmark_list_tests=true --benchmark_filter='^$' 2>&1 | sed -n 's/^Core: //p')
  case ${core,,} in
    haswell | zen | sandybridge | nehalem | prescott | core2 | "")
      if grep -qw avx512_bf16 /proc/cpuinfo; then fast=COOPERLAKE; else fast=SKYLAKEX; fi
      echo "run.sh: OpenBLAS would run its ${core:-default} kernels${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)} on this AVX-512 CPU; using OPENBLAS_CORETYPE=$fast" >&2
      export OPENBLAS_CORETYPE=$fast
      ;;
  esac
fi

args=(
  --benchmark_out="$out/results.json"
  --benchmark_out_format=json
  --benchmark_min_time="${BENCH_MIN_TIME:-1}"
  --benchmark_repetitions="${BENCH_REPETITIONS:-5}"
  --benchmark_display_aggregates_only=true  # the JSON keeps every repetition
)
[[ -n ${BENCH_FILTER:-} ]] && args+=(--benchmark_filter="$BENCH_FILTER")

"$exe" "${args[@]}" "$@"

# Context parallelism: one process (the baselines), then two ranks of one thread each. Fixed
# iterations (every rank must run the same ones), so no min_time; 3 repetitions, about 3.5 minutes.
mpi_exe=$out/xattn-mpi-bench
if [[ -x $mpi_exe ]] && command -v mpirun >/dev/null; then
  root_flag=(); [[ $(id -u) == 0 ]] && root_flag=(--allow-run-as-root)
  ring_args=(--benchmark_repetitions=3 --benchmark_display_aggregates_only=true --benchmark_out_format=json)
  "$mpi_exe" "${ring_args[@]}" --benchmark_out="$out/ring_single.json" ||
    echo "run.sh: xattn-mpi-bench (one process) failed; continuing" >&2
  mpirun "${root_flag[@]}" -np 2 "$mpi_exe" "${ring_args[@]}" --benchmark_out="$out/ring_np2.json" ||
    echo "run.sh: xattn-mpi-bench (2 ranks) failed; continuing" >&2
fi

# Build cost: the quickstart, a TU training a user policy, and one with five pipelines, compiled at
# -O2 (best of three; compile_probe.sh REV compares with another revision's headers).
bash "$here/compile_probe.sh" --json "$out/compile.json" || echo "run.sh: compile probe failed; continuing" >&2

# ONNX Runtime side by side, same machine, same run (skipped when its harness is not installed).
bash "$here/ort.sh" "$out/ort.json" || echo "run.sh: ONNX Runtime comparison failed; continuing" >&2
# llama.cpp's CPU flash attention on the cache_decode steps (skipped when its harness is not built).
bash "$here/ggml.sh" "$out/ggml.json" || echo "run.sh: llama.cpp comparison failed; continuing" >&2

/usr/bin/python3 "$here/torch_d2l.py" "$out/torch_d2l.json" || echo "run.sh: PyTorch comparison failed; continuing" >&2
# The Python package against PyTorch on the same tensors, and its per-call cost (compare.md, compare.png).
/usr/bin/python3 "$here/compare.py" "$build" "$out" || echo "run.sh: Python comparison failed; continuing" >&2
# Score and mask functions written in Python (xattn.flex) against the package's words and PyTorch eager.
/usr/bin/python3 "$here/flex.py" "$build" "$out/flex.json" || echo "run.sh: flex comparison failed; continuing" >&2
extras=("$out/compile.json" "$out/ort.json" "$out/torch_d2l.json" "$out/ring_single.json" "$out/ring_np2.json"
        "$out/flex.json" "$out/ggml.json")
python3 "$here/report.py" "$out/results.json" "$out" "${extras[@]}"
# This CPU's summary table (bench/results/<cpu>-<date>/summary.md), from the same files.
python3 "$here/report.py" --summary --out "$out/summary.md" "$out/results.json" "${extras[@]}"
