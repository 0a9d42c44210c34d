#pragma once
// d2l's exercise: "is vector summation a better design than dot product?" score(q, k) = Σ_d (q_d + k_d).
// Written as a separable policy with zero-width features: Σq is a per-query term and Σk a per-key
// term, so the kernel never touches pairs -- and the softmax over keys cannot depend on the query,
// which is the exercise's answer.
#include <xattn/error.hpp>

#include <cstddef>
#include <span>

namespace dsl {

// [snippet vector_sum]
struct vector_sum {
  static constexpr bool separable = true;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += q[d] + k[d];
    return s;
  }
  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk) xattn::fail("vector_sum: queries have size ", dq, " but keys have size ", dk);
  }
  std::size_t feature_size(std::size_t, std::size_t) const { return 0; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T>) const {
    T s = 0;
    for (auto x : q) s += x;
    return s;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T>) const {
    return project_query(k, {});
  }
};
// [end vector_sum]

}  // namespace dsl
