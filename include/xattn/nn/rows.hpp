#pragma once
// A module input seen as `batch * seq` rows of `width` numbers, the form GEMM reads. Row-major
// containers (and views with unit inner stride and evenly spaced rows) are read in place; any
// other expression is evaluated once into owned storage.
#include "../error.hpp"
#include "../expr/base.hpp"

#include <xtensor/xtensor.hpp>
#include <xtensor/xutils.hpp>

#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

namespace xattn::nn {

template <class T>
struct row_block {
  const T* data = nullptr;
  std::size_t batch = 1, seq = 0, width = 0, ld = 0;  // row r of the flat (batch * seq) rows at data + r * ld
  std::vector<std::size_t> user_shape;                // as handed in, for error messages
  xt::xtensor<T, 3> owned;

  std::size_t rows() const noexcept { return batch * seq; }
};

namespace detail {

/// Can the rows of x be addressed as data + r * ld with unit stride inside a row?
template <class E>
bool flat_rows(const E& x, std::size_t& ld) {
  const auto& sh = x.shape();
  const auto& st = x.strides();
  const std::size_t r = sh.size();
  if (sh[r - 1] > 1 && st[r - 1] != 1) return false;
  const auto row = std::ptrdiff_t(sh[r - 2] > 1 ? st[r - 2] : std::ptrdiff_t(sh[r - 1]));
  if (row < std::ptrdiff_t(sh[r - 1])) return false;
  if (r == 3 && sh[0] > 1 && st[0] != row * std::ptrdiff_t(sh[1])) return false;
  ld = std::size_t(row);
  return true;
}

}  // namespace detail

/// rows_of for an xtensor expression.
template <class T, class E>
row_block<T> rows_of_tensor(const E& x, const char* what) {
  using D = std::decay_t<E>;
  row_block<T> b;
  b.user_shape.assign(x.shape().begin(), x.shape().end());
  const std::size_t r = b.user_shape.size();
  if (r != 2 && r != 3)
    xattn::fail(what, ": expected rank 2 (seq, size) or 3 (batch, seq, size), got shape ",
                xattn::shape_str(b.user_shape));
  b.batch = r == 3 ? b.user_shape[0] : 1;
  b.seq = b.user_shape[r - 2];
  b.width = b.user_shape[r - 1];
  if constexpr (xt::has_data_interface<D>::value && std::is_same_v<std::remove_cv_t<typename D::value_type>, T>) {
    if (detail::flat_rows(x, b.ld)) {
      b.data = x.data() + x.data_offset();
      return b;
    }
  }
  b.owned = xt::xtensor<T, 3>::from_shape({b.batch, b.seq, b.width});
  auto it = b.owned.begin();
  for (auto v : x) *it++ = T(v);  // row-major traversal of any expression
  b.data = b.owned.data();
  b.ld = b.width;
  return b;
}

/// View x, of rank 2 (seq, width) or 3 (batch, seq, width), as rows; `what` names the argument.
template <class T, class E>
row_block<T> rows_of(const E& x, const char* what) {
  // The modules project their inputs themselves, so rope(...) or heads(...) of an input would act
  // before the projections: the rotated layer is dsl::decoder_attention, or an expression.
  static_assert(!xattn::expression<E>,
                "xattn::nn: module inputs are tensors of rows, (seq, size) or (batch, seq, size), not attention "
                "expressions such as rope(...) or heads(...); for rotary embeddings or sinks after the projections "
                "use dsl::decoder_attention (dsl/modules/decoder_attention.hpp) or write the expression");
  if constexpr (!xattn::expression<E>)
    return rows_of_tensor<T>(x, what);
  else
    return {};
}

}  // namespace xattn::nn
