#pragma once
// Bilinear ("general", Luong) scores qᵀ W k with W of shape (dq, dk). Separable: queries are
// projected once to Wᵀq, then it is a plain dot product with the keys.
#include "identity.hpp"
#include "matrix.hpp"

#include <span>

namespace xattn {

struct bilinear {
  static constexpr bool separable = true;
  weights w;  // (dq, dk)

  template <class E>
  explicit bilinear(const E& m) : w(m) {}

  void validate(std::size_t dq, std::size_t dk) const {
    if (w.rows != dq || w.cols != dk)
      fail("bilinear{W}: W has shape (", w.rows, ",", w.cols, ") but queries have size ", dq, " and keys size ", dk,
           " (need W (", dq, ",", dk, "))");
  }
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    double s = 0;
    for (std::size_t r = 0; r < w.rows; ++r)
      for (std::size_t c = 0; c < w.cols; ++c) s += double(q[r]) * w(r, c) * double(k[c]);
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
};

}  // namespace xattn
