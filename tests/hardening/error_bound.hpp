#pragma once
// The fitted error bound of docs/numerics.md for the fused kernel against the double reference:
//     |out - ref| <= eps · (0.5·sqrt(D)·(1 + max|s|) + 0.001·S) · max|V|
// First term: score rounding (a D-term dot product, errors growing like sqrt(D)), passed through
// softmax as a relative weight error proportional to |s|. Second term: P·V and the softmax sum are
// accumulated in T, per key block and then across blocks; same-sign sums drift slowly with S.
// Coefficients: the largest measured ratios (xattn-numerics-probe), rounded up.
#include <cmath>
#include <cstddef>
#include <type_traits>

namespace xattn::hardening {

template <class T>
double error_bound(std::size_t d, std::size_t s, double max_score, double max_v) {
  const double eps = std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53;
  return eps * (0.5 * std::sqrt(double(d)) * (1 + max_score) + 0.001 * double(s)) * max_v;
}

}  // namespace xattn::hardening
