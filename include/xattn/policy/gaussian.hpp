#pragma once
// Gaussian kernel scores -|q - k|² / (2σ²) (d2l's Nadaraya-Watson). Separable:
// -|q-k|²/(2σ²) = (q/σ²)·k - |q|²/(2σ²) - |k|²/(2σ²), so it runs on the dot-product path
// with one per-query and one per-key term.
#include "../error.hpp"

#include <cmath>
#include <span>

namespace xattn {

struct gaussian {
  static constexpr bool separable = true;
  double sigma = 1.0;

  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk) fail("gaussian{sigma}: queries have size ", dq, " but keys have size ", dk);
    if (!(sigma > 0) || !std::isfinite(sigma)) fail("gaussian{sigma}: sigma must be finite and > 0, got ", sigma);
  }
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    double s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += (double(q[d]) - double(k[d])) * (double(q[d]) - double(k[d]));
    return T(-s / (2 * sigma * sigma));
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> out) const {
    const double inv = 1 / (sigma * sigma);
    double n2 = 0;
    for (std::size_t d = 0; d < q.size(); ++d) {
      out[d] = T(double(q[d]) * inv);
      n2 += double(q[d]) * double(q[d]);
    }
    return T(-n2 * inv / 2);
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> out) const {
    double n2 = 0;
    for (std::size_t d = 0; d < k.size(); ++d) {
      out[d] = k[d];
      n2 += double(k[d]) * double(k[d]);
    }
    return T(-n2 / (2 * sigma * sigma));
  }
};

}  // namespace xattn
