#pragma once
// Small dense weights owned by scoring policies (kept in double: projections run once per row, so
// the extra precision is free and the reference evaluator sees the same numbers).
#include "../error.hpp"

#include <cstddef>
#include <vector>

namespace xattn {

struct weights {
  std::size_t rows = 0, cols = 0;
  std::vector<double> v;

  weights() = default;
  template <class E>
  explicit weights(const E& m) {
    if (m.dimension() == 1) {
      rows = 1;
      cols = m.shape()[0];
    } else if (m.dimension() == 2) {
      rows = m.shape()[0];
      cols = m.shape()[1];
    } else {
      fail("weights: expected a vector or a matrix, got shape ", shape_str(m.shape()));
    }
    for (auto x : m) v.push_back(double(x));
  }
  double operator()(std::size_t r, std::size_t c) const noexcept { return v[r * cols + c]; }

  /// out = W x (x of size cols).
  template <class In, class Out>
  void apply(const In* x, Out* out) const noexcept {
    for (std::size_t r = 0; r < rows; ++r) {
      double s = 0;
      for (std::size_t c = 0; c < cols; ++c) s += v[r * cols + c] * double(x[c]);
      out[r] = Out(s);
    }
  }
  /// out = Wᵀ x (x of size rows).
  template <class In, class Out>
  void apply_transposed(const In* x, Out* out) const noexcept {
    for (std::size_t c = 0; c < cols; ++c) {
      double s = 0;
      for (std::size_t r = 0; r < rows; ++r) s += v[r * cols + c] * double(x[r]);
      out[c] = Out(s);
    }
  }
};

}  // namespace xattn
