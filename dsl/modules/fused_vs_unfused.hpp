#pragma once
// A short timing: the fused xattn pass against the materialised sgemm + softmax + sgemm of
// unfused_attention.hpp, on (1, heads, S, dim) self-attention shapes; median of a few runs.
#include "unfused_attention.hpp"

#include <xattn/xattn.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dsl {

struct timing_row {
  std::size_t seq = 0;
  double fused_s = 0, unfused_s = 0;            // median seconds per call
  double gflops_fused = 0, gflops_unfused = 0;  // 4 * H * S² * D flop per call
  double max_diff = 0;                          // |fused - unfused|, a correctness check
  double scores_mib = 0;                        // what the unfused path materialises
};

/// progress(done, total, what) is called before each measurement.
inline std::vector<timing_row> fused_vs_unfused(const std::vector<std::size_t>& seqs, std::size_t heads,
                                                std::size_t dim, int reps,
                                                const std::function<void(int, int, const std::string&)>& progress) {
  using clock = std::chrono::steady_clock;
  auto median_seconds = [reps](auto&& f) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = clock::now();
      f();
      t.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<timing_row> rows;
  const int total = int(2 * seqs.size());
  int done = 0;
  for (const std::size_t s : seqs) {
    xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({1, heads, s, dim}), k = q, v = q;
    for (auto* t : {&q, &k, &v})
      for (auto& x : *t) x = u(gen);
    timing_row row;
    row.seq = s;
    const double flop = 4.0 * double(heads) * double(s) * double(s) * double(dim);
    auto Q = xattn::ref(q), K = xattn::ref(k), V = xattn::ref(v);
    const auto e = xattn::softmax(Q * xattn::trans(K) / std::sqrt(float(dim))) * V;
    xt::xtensor<float, 4> fused, unfused;
    progress(done++, total, "S=" + std::to_string(s) + " fused");
    row.fused_s = median_seconds([&] { fused = xattn::eval(e); });
    progress(done++, total, "S=" + std::to_string(s) + " unfused");
    row.unfused_s = median_seconds([&] { unfused = unfused_attention(q, k, v); });
    row.gflops_fused = flop / row.fused_s * 1e-9;
    row.gflops_unfused = flop / row.unfused_s * 1e-9;
    for (std::size_t n = 0; n < fused.size(); ++n)
      row.max_diff = std::max(row.max_diff, double(std::abs(fused.flat(n) - unfused.flat(n))));
    row.scores_mib = double(heads * s * s * sizeof(float)) / (1 << 20);
    rows.push_back(row);
  }
  progress(done, total, "done");
  return rows;
}

}  // namespace dsl
