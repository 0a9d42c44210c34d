#pragma once
// A tensor of rank <= 4 (mask, bias, lengths...) broadcast NumPy-style, right-aligned, against the
// score matrix (B, Sq, Skv) or (B, H, Sq, Skv): a (B, H, Sq, Skv) view whose broadcast axes have
// stride 0, so reads are O(1). The nd_ref keeps any owned storage alive.
#include "../error.hpp"
#include "../layout.hpp"
#include "problem.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xutils.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace xattn {

/// Any-rank view of caller memory (or owned storage when given a temporary).
template <class T>
struct nd_ref {
  const T* data = nullptr;
  std::vector<std::size_t> shape;
  std::vector<std::ptrdiff_t> strides;
  std::shared_ptr<const void> owned;
};

template <class T, class E>
nd_ref<T> make_nd_ref(E&& x) {
  using D = std::decay_t<E>;
  nd_ref<T> r;
  auto fill = [&r](const auto& a) {
    r.data = a.data() + a.data_offset();
    r.shape.assign(a.shape().begin(), a.shape().end());
    r.strides.assign(a.strides().begin(), a.strides().end());
  };
  if constexpr (xt::has_data_interface<D>::value && std::is_lvalue_reference_v<E> &&
                std::is_same_v<std::remove_cv_t<typename D::value_type>, T>) {
    fill(x);
  } else {
    auto own = std::make_shared<xt::xarray<T>>(std::forward<E>(x));
    fill(*own);
    r.owned = own;
  }
  return r;
}

/// Broadcast `t` against the scores of `pr`; `what` names the argument in the error.
template <class T>
strided_view<const T> broadcast_to_scores(const nd_ref<T>& t, const problem& pr, const char* what) {
  const auto target = pr.score_shape();
  const std::size_t r = t.shape.size();
  auto bad = [&] {
    fail(what, ": shape ", shape_str(t.shape), " does not broadcast to the scores ", shape_str(target),
         " (right-aligned: each axis must match or be 1)");
  };
  if (r == 0 || r > target.size()) bad();
  // target axis a (of target.size()) maps to tensor axis a - (target.size() - r)
  std::array<std::ptrdiff_t, 4> st{};
  const std::size_t off = target.size() - r;
  for (std::size_t a = 0; a < target.size(); ++a) {
    std::ptrdiff_t s = 0;
    if (a >= off) {
      const std::size_t n = t.shape[a - off];
      if (n == target[a])
        s = n == 1 ? 0 : t.strides[a - off];
      else if (n != 1)
        bad();
    }
    // rank-3 scores (B, Sq, Skv) have no head axis: the 4-D head stride stays 0
    const std::size_t axis4 = target.size() == 3 ? (a == 0 ? 0 : a + 1) : a;
    st[axis4] = s;
  }
  return {t.data, {{pr.batch, pr.q_heads, pr.q_len, pr.kv_len}, st}};
}

}  // namespace xattn
