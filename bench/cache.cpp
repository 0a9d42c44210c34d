// "cache_append/<type>/<sequences>/<kv_heads>/<head_dim>/1": one decoding step's append, a token
// of every head to each of `sequences` sequences of a kv_cache (int8 quantized on write), from
// float rows. Counters: us_per_row, the time per (sequence, head) row of keys and values, and
// gbytes_per_s counting the bytes stored. Timed per step by hand (UseManualTime), so that emptying
// the pool between runs of steps is not counted.
#include "common.hpp"
#include "variants.hpp"

#include <xattn/cache.hpp>
#include <xtensor/xtensor.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace xattn_bench {

namespace {

template <class T>
void cache_append(benchmark::State& state, std::size_t sequences, std::size_t heads, std::size_t dim) {
  constexpr std::size_t steps = 1024;  // tokens per sequence before the pool is emptied
  xattn::kv_cache<T> cache({.kv_heads = heads, .head_dim = dim, .page_size = 16, .max_tokens = sequences * steps});
  xt::xtensor<float, 3> k = xt::xtensor<float, 3>::from_shape({heads, 1, dim}), v = k;
  fill_uniform({k.data(), k.size()}, 1);
  fill_uniform({v.data(), v.size()}, 2);
  std::vector<xattn::sequence_id> ids;
  const auto refill = [&] {
    for (const auto id : ids) cache.release(id);
    ids.clear();
    for (std::size_t s = 0; s < sequences; ++s) ids.push_back(cache.add_sequence());
  };
  refill();
  std::size_t step = 0;
  for (auto _ : state) {
    if (step++ == steps) refill(), step = 1;
    const auto start = std::chrono::steady_clock::now();
    for (const auto id : ids) cache.append(id, k, v);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double rows = double(state.iterations() * sequences * heads);
  // (rows / 1e6) per second, inverted: microseconds per row
  state.counters["us_per_row"] =
      benchmark::Counter(rows / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  const double stored = 2.0 * double(dim * sizeof(T) + (std::is_same_v<T, std::int8_t> ? (dim + 31) / 32 * 4 : 0));
  state.counters["gbytes_per_s"] = benchmark::Counter(rows * stored / 1e9, benchmark::Counter::kIsRate);
}

template <class T>
void register_append(const char* type) {
  const std::size_t sequences = 64, heads = 8, dim = 128;
  const std::string name = std::string("cache_append/") + type + "/" + std::to_string(sequences) + "/" +
                           std::to_string(heads) + "/" + std::to_string(dim) + "/1";
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { cache_append<T>(st, sequences, heads, dim); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace

void register_cache() {
  register_append<float>("float");
  register_append<xattn::bfloat16>("bfloat16");
  register_append<std::int8_t>("int8");
}

}  // namespace xattn_bench
