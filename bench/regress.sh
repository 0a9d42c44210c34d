#!/usr/bin/env bash
# usage: bash bench/regress.sh REV [BUILD_DIR]
#
# Whether this checkout is slower than revision REV on the rows that matter: builds REV's
# xattn-bench beside this checkout's (BUILD_DIR, default build: Release), then runs a fixed set
# of 12 rows -- dense, causal, decode, grouped-query decode, cache decode float / bfloat16 / int8,
# bfloat16, backward, bfloat16 backward, an encoder batch, dense on 2 threads -- three rounds of
# both binaries in alternating order (old new, new old, old new), so that both meet the host in
# the same states. Prints each row's median time for both and the speed of this checkout over
# REV's; a row below 0.97 is run again once (three more rounds of that row alone) and both
# results are shown. About 10 minutes on a 2-core machine once REV is built (REV's build is kept
# in BUILD_DIR/regress-<rev> for the next run). ROUNDS=5 for more rounds: on a shared VM the
# memory-bound decoding rows move by about 5 % between rounds, the compute rows by about 1 %.
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,14p' "$0" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
rev=$(git -C "$here" rev-parse --short "$1")
build=$(cd "${2:-build}" && pwd)
old=$build/regress-$rev
jobs=$(nproc 2>/dev/null || echo 2)
rounds=${ROUNDS:-3}
export OMP_WAIT_POLICY=passive  # as bench/run.sh: spinning workers would take the other core

if [ ! -x "$old/build/bench/xattn-bench" ]; then
  echo "regress.sh: building $rev's xattn-bench in $old" >&2
  rm -rf "$old/src" && mkdir -p "$old/src"
  git -C "$here" archive "$rev" | tar -x -C "$old/src"
  cmake -S "$old/src" -B "$old/build" -DCMAKE_BUILD_TYPE=Release -DXATTN_BUILD_TESTS=OFF > /dev/null
  cmake --build "$old/build" --target xattn-bench -j "$jobs" > "$old/build.log" 2>&1 ||
    { tail -20 "$old/build.log" >&2; exit 1; }
fi
echo "regress.sh: bringing this checkout's xattn-bench up to date" >&2
cmake --build "$build" --target xattn-bench -j "$jobs" > "$build/regress-build.log" 2>&1 ||
  { tail -20 "$build/regress-build.log" >&2; exit 1; }

rows=(
  "xattn/1/8/2048/2048/64/0/1/real_time"
  "xattn/1/8/2048/2048/64/1/1/real_time"
  "xattn/1/32/1/4096/128/0/1/real_time"
  "xattn_gqa/1/32/8/1/8192/128/1/real_time"
  "cache_decode/float/1/32/32/4096/128/1/real_time"
  "cache_decode/bfloat16/1/32/32/4096/128/1/real_time"
  "cache_decode/int8/1/32/32/4096/128/1/real_time"
  "xattn_bf16/1/8/2048/2048/64/0/1/real_time"
  "xattn_bwd/1/8/2048/2048/64/0/1/real_time"
  "xattn_bf16_bwd/1/8/2048/2048/64/0/1/real_time"
  "xattn/32/12/128/128/64/0/1/real_time"
  "xattn/1/8/2048/2048/64/0/2/real_time"
)
out=$build/regress-$rev-results
rm -rf "$out" && mkdir -p "$out"

# run_rounds TAG ROW...: rounds of both binaries, alternating which goes first
run_rounds() {
  local tag=$1
  shift
  local filter
  filter="^($(printf '%s|' "$@" | sed 's/|$//'))\$"
  for round in $(seq "$rounds"); do
    local order=(old new)
    [ $((round % 2)) -eq 0 ] && order=(new old)
    for who in "${order[@]}"; do
      local bin=$build/bench/xattn-bench
      [ "$who" = old ] && bin=$old/build/bench/xattn-bench
      "$bin" --benchmark_filter="$filter" --benchmark_min_time=1 --benchmark_repetitions=1 \
        --benchmark_format=json --benchmark_out="$out/$tag-$who-$round.json" > /dev/null 2>> "$out/stderr.txt"
    done
  done
}

run_rounds first "${rows[@]}"
slow=$(python3 - "$out" first "${rows[@]}" <<'EOF'
import glob, json, statistics, sys
out, tag, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
times = {}
for path in glob.glob("%s/%s-*.json" % (out, tag)):
    who = path.rsplit("-", 2)[1]
    for b in json.load(open(path))["benchmarks"]:
        times.setdefault((b["name"], who), []).append(b["real_time"])  # one unit per row: ratios only
for r in rows:
    old, new = times.get((r, "old")), times.get((r, "new"))
    if old and new and statistics.median(old) / statistics.median(new) < 0.97:
        print(r)
EOF
)
if [ -n "$slow" ]; then
  mapfile -t again <<< "$slow"
  echo "regress.sh: running again: ${again[*]}" >&2
  run_rounds again "${again[@]}"
fi

python3 - "$out" "$rev" "${rows[@]}" <<'EOF'
import glob, json, statistics, sys
out, rev, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
times = {}
for path in glob.glob("%s/*.json" % out):
    tag, who, _ = path.rsplit("/", 1)[1].rsplit(".", 1)[0].split("-")
    for b in json.load(open(path))["benchmarks"]:
        ms = b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        times.setdefault((tag, b["name"], who), []).append(ms)
print("| row | %s (ms) | this checkout (ms) | speed ÷ %s |" % (rev, rev))
print("|---|---:|---:|---:|")
worst = None
for r in rows:
    cells = []
    for tag in ("first", "again"):
        old, new = times.get((tag, r, "old")), times.get((tag, r, "new"))
        if old and new:
            ratio = statistics.median(old) / statistics.median(new)
            cells.append((statistics.median(old), statistics.median(new), ratio))
    if not cells:
        print("| %s | | | not run |" % r)
        continue
    old, new, ratio = cells[-1]
    shown = " ← ".join("%.3f" % c[2] for c in reversed(cells))  # the rerun first, then the first run
    flag = "" if ratio >= 0.97 else " **below 0.97**"
    print("| `%s` | %.3f | %.3f | %s%s |" % (r.replace("/real_time", ""), old, new, shown, flag))
    worst = ratio if worst is None else min(worst, ratio)
print("\nworst row: %.3f (medians of the rounds; a rerun row shows its rerun first)" % worst)
EOF
