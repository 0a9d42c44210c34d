#pragma once
// A user scoring policy on the pair-with-features path: Laplace-kernel scores
// -|q - k|₁ / bandwidth (Nadaraya-Watson regression with a Laplacian kernel). It is not a dot
// product of features, so it declares projections (q / bandwidth and k / bandwidth, once per row)
// and combine(fq, fk), the only work done per (query, key) pair. operator() is the definition,
// used by the reference evaluator. All three are generic: grad() differentiates them, and the
// learnable bandwidth with them.
#include <xattn/error.hpp>
#include <xattn/learnable.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <tuple>

namespace dsl {

// [snippet laplace]
struct laplace_kernel {
  xattn::learnable<> bandwidth = 1.0;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs;  // generic: grad() differentiates it on xattn::var
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += abs(q[d] - k[d]);
    return -s / T(bandwidth);
  }
  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk) xattn::fail("laplace_kernel: queries have size ", dq, " but keys have size ", dk);
    if (!(bandwidth.value > 0)) xattn::fail("laplace_kernel: bandwidth must be > 0, got ", bandwidth.value);
  }
  auto parameters() const { return std::tie(bandwidth); }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> fq) const {
    for (std::size_t d = 0; d < q.size(); ++d) fq[d] = q[d] / T(bandwidth);
    return 0;  // per-query additive term
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> fk) const {
    return project_query(k, fk);  // per-key additive term 0
  }
  template <class T>
  T combine(std::span<const T> fq, std::span<const T> fk) const {
    using std::abs;
    T s = 0;
    for (std::size_t d = 0; d < fq.size(); ++d) s -= abs(fq[d] - fk[d]);
    return s;
  }
};
// [end laplace]

}  // namespace dsl
