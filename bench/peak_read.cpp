// "bandwidth/read/<threads>": DRAM read bandwidth measured in the same run, the 100 % that decode
// (Sq = 1, which must stream K and V once) is measured against. Reads as many bytes as the decode
// shape's K and V (128 MiB, 4x the L3), summing with independent chains so that loads, not adds,
// set the pace.
#include "common.hpp"
#include "variants.hpp"

#include <xsimd/xsimd.hpp>

#include <vector>

namespace xattn_bench {
namespace {

using float_batch = xsimd::batch<float>;
constexpr std::size_t bytes = std::size_t(128) << 20;

float sum_range(const float* x, std::size_t n) {
  constexpr std::size_t w = float_batch::size;
  float_batch acc[4] = {float_batch(0.0f), float_batch(0.0f), float_batch(0.0f), float_batch(0.0f)};
  for (std::size_t i = 0; i + 4 * w <= n; i += 4 * w)
    for (std::size_t c = 0; c < 4; ++c) acc[c] += float_batch::load_unaligned(x + i + c * w);
  return xsimd::hadd((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

void peak_read(benchmark::State& state, int threads) {
  static const std::vector<float> data(bytes / sizeof(float), 1.0f);  // written once: pages are resident
  set_threads(threads);
  const double seconds = run_timed(state, 0, [&] {
    float total = 0.0f;
    const std::size_t n = data.size();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const std::size_t t = std::size_t(omp_get_thread_num()), parts = std::size_t(omp_get_num_threads());
      total += sum_range(data.data() + n * t / parts, n / parts);
    }
    benchmark::DoNotOptimize(total);
  });
  state.counters["gbytes_per_s"] = double(bytes) / seconds / 1e9;
}

}  // namespace

void register_peak_read() { register_per_thread_count("bandwidth/read", peak_read); }

}  // namespace xattn_bench
