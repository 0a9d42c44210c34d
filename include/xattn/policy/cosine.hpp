#pragma once
// Cosine similarity scaled by 1/temperature: (q·k) / (|q| |k| τ). Separable: rows are
// normalised once. A zero vector has similarity 0 with everything (no NaN).
#include "../error.hpp"

#include <cmath>
#include <span>

namespace xattn {

struct cosine {
  static constexpr bool separable = true;
  double temperature = 1.0;

  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk) fail("cosine{temperature}: queries have size ", dq, " but keys have size ", dk);
    if (!(temperature > 0) || !std::isfinite(temperature))
      fail("cosine{temperature}: temperature must be finite and > 0, got ", temperature);
  }
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    double qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) {
      qk += double(q[d]) * double(k[d]);
      qq += double(q[d]) * double(q[d]);
      kk += double(k[d]) * double(k[d]);
    }
    return qq == 0 || kk == 0 ? T(0) : T(qk / (std::sqrt(qq) * std::sqrt(kk) * temperature));
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

 private:
  template <class T>
  static void normalise(std::span<const T> x, std::span<T> out, double t) {
    double n2 = 0;
    for (auto v : x) n2 += double(v) * double(v);
    const double c = n2 == 0 ? 0 : 1 / (std::sqrt(n2) * t);
    for (std::size_t d = 0; d < x.size(); ++d) out[d] = T(double(x[d]) * c);
  }
};

}  // namespace xattn
