// Helpers every benchmark variant shares: aligned inputs, deterministic random fill, benchmark names,
// the gflops counter, and thread-count control for OpenMP and OpenBLAS together.
#pragma once

#include "shapes.hpp"

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>

extern "C" void openblas_set_num_threads(int);

namespace xattn_bench {

// A zero-filled float array on a 64-byte boundary. Zero-filling also takes the page faults before timing.
class aligned_buffer {
 public:
  explicit aligned_buffer(std::size_t count) : count_(count), data_(allocate(count)) {
    std::fill_n(data_.get(), count_, 0.0f);
  }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return count_; }
  std::span<float> span() { return {data_.get(), count_}; }

 private:
  struct free_deleter {
    void operator()(float* p) const noexcept { std::free(p); }
  };
  static float* allocate(std::size_t count) {
    std::size_t const bytes = (std::max<std::size_t>(count, 1) * sizeof(float) + 63) / 64 * 64;
    auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  std::size_t count_;
  std::unique_ptr<float[], free_deleter> data_;
};

// Row stride of a materialised score matrix (the unfused baselines): 64 B more than a multiple of
// 64 B, so rows are not 4 KiB apart (4 KiB aliasing slows AVX-512 loads/stores badly on this machine).
inline std::size_t score_stride(int seq_kv) { return (std::size_t(seq_kv) + 15) / 16 * 16 + 16; }

// Uniform [-1, 1) from splitmix64: same values on every platform and standard library, and fast
// enough that filling the large shapes does not dominate the run.
inline void fill_uniform(std::span<float> out, std::uint64_t seed) {
  std::uint64_t state = seed;
  for (float& x : out) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x = float(z >> 40) * 0x1.0p-23f - 1.0f;  // 24 random bits -> [0, 2) -> [-1, 1)
  }
}

// Q, K, V (filled, fixed seeds, so every variant sees identical data) and O, each (B, H, S, D) contiguous.
struct attention_data {
  explicit attention_data(const attention_shape& s)
      : shape(s), q(elements_q(s)), k(elements_kv(s)), v(elements_kv(s)), o(elements_q(s)) {
    fill_uniform(q.span(), 1);
    fill_uniform(k.span(), 2);
    fill_uniform(v.span(), 3);
  }
  // Offset of head (b, h)'s first row in a (B, H, S, D) tensor with sequence length seq.
  std::size_t head_offset(int b, int h, int seq) const {
    return (std::size_t(b) * shape.heads + h) * std::size_t(seq) * shape.head_dim;
  }

  attention_shape shape;
  aligned_buffer q, k, v, o;
};

// "<variant>/<B>/<H>/<Sq>/<Skv>/<D>/<causal>/<threads>"; Google Benchmark appends "/real_time".
inline std::string bench_name(std::string_view variant, const attention_shape& s, int threads) {
  std::string name(variant);
  for (int x : {s.batch, s.heads, s.seq_q, s.seq_kv, s.head_dim, int(s.causal), threads})
    name += '/' + std::to_string(x);
  return name;
}

// Set by hand from wall time: Google Benchmark 1.7's kIsRate counters divide by CPU time (of the
// benchmark thread), not real time, which is wrong for kernels that fan out to OpenMP/OpenBLAS threads.
inline void set_gflops(benchmark::State& state, double flop_per_iteration, double wall_seconds) {
  double const flop = flop_per_iteration * double(state.iterations());
  state.counters["gflops"] = benchmark::Counter(wall_seconds > 0 ? flop / wall_seconds / 1e9 : 0.0);
}

// The timed loop every variant uses: runs step once per iteration and sets the gflops counter.
template <class Step>
double run_timed(benchmark::State& state, double flop_per_iteration, Step&& step) {
  auto const start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    step();
    benchmark::ClobberMemory();
  }
  std::chrono::duration<double> const wall = std::chrono::steady_clock::now() - start;
  if (flop_per_iteration > 0) set_gflops(state, flop_per_iteration, wall.count());
  return state.iterations() ? wall.count() / double(state.iterations()) : 0.0;  // seconds per iteration
}

// One knob for both thread pools. Variants that parallelise with OpenMP themselves then lower
// OpenBLAS to 1 thread (see blas_unfused.cpp).
inline void set_threads(int n) {
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace xattn_bench
