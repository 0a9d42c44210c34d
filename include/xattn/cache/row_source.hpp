#pragma once
// The rows handed to kv_cache::append, (heads, n, dim), seen as a strided view of any element
// type: xtensor containers and views in place, other expressions evaluated once, and ref(ptr,
// shape, strides) of one batch.
#include "../error.hpp"
#include "../expr/tensor_ref.hpp"
#include "../layout.hpp"
#include "../types.hpp"

#include <xtensor/xarray.hpp>

#include <memory>
#include <type_traits>

namespace xattn::detail {

template <class T>
struct row_source {
  strided_view<const T, 3> view;
  std::shared_ptr<const void> owned;  // an evaluated expression, when it had no data to view
};

template <class E>
auto rows_to_append(const E& x, const char* what) {
  if constexpr (is_terminal_v<E>) {
    using T = typename E::value_type;
    const auto& at = x.view.at;
    if (x.how != form::bhsd)
      fail(what, ": a ref() of shape ", shape_str(x.user_shape()),
           "; append takes (kv_heads, n, head_dim) tensors or ref(ptr, {1, kv_heads, n, head_dim}, strides)");
    if (at.shape[0] != 1)
      fail(what, ": a ref() of ", at.shape[0], " batches; append takes (kv_heads, n, head_dim) rows of one sequence");
    return row_source<T>{
        {x.view.data, {{at.shape[1], at.shape[2], at.shape[3]}, {at.stride[1], at.stride[2], at.stride[3]}}}, x.owned};
  } else {
    static_assert(xt::is_xexpression<E>::value,
                  "xattn: kv_cache::append takes (kv_heads, n, head_dim) xtensor tensors or ref(ptr, shape, strides)");
    using T = std::remove_cv_t<typename E::value_type>;
    static_assert(is_element_v<T>, "xattn: kv_cache::append takes float, double, bfloat16 or float16 rows");
    if (x.dimension() != 3) fail(what, ": expected rank 3 (kv_heads, n, head_dim), got shape ", shape_str(x.shape()));
    row_source<T> s;
    const auto view_of_data = [&](const auto& t) {
      const auto& sh = t.shape();
      const auto& st = t.strides();
      s.view = {t.data() + t.data_offset(),
                {{sh[0], sh[1], sh[2]}, {std::ptrdiff_t(st[0]), std::ptrdiff_t(st[1]), std::ptrdiff_t(st[2])}}};
    };
    if constexpr (xt::has_data_interface<E>::value) {
      view_of_data(x);
    } else {
      auto own = std::make_shared<xt::xarray<T>>(x);
      view_of_data(*own);
      s.owned = own;
    }
    return s;
  }
}

}  // namespace xattn::detail
