#pragma once
// A user mask policy with every optional member: PrefixLM (T5, UL2). In batch b the first
// prefix[b] keys are visible to every query; after them the mask is causal (key j visible to
// query i iff j <= i). bind() checks the prefixes against the sizes of the evaluation, fill()
// lets the caller choose d2l's -1e6 instead of exclusion, classify() lets the kernel skip hidden
// blocks and run fully visible ones without mask code, and row_span() -- each row's visible keys
// are one interval -- lets it mask partial blocks by range fills.
#include <xattn/error.hpp>
#include <xattn/policy/problem.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dsl {

// [snippet prefix_lm]
struct prefix_lm_mask {
  std::vector<std::int64_t> prefix;                              // one length per batch
  double fill_value = -std::numeric_limits<double>::infinity();  // -inf: hidden keys are excluded

  bool visible(std::size_t b, std::size_t, std::size_t i, std::size_t j) const {
    return std::int64_t(j) < prefix[b] || j <= i;
  }
  xattn::block classify(std::size_t b, std::size_t, std::size_t i0, std::size_t i1, std::size_t j0,
                        std::size_t j1) const {  // the block is queries [i0, i1) x keys [j0, j1)
    if (std::int64_t(j1) <= prefix[b] || j1 - 1 <= i0) return xattn::block::visible;
    if (std::int64_t(j0) >= prefix[b] && j0 > i1 - 1) return xattn::block::hidden;
    return xattn::block::partial;
  }
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t, std::size_t i) const {
    return {0, std::max(prefix[b], std::int64_t(i) + 1)};  // the visible keys of row i: [first, last)
  }
  double fill() const { return fill_value; }
  prefix_lm_mask bind(const xattn::problem& pr) const {
    if (prefix.size() != pr.batch)
      xattn::fail("prefix_lm_mask: ", prefix.size(), " prefixes for a batch of ", pr.batch);
    for (auto p : prefix)
      if (p < 0 || std::size_t(p) > pr.kv_len)
        xattn::fail("prefix_lm_mask: prefix ", p, " outside [0, ", pr.kv_len, "]");
    return *this;
  }
};
// [end prefix_lm]

}  // namespace dsl
