#pragma once
// predicate(f): a user mask from any callable f(b, h, i, j) -> bool (true = visible), like
// FlexAttention's mask_mod. Optionally with a block classifier to let the kernel skip blocks.
#include "../problem.hpp"

#include <cstddef>
#include <utility>

namespace xattn {

template <class F>
struct predicate_mask {
  F f;
  bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const { return bool(f(b, h, i, j)); }
};

template <class F>
predicate_mask<std::decay_t<F>> predicate(F&& f) {
  return {std::forward<F>(f)};
}

}  // namespace xattn
