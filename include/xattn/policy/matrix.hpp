#pragma once
// Small dense weights owned by scoring policies (kept in double: projections run once per row, so
// the extra precision is free and the reference evaluator sees the same numbers).
#include "../error.hpp"

#include <cstddef>
#include <vector>

namespace xattn {

struct weights {
  std::size_t rows = 0, cols = 0;
  std::vector<double> v;   // row-major (rows, cols)
  std::vector<double> vt;  // the transpose, row-major (cols, rows): apply() reads it contiguously

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
    vt.resize(v.size());
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) vt[c * rows + r] = v[r * cols + c];
  }
  double operator()(std::size_t r, std::size_t c) const noexcept { return v[r * cols + c]; }

  /// out = W x (x of size cols). Summed as Σ_c x[c]·W[:, c]: every step is a vector update (a
  /// dot product per row would be a chain of dependent additions).
  template <class In, class Out>
  void apply(const In* x, Out* out) const {
    axpy_sum(vt.data(), cols, rows, x, out);
  }
  /// out = Wᵀ x (x of size rows).
  template <class In, class Out>
  void apply_transposed(const In* x, Out* out) const {
    axpy_sum(v.data(), rows, cols, x, out);
  }

 private:
  /// out[k] = Σ_n x[n]·m[n·len + k] for k < len (m has n_count rows of len).
  template <class In, class Out>
  static void axpy_sum(const double* m, std::size_t n_count, std::size_t len, const In* x, Out* out) {
    thread_local std::vector<double> acc;
    acc.assign(len, 0.0);
    double* a = acc.data();
    for (std::size_t n = 0; n < n_count; ++n) {
      const double xn = double(x[n]);
      const double* row = m + n * len;
      for (std::size_t k = 0; k < len; ++k) a[k] += row[k] * xn;
    }
    for (std::size_t k = 0; k < len; ++k) out[k] = Out(a[k]);
  }
};

}  // namespace xattn
