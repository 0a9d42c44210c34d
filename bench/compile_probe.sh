#!/usr/bin/env bash
# Compile time of three translation units a user writes, with this tree's headers and, given a git
# revision, with that revision's headers side by side on the same machine:
#   quickstart      dsl/quickstart.cpp (the README's first program: one pipeline)
#   train_policy    bench/compile_probe_train.cpp (a user policy evaluated and trained with grad)
#   five_pipelines  bench/compile_probe.cpp (five pipelines in one source)
# g++ -std=c++20 -O2 -march=native -fopenmp, the best of N compiles of each variant, compiled in
# turns (a shared VM's compile times vary by 1.5x within an hour), CPU seconds (user + system) and
# peak memory. Each once header-only and once as a program linking xattn::kernels compiles it
# (-DXATTN_PRECOMPILED_KERNELS: rows <name>_kernels; REV's headers, which may not have the
# switch, are timed header-only for both).
# With --tests, instead: the compiler CPU time of `make test`'s build (every default target of a
# fresh Release build, the tree's own or REV's), summed over its compiles.
# With --instantiations, instead: the template instantiations of each translation unit (clang's
# -ftime-trace events InstantiateFunction and InstantiateClass, every one recorded), this tree's
# and REV's: a count that does not drift with the machine.
#
# usage: bench/compile_probe.sh [--json FILE] [--repeat N] [--tests | --instantiations] [REV]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if [[ ${1:-} == --wrap ]]; then  # the compiler launcher of --tests: run the compile, log its CPU time
  log=$2
  shift 2
  /usr/bin/time -f "%U %S" -a -o "$log" "$@"
  exit
fi
json="" repeat=3 rev="" tests=0 instantiations=0
while (($#)); do
  case $1 in
    --json) json=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --tests) tests=1; shift ;;
    --instantiations) instantiations=1; shift ;;
    -h | --help) sed -n 2,18p "$0"; exit 0 ;;
    *) rev=$1; shift ;;
  esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# build_cpu TREE: the summed CPU seconds of every compile in a fresh build of TREE's default targets.
build_cpu() {
  local tree=$1 log=$work/compiles.log
  : > "$log"
  cmake -S "$tree" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER="$here/compile_probe.sh;--wrap;$log" \
    -DCMAKE_C_COMPILER_LAUNCHER="$here/compile_probe.sh;--wrap;$log" > /dev/null
  cmake --build "$work/build" -j "$(nproc)" > /dev/null
  rm -rf "$work/build"
  awk '{ t += $1 + $2 } END { printf "%.0f", t }' "$log"
}
if ((tests)); then
  now=$(build_cpu "$root")
  if [[ -n $rev ]]; then
    mkdir -p "$work/old"
    git -C "$root" archive "$rev" | tar -x -C "$work/old"
    old=$(build_cpu "$work/old")
    echo "make test's compiles: $now s of CPU; at $rev $old s; ratio $(awk -v a="$now" -v b="$old" 'BEGIN { printf "%.2f", a / b }')"
  else
    echo "make test's compiles: $now s of CPU"
  fi
  exit
fi
names=(quickstart train_policy five_pipelines)
sources=(dsl/quickstart.cpp bench/compile_probe_train.cpp bench/compile_probe.cpp)

