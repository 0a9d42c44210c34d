#pragma once
// Fused output against the double reference, row by row.
//
// Tolerance: the bound of tests/eval/oracle/differential.hpp (see the derivation there), applied per
// query row rather than per case, with max|s| over that row's finite, computed scores. Scores a
// filling mask wrote (d2l's -1e6) are exact, not rounded, so they do not widen the bound.
// n = max(Dq, Dk, 40): 40 is the largest hidden width the additive scorer draws.
#include "fuzz_case.hpp"

#include <xattn/eval/oracle/reference.hpp>

#include <cmath>
#include <sstream>
#include <string>

namespace xattn::fuzz {

struct verdict {
  bool ok = true;
  std::string detail;  // the first offending element, for the failure line
};

enum class out_layout { bsd, bhsd, packed };

/// Element (b, h, i, d) of a freshly allocated, row-major fused result.
template <class Out>
double fused_at(const Out& out, out_layout l, const testing::case_sizes& z, std::size_t b, std::size_t h, std::size_t i,
                std::size_t d) {
  switch (l) {
    case out_layout::bsd:
      return double(out.data()[(b * z.Sq + i) * z.Dv + d]);
    case out_layout::packed:
      return double(out.data()[(b * z.Sq + i) * z.Hq() * z.Dv + h * z.Dv + d]);
    default:
      return double(out.data()[((b * z.Hq() + h) * z.Sq + i) * z.Dv + d]);
  }
}

inline std::vector<std::size_t> expected_shape(out_layout l, const testing::case_sizes& z) {
  switch (l) {
    case out_layout::bsd:
      return {z.B, z.Sq, z.Dv};
    case out_layout::packed:
      return {z.B, z.Sq, z.Hq() * z.Dv};
    default:
      return {z.B, z.Hq(), z.Sq, z.Dv};
  }
}

/// got against the reference: fp32 or fp64 summation error, plus p_rounding · max|V| where the
/// probabilities are rounded before P·V (bf16 values on vdpbf16ps: 2^-9, relative).
template <class T, class Out>
verdict compare(const Out& got, out_layout l, const reference_result& want, const testing::case_sizes& z, double max_v,
                double p_rounding = 0) {
  const auto shape = expected_shape(l, z);
  if (!std::equal(shape.begin(), shape.end(), got.shape().begin(), got.shape().end()))
    return {false, "result shape " + shape_str(got.shape()) + ", expected " + shape_str(shape)};
  const double eps = std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53;
  const double n = double(std::max<std::size_t>({z.Dq, z.Dk, 40}));
  const double fill = lengths_mask{}.fill_value;
  for (std::size_t b = 0; b < z.B; ++b)
    for (std::size_t h = 0; h < z.Hq(); ++h)
      for (std::size_t i = 0; i < z.Sq; ++i) {
        double max_s = 0;
        for (std::size_t j = 0; j < z.Skv; ++j) {
          const double s = want.scores(b, h, i, j);
          if (std::isfinite(s) && s != fill) max_s = std::max(max_s, std::abs(s));
        }
        const double tol = (8 * n * eps * (1 + max_s) + p_rounding) * std::max(1.0, max_v);
        for (std::size_t d = 0; d < z.Dv; ++d) {
          const double g = fused_at(got, l, z, b, h, i, d), w = want.output(b, h, i, d);
          const double err = std::abs(g - w);
          if (err <= tol || (std::isnan(g) && std::isnan(w))) continue;
          std::ostringstream os;
          os << "out(b=" << b << ", h=" << h << ", i=" << i << ", d=" << d << ") = " << g << ", reference " << w
             << ", error " << err << " > tolerance " << tol;
          return {false, os.str()};
        }
      }
  return {};
}

}  // namespace xattn::fuzz
