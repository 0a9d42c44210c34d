// "peak_bf16/<threads>": the vdpbf16ps ceiling (AVX512-BF16), the 100 % the bf16 rows are measured
// against: 2 FLOP per bf16 pair product, 32 pairs per zmm instruction. Compiled for the instruction
// with a target attribute and run only where the CPU has it; elsewhere the row is an error that
// says so (the bf16 kernel then widens to fp32, and peak_fma is its ceiling).
#include "common.hpp"
#include "variants.hpp"

#include <immintrin.h>

#include <cstdint>

namespace xattn_bench {
namespace {

constexpr std::size_t chains = 12;
constexpr long steps = 1L << 21;

// acc += a·b pairwise with a·b tiny: values stay finite, and nothing folds at compile time.
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(float seed) {
  __m512 acc[chains];
  for (std::size_t j = 0; j < chains; ++j) acc[j] = _mm512_set1_ps(seed + float(j));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(std::int16_t(0x3380));  // 2^-24 in bfloat16
  for (long i = 0; i < steps; ++i)
    for (auto& x : acc) x = _mm512_dpbf16_ps(x, a, a);
  alignas(64) float lanes[16];
  __m512 sum = _mm512_setzero_ps();
  for (const auto& x : acc) sum = _mm512_add_ps(sum, x);
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

void peak_bf16(benchmark::State& state, int threads) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    state.SkipWithError("this CPU has no AVX512-BF16 (vdpbf16ps): bf16 operands widen to fp32 here");
    return;
  }
  set_threads(threads);
  const double flop = double(threads) * steps * chains * 32 * 2;
  run_timed(state, flop, [&] {
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += dpbf16_chains(float(omp_get_thread_num()));
    benchmark::DoNotOptimize(total);
  });
}

}  // namespace

void register_peak_bf16() { register_per_thread_count("peak_bf16", peak_bf16); }

}  // namespace xattn_bench
