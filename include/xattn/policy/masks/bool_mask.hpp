#pragma once
// bool_mask(m): a boolean tensor broadcast against the scores, true = attend (SDPA / ONNX bool mask).
#include "../broadcast.hpp"

#include <cstdint>
#include <limits>

namespace xattn {

template <class B>
struct bool_mask_policy {
  nd_ref<B> tensor;
  strided_view<const B> bound{};

  bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const noexcept {
    return bool(bound(b, h, i, j));
  }
  bool_mask_policy bind(const problem& pr) const {
    bool_mask_policy k = *this;
    k.bound = broadcast_to_scores(tensor, pr, "bool_mask(mask)");
    return k;
  }
};

template <class E>
auto bool_mask(E&& m) {
  using B = std::remove_cv_t<typename std::decay_t<E>::value_type>;
  static_assert(std::is_same_v<B, bool> || std::is_integral_v<B>, "xattn: bool_mask(mask) needs a bool tensor");
  return bool_mask_policy<B>{make_nd_ref<B>(std::forward<E>(m))};
}

}  // namespace xattn
