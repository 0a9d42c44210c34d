#pragma once
// Dot-product scores q·k, and scaled dot product q·k / sqrt(d) (Vaswani et al.). Q * trans(K) in
// an expression is planned as `dot`. Both are separable; `dot`'s projections are the identity, so
// its path reads the keys themselves (no projection pass).
#include "../error.hpp"
#include "identity.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

namespace xattn {

struct dot {
  static constexpr bool separable = true;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += q[d] * k[d];
    return s;
  }
  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk) fail("dot product scores: queries have size ", dq, " but keys have size ", dk);
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> out) const {
    return identity_projection(q, out);
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> out) const {
    return identity_projection(k, out);
  }
};

struct scaled_dot {
  static constexpr bool separable = true;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;  // unqualified: runs on xattn::dual too (the reference's gradients)
    return dot{}(q, k) / sqrt(T(q.size()));
  }
  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk) fail("scaled_dot scores: queries have size ", dq, " but keys have size ", dk);
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> out) const {
    const T c = T(1) / std::sqrt(T(q.size()));
    for (std::size_t d = 0; d < q.size(); ++d) out[d] = q[d] * c;
    return 0;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> out) const {
    return identity_projection(k, out);
  }
  // analytic gradients (policy/gradient.hpp): fq = q/√d, fk = k
  template <class T, class G>
  void project_query_backward(std::span<const T> q, std::span<const T> dfq, T, std::span<T> dq, G&) const {
    const T c = T(1) / std::sqrt(T(q.size()));
    for (std::size_t d = 0; d < q.size(); ++d) dq[d] = dfq[d] * c;
  }
  template <class T, class G>
  void project_key_backward(std::span<const T>, std::span<const T> dfk, T, std::span<T> dk, G&) const {
    std::copy(dfk.begin(), dfk.end(), dk.begin());
  }
};

}  // namespace xattn
