#pragma once
// Bilinear ("general", Luong) scores qᵀ W k with W of shape (dq, dk). Separable: queries are
// projected once to Wᵀq, then it is a plain dot product with the keys.
#include "../dual.hpp"
#include "identity.hpp"
#include "matrix.hpp"

#include <xtensor/xtensor.hpp>

#include <span>
#include <tuple>

namespace xattn {

/// grad(e).dscore of a bilinear policy.
struct bilinear_gradients {
  xt::xtensor<double, 2> d_w;  // (dq, dk)

  auto parts() { return std::tie(d_w); }
};

struct bilinear {
  static constexpr bool separable = true;
  weights w;  // (dq, dk)
  using parameter_gradients = bilinear_gradients;

  template <class E>
  explicit bilinear(const E& m) : w(m) {}

  void validate(std::size_t dq, std::size_t dk) const {
    if (w.rows != dq || w.cols != dk)
      fail("bilinear{W}: W has shape (", w.rows, ",", w.cols, ") but queries have size ", dq, " and keys size ", dk,
           " (need W (", dq, ",", dk, "))");
  }
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using W = widened_t<T>;  // generic: runs on dual numbers
    W s = 0;
    for (std::size_t r = 0; r < w.rows; ++r)
      for (std::size_t c = 0; c < w.cols; ++c) s += W(q[r]) * w(r, c) * W(k[c]);
    return T(s);
  }
  std::size_t feature_size(std::size_t, std::size_t dk) const { return dk; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> out) const {
    w.apply_transposed(q.data(), out.data());
    return 0;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> out) const {
    return identity_projection(k, out);
  }

  // ---- analytic gradients (policy/gradient.hpp): fq = Wᵀ q, fk = k ----
  bilinear_gradients zero_gradients() const { return {xt::xtensor<double, 2>({w.rows, w.cols}, 0.0)}; }
  template <class T>
  void project_query_backward(std::span<const T> q, std::span<const T> dfq, T, std::span<T> dq,
                              bilinear_gradients& g) const {
    w.apply(dfq.data(), dq.data());
    for (std::size_t r = 0; r < w.rows; ++r)
      for (std::size_t c = 0; c < w.cols; ++c) g.d_w(r, c) += double(q[r]) * double(dfq[c]);
  }
  template <class T>
  void project_key_backward(std::span<const T>, std::span<const T> dfk, T, std::span<T> dk, bilinear_gradients&) const {
    std::copy(dfk.begin(), dfk.end(), dk.begin());
  }
};

}  // namespace xattn
