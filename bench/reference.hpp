// Spot check of a variant's output against double-precision attention on a few rows, so a fast but
// wrong kernel shows up as an error in the results instead of a good number.
#pragma once

#include "common.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace xattn_bench {

// Largest |out - ref| / (atol + 1e-3 |ref|) over rows {0, Sq/2, Sq-1} of the first and last head;
// <= 1 passes.
inline double reference_error(const attention_data& in, const float* out, double atol = 1e-4) {
  const attention_shape& s = in.shape;
  double const scale = 1.0 / std::sqrt(double(s.head_dim));
  double worst = 0.0;
  std::vector<double> p(std::size_t(s.seq_kv));
  for (auto [b, h] : {std::pair{0, 0}, std::pair{s.batch - 1, s.heads - 1}}) {
    const float* q = in.q.data() + in.head_offset(b, h, s.seq_q);
    const float* k = in.k.data() + in.head_offset(b, h, s.seq_kv);
    const float* v = in.v.data() + in.head_offset(b, h, s.seq_kv);
    const float* o = out + in.head_offset(b, h, s.seq_q);
    for (int i : {0, s.seq_q / 2, s.seq_q - 1}) {
      std::ptrdiff_t const visible = causal_visible_keys(s, i);
      double m = -INFINITY;
      for (std::ptrdiff_t j = 0; j < visible; ++j) {
        double dot = 0;
        for (int c = 0; c < s.head_dim; ++c) dot += double(q[i * s.head_dim + c]) * k[j * s.head_dim + c];
        p[j] = dot * scale;
        m = std::max(m, p[j]);
      }
      double sum = 0;
      for (std::ptrdiff_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - m));
      for (int c = 0; c < s.head_dim; ++c) {
        double ref = 0;
        for (std::ptrdiff_t j = 0; j < visible; ++j) ref += p[j] * v[j * s.head_dim + c];
        ref = visible > 0 ? ref / sum : 0.0;  // a row that sees no key outputs zeros
        double const got = o[i * s.head_dim + c];
        double const err = std::abs(got - ref) / (atol + 1e-3 * std::abs(ref));
        if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
      }
    }
  }
  return worst;
}

// Marks the benchmark as failed (it then reports no timing) when the output is wrong.
inline void check_against_reference(benchmark::State& state, const attention_data& in, const float* out,
                                    double atol = 1e-4) {
  double const err = reference_error(in, out, atol);
  if (!(err <= 1.0))
    state.SkipWithError(("output differs from reference (scaled error " + std::to_string(err) + ")").c_str());
}

}  // namespace xattn_bench
