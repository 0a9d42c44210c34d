#pragma once
// transformed(X, t): a terminal whose rows the score path turns by a load transform t
// (policy/transforms/transform.hpp) as it loads queries and packs keys. rope(X, ...) is one.
#include "../policy/transforms/transform.hpp"
#include "tensor_ref.hpp"

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace xattn {

/// The operand as ref() sees it, and its transform.
template <class T, std::size_t Rank, bool Packed, class Tr>
struct transformed_ref : expr_base<transformed_ref<T, Rank, Packed, Tr>> {
  using value_type = T;
  using transform_type = Tr;
  static constexpr std::size_t rank = Rank;
  static constexpr bool packed = Packed;

  strided_view<const T> view;
  form how = form::bhsd;
  std::shared_ptr<const void> owned;
  Tr transform;

  std::vector<std::size_t> user_shape() const { return in_form(how, view.at.shape).user_shape; }
};

template <class E>
inline constexpr bool is_transformed_v = false;
template <class T, std::size_t R, bool P, class Tr>
inline constexpr bool is_transformed_v<transformed_ref<T, R, P, Tr>> = true;

/// transformed(X, t): X = ref(...) or heads(...) as Q or K of Q * trans(K); t a load transform.
template <class T, std::size_t R, bool P, class Tr>
auto transformed(const tensor_ref<T, R, P>& x, Tr t) {
  static_assert(load_transform<Tr>,
                "xattn: transformed(X, t): t must be a load transform, a type with check(batch, seq, d, who), "
                "row(x, xs, n, b, i, c, out), row_transposed(g, gs, n, b, i) and name() "
                "(policy/transforms/transform.hpp)");
  return transformed_ref<T, R, P, Tr>{{}, x.view, x.how, x.owned, std::move(t)};
}

}  // namespace xattn
