#pragma once
// The truth a mask's classify() is checked against: the block's kind, counted pair by pair.
#include <xattn/policy/problem.hpp>

#include <cstddef>

namespace xattn::testing {

/// hidden if no pair of [i0, i1) x [j0, j1) is visible, visible if all are, partial otherwise.
template <class M>
block classify_by_pairs(const M& m, std::size_t b, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) {
  std::size_t seen = 0;
  for (std::size_t i = i0; i < i1; ++i)
    for (std::size_t j = j0; j < j1; ++j) seen += m.visible(b, 0, i, j);
  return seen == 0 ? block::hidden : seen == (i1 - i0) * (j1 - j0) ? block::visible : block::partial;
}

}  // namespace xattn::testing