# instantiated TREE SOURCE: "functions classes" that clang instantiates for SOURCE with TREE's headers.
instantiated() {
  clang++-14 -std=c++20 -O0 -march=native -fopenmp -I"$1/include" -I"$1/dsl" -ftime-trace \
    -ftime-trace-granularity=0 -c "$root/$2" -o "$work/probe.o"
  python3 -c 'import json, sys
e = [x.get("name") for x in json.load(open(sys.argv[1]))["traceEvents"]]
print(e.count("InstantiateFunction"), e.count("InstantiateClass"))' "$work/probe.json"
}
if ((instantiations)); then
  if [[ -n $rev ]]; then
    mkdir -p "$work/old"
    git -C "$root" archive "$rev" include dsl | tar -x -C "$work/old"
  fi
  printf '%-16s %10s %10s %10s' translation_unit functions classes total
  [[ -n $rev ]] && printf ' %12s %7s' "at_$rev" ratio
  printf '\n'
  for i in "${!names[@]}"; do
    read -r f c <<< "$(instantiated "$root" "${sources[$i]}")"
    printf '%-16s %10s %10s %10s' "${names[$i]}" "$f" "$c" $((f + c))
    if [[ -n $rev ]]; then
      read -r of oc <<< "$(instantiated "$work/old" "${sources[$i]}")"
      printf ' %12s %7s' $((of + oc)) "$(awk -v a=$((f + c)) -v b=$((of + oc)) 'BEGIN { printf "%.3f", a / b }')"
    fi
    printf '\n'
  done
  exit
fi

# compile_once TREE SOURCE [FLAG]: "cpu_seconds peak_mb" of one compile.
compile_once() {
  local tree=$1 src=$2 flag=${3:-}
  /usr/bin/time -f "%U %S %M" -o "$work/time" g++ -std=c++20 -O2 -march=native -fopenmp -I"$tree/include" \
    -I"$tree/dsl" $flag -c "$root/$src" -o "$work/probe.o"
  read -r user sys kb < "$work/time"
  awk -v u="$user" -v s="$sys" -v k="$kb" 'BEGIN { printf "%.2f %d", u + s, k / 1024 }'
}

# best KEY "cpu mb": keeps the smallest CPU time and the largest peak memory seen under KEY.
declare -A best_cpu best_mb
best() {
  local cpu mb
  read -r cpu mb <<< "$2"
  best_cpu[$1]=$(awk -v t="$cpu" -v b="${best_cpu[$1]:-}" 'BEGIN { printf "%.2f", (b == "" || t < b) ? t : b }')
  best_mb[$1]=$(( mb > ${best_mb[$1]:-0} ? mb : ${best_mb[$1]:-0} ))
}

if [[ -n $rev ]]; then
  mkdir -p "$work/old"
  git -C "$root" archive "$rev" include dsl | tar -x -C "$work/old"
fi

rows=()
printf '%-24s %10s %8s' translation_unit seconds MB
[[ -n $rev ]] && printf ' %10s %8s %7s' "at_$rev" MB ratio
printf '\n'
for i in "${!names[@]}"; do
  # The variants take turns, so that the machine's drift reaches each of them alike.
  for ((n = 0; n < repeat; ++n)); do
    [[ -n $rev ]] && best old "$(compile_once "$work/old" "${sources[$i]}")"
    best now "$(compile_once "$root" "${sources[$i]}")"
    best now_kernels "$(compile_once "$root" "${sources[$i]}" -DXATTN_PRECOMPILED_KERNELS)"
  done
  for kernels in "" _kernels; do
    now=${best_cpu[now$kernels]} now_mb=${best_mb[now$kernels]}
    name=${names[$i]}$kernels
    printf '%-24s %10s %8s' "$name" "$now" "$now_mb"
    row="{\"name\": \"compile/${name}_O2\", \"run_type\": \"iteration\", \"seconds\": $now, \"peak_mb\": $now_mb"
    if [[ -n $rev ]]; then
      old=${best_cpu[old]} old_mb=${best_mb[old]}
      ratio=$(awk -v a="$now" -v b="$old" 'BEGIN { printf "%.2f", a / b }')
      printf ' %10s %8s %7s' "$old" "$old_mb" "$ratio"
      row+=", \"seconds_before\": $old, \"ratio\": $ratio"
    fi
    printf '\n'
    rows+=("$row}")
  done
  unset best_cpu best_mb
  declare -A best_cpu best_mb
done
if [[ -n $json ]]; then
  (IFS=,; echo "{\"benchmarks\": [${rows[*]}]}") > "$json"
fi
