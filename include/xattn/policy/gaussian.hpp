#pragma once
// Gaussian kernel scores -|q - k|² / (2σ²) (d2l's Nadaraya-Watson). Separable:
// -|q-k|²/(2σ²) = (q/σ²)·k - |q|²/(2σ²) - |k|²/(2σ²), so it runs on the dot-product path
// with one per-query and one per-key term.
#include "../dual.hpp"
#include "../error.hpp"

#include <cmath>
#include <span>
#include <tuple>

namespace xattn {

/// grad(e).dscore of a gaussian policy.
struct gaussian_gradients {
  double d_sigma = 0;

  auto parts() { return std::tie(d_sigma); }
};

struct gaussian {
  static constexpr bool separable = true;
  double sigma = 1.0;
  using parameter_gradients = gaussian_gradients;

  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk) fail("gaussian{sigma}: queries have size ", dq, " but keys have size ", dk);
    if (!(sigma > 0) || !std::isfinite(sigma)) fail("gaussian{sigma}: sigma must be finite and > 0, got ", sigma);
  }
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using W = widened_t<T>;  // generic: runs on dual numbers
    W s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += (W(q[d]) - W(k[d])) * (W(q[d]) - W(k[d]));
    return T(-s / W(2 * sigma * sigma));
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

  // ---- analytic gradients (policy/gradient.hpp) ----
  // fq = q/σ², α = -|q|²/(2σ²); fk = k, β = -|k|²/(2σ²).
  gaussian_gradients zero_gradients() const { return {}; }
  template <class T>
  void project_query_backward(std::span<const T> q, std::span<const T> dfq, T dalpha, std::span<T> dq,
                              gaussian_gradients& g) const {
    const double inv = 1 / (sigma * sigma), s3 = sigma * sigma * sigma;
    double n2 = 0, fq_q = 0;
    for (std::size_t d = 0; d < q.size(); ++d) {
      dq[d] = T((double(dfq[d]) - double(dalpha) * double(q[d])) * inv);
      n2 += double(q[d]) * double(q[d]);
      fq_q += double(dfq[d]) * double(q[d]);
    }
    g.d_sigma += (-2 * fq_q + double(dalpha) * n2) / s3;
  }
  template <class T>
  void project_key_backward(std::span<const T> k, std::span<const T> dfk, T dbeta, std::span<T> dk,
                            gaussian_gradients& g) const {
    double n2 = 0;
    for (std::size_t d = 0; d < k.size(); ++d) {
      dk[d] = T(double(dfk[d]) - double(dbeta) * double(k[d]) / (sigma * sigma));
      n2 += double(k[d]) * double(k[d]);
    }
    g.d_sigma += double(dbeta) * n2 / (sigma * sigma * sigma);
  }
};

}  // namespace xattn
