// "peak_fma/<threads>": the machine's fp32 FMA ceiling, the 100 % that the report measures the
// fused kernel against. Independent dependency chains hide FMA latency (4 cycles × 2 pipes needs ≥ 8).
#include "common.hpp"
#include "variants.hpp"

#include <xsimd/xsimd.hpp>

#include <array>
#include <string>

namespace xattn_bench {
namespace {

using float_batch = xsimd::batch<float>;

constexpr std::size_t chains = 12;
constexpr long steps = 1L << 22;  // per call: ~14 ms on one core at 117 GFLOP/s

// acc = acc·a + c converges to c / (1 - a): no overflow, no denormals, values never constant-fold.
float fma_chains(float seed) {
  std::array<float_batch, chains> acc;
  for (std::size_t j = 0; j < chains; ++j) acc[j] = float_batch(seed + float(j) * 1e-3f);
  float_batch const a(0.999999f), c(1e-6f);
  for (long i = 0; i < steps; ++i)
    for (auto& x : acc) x = xsimd::fma(x, a, c);
  float_batch sum(0.0f);
  for (auto const& x : acc) sum += x;
  return xsimd::hadd(sum);
}

void peak_fma(benchmark::State& state, int threads) {
  set_threads(threads);
  double const flop = double(threads) * steps * chains * float_batch::size * 2;
  run_timed(state, flop, [&] {
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += fma_chains(float(omp_get_thread_num()));
    benchmark::DoNotOptimize(total);
  });
  state.SetLabel(std::string(xsimd::default_arch::name()) + ", " + std::to_string(float_batch::size) + " lanes");
}

}  // namespace

void register_peak_fma() { register_per_thread_count("peak_fma", peak_fma); }

}  // namespace xattn_bench
