#pragma once
// Results come back in the form the lead terminal (Q, or the score tensor X) was handed in:
// (B, Sq, Dv), (B, H, Sq, Dv), or packed (B, Sq, H*Dv). Weights and scores are (B, Sq, Skv) or
// (B, H, Sq, Skv).
#include "../../form.hpp"
#include "../../kernel/huge_pages.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace xattn {

template <class T, std::size_t Rank>
using result_t = std::conditional_t<Rank == 0, xt::xarray<T>, xt::xtensor<T, Rank == 0 ? 1 : Rank>>;

/// A container R (xtensor or xarray) of the given shape, elements uninitialised (a large one
/// advised to use huge pages before anything touches it).
template <class R>
R allocate(const std::vector<std::size_t>& shape) {
  R r;
  if constexpr (std::is_same_v<R, xt::xarray<typename R::value_type>>) {
    r = R::from_shape(shape);
  } else {
    typename R::shape_type s{};
    std::copy(shape.begin(), shape.end(), s.begin());
    r = R::from_shape(s);
  }
  kernel::advise_huge_pages(r.data(), r.size() * sizeof(typename R::value_type));
  return r;
}

/// A result of type R for a (B, H, S, L) tensor in form f, and the kernel's view of it.
template <class R>
std::pair<R, layout<4>> allocate_in(form f, const std::array<std::size_t, 4>& shape) {
  formed fm = in_form(f, shape);
  return {allocate<R>(fm.user_shape), fm.at};
}

}  // namespace xattn
