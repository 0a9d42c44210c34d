#pragma once
// An additive score bias from a tensor broadcast against the scores (a float attention mask in
// ONNX / SDPA terms; -inf entries exclude keys).
#include "../broadcast.hpp"

#include <cstddef>

namespace xattn {

template <class T>
struct tensor_bias {
  nd_ref<T> tensor;
  strided_view<const T> bound{};

  template <class U>
  U operator()(U s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    return s + U(bound(b, h, i, j));
  }

  template <class V>
  void apply_row(V* s, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0) const {
    const std::ptrdiff_t st = bound.inner_stride();
    const T* p = bound.row(b, h, i) + std::ptrdiff_t(j0) * st;
    for (std::size_t j = 0; j < n; ++j) s[j] += V(p[std::ptrdiff_t(j) * st]);
  }

  tensor_bias bind(const problem& pr) const {
    tensor_bias b = *this;
    b.bound = broadcast_to_scores(tensor, pr, "bias(tensor)");
    return b;
  }
};

/// bias(t): wrap a tensor (rank <= 4, float or double) to add to scores: `scores + bias(t)`.
template <class E>
auto bias(E&& t) {
  using T = std::remove_cv_t<typename std::decay_t<E>::value_type>;
  static_assert(std::is_floating_point_v<T>, "xattn: bias(t) needs a float or double tensor");
  return tensor_bias<T>{make_nd_ref<T>(std::forward<E>(t))};
}

}  // namespace xattn
