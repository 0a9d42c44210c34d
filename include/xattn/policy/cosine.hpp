#pragma once
// Cosine similarity scaled by 1/temperature: (q·k) / (|q| |k| τ). Separable: rows are
// normalised once. A zero vector has similarity 0 with everything (no NaN).
#include "../dual.hpp"
#include "../error.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <tuple>

namespace xattn {

/// grad(e).dscore of a cosine policy.
struct cosine_gradients {
  double d_temperature = 0;

  auto parts() { return std::tie(d_temperature); }
};

struct cosine {
  static constexpr bool separable = true;
  double temperature = 1.0;
  using parameter_gradients = cosine_gradients;

  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk) fail("cosine{temperature}: queries have size ", dq, " but keys have size ", dk);
    if (!(temperature > 0) || !std::isfinite(temperature))
      fail("cosine{temperature}: temperature must be finite and > 0, got ", temperature);
  }
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;  // generic: runs on dual numbers
    using W = widened_t<T>;
    W qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) {
      qk += W(q[d]) * W(k[d]);
      qq += W(q[d]) * W(q[d]);
      kk += W(k[d]) * W(k[d]);
    }
    return qq == W(0) || kk == W(0) ? T(0) : T(qk / (sqrt(qq) * sqrt(kk) * W(temperature)));
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> out) const {
    normalise(q, out, temperature);
    return 0;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> out) const {
    normalise(k, out, 1.0);
    return 0;
  }

  // ---- analytic gradients (policy/gradient.hpp): fq = u/τ, fk = u' with u = x/|x| ----
  cosine_gradients zero_gradients() const { return {}; }
  template <class T>
  void project_query_backward(std::span<const T> q, std::span<const T> dfq, T, std::span<T> dq,
                              cosine_gradients& g) const {
    g.d_temperature -= normalise_backward(q, dfq, 1 / temperature, dq) / temperature;
  }
  template <class T>
  void project_key_backward(std::span<const T> k, std::span<const T> dfk, T, std::span<T> dk, cosine_gradients&) const {
    normalise_backward(k, dfk, 1.0, dk);
  }

 private:
  /// f = c·x/|x|: dx = c (df - u (u·df)) / |x|; returns df·f (for the gradient of c). Zero x: 0.
  template <class T>
  static double normalise_backward(std::span<const T> x, std::span<const T> df, double c, std::span<T> dx) {
    double n2 = 0;
    for (auto v : x) n2 += double(v) * double(v);
    if (n2 == 0) {
      std::fill(dx.begin(), dx.end(), T(0));
      return 0;
    }
    const double n = std::sqrt(n2);
    double u_df = 0;
    for (std::size_t d = 0; d < x.size(); ++d) u_df += double(x[d]) / n * double(df[d]);
    for (std::size_t d = 0; d < x.size(); ++d) dx[d] = T(c * (double(df[d]) - double(x[d]) / n * u_df) / n);
    return c * u_df;
  }
  template <class T>
  static void normalise(std::span<const T> x, std::span<T> out, double t) {
    double n2 = 0;
    for (auto v : x) n2 += double(v) * double(v);
    const double c = n2 == 0 ? 0 : 1 / (std::sqrt(n2) * t);
    for (std::size_t d = 0; d < x.size(); ++d) out[d] = T(double(x[d]) * c);
  }
};

}  // namespace xattn
