#pragma once
// Scoring functions written the natural way: operator() alone, generic, the learnables used where
// they appear. The plan records each once (record/separate.hpp) and runs what factors on the score
// microkernels: the Gaussian kernel as |q|² - 2 q·k + |k|², the bilinear form and the weighted dot
// product as one product of derived features; the L1 distance does not factor and runs pair by
// pair on lanes. dsl/catalogue's hand-separated forms (gaussian, bilinear, weighted_dot,
// laplace_kernel) compute the same scores.
#include <xattn/learnable.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <tuple>
#include <vector>

namespace dsl {

// [snippet plain_scores]
/// -|q - k|² / (2σ²), d2l's Gaussian kernel, with a learnable width.
struct gaussian_score {
  xattn::learnable<> sigma = 1.0;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += (q[d] - k[d]) * (q[d] - k[d]);
    return -s / (T(2) * T(sigma) * T(sigma));
  }
  auto parameters() const { return std::tie(sigma); }
};

/// qᵀ W k with a learnable W of (dq, dk), row-major: queries and keys of different sizes.
struct bilinear_score {
  std::vector<xattn::learnable<>> w;
  std::size_t cols = 0;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t r = 0; r < q.size(); ++r)
      for (std::size_t c = 0; c < k.size(); ++c) s += q[r] * T(w[r * cols + c]) * k[c];
    return s;
  }
  auto parameters() const { return std::tie(w); }
};

/// Σ_d w_d q_d k_d / √D: a learnable weight per feature.
struct weighted_dot_score {
  std::vector<xattn::learnable<>> w;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += T(w[d]) * q[d] * k[d];
    return s / T(std::sqrt(double(q.size())));
  }
  auto parameters() const { return std::tie(w); }
};

/// -|q - k|₁ / bandwidth: a Laplace kernel (the L1 distance does not factor).
struct laplace_score {
  xattn::learnable<> bandwidth = 1.0;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs;
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += abs(q[d] - k[d]);
    return -s / T(bandwidth);
  }
  auto parameters() const { return std::tie(bandwidth); }
};
// [end plain_scores]

}  // namespace dsl
