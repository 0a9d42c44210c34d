#pragma once
// A user score modifier: a learned bias per query head and clipped relative position (Shaw et
// al. 2018; T5's buckets refine the clipping), FlexAttention's relative-position score_mod:
//   s -> s + table[h, clamp(j - i, -R, R) + R].
// operator() is the definition (the reference evaluator's, and the kernel's fallback), apply_row()
// is what the fused kernel calls on each row of a score tile, backward_row() its backward of a row
// (used when it is the only modifier; else operator() is differentiated), bind() checks the table.
// The table is learnable: parameters() lists it, and grad() returns its gradient in g.dmodify[0].
#include <xattn/error.hpp>
#include <xattn/learnable.hpp>
#include <xattn/policy/problem.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace dsl {

// [snippet relative_bias]
struct relative_bias {
  std::vector<xattn::learnable<>> table;  // (heads, 2 * radius + 1), row-major
  std::int64_t radius = 0;

  template <class U>
  U operator()(U s, std::size_t, std::size_t h, std::size_t i, std::size_t j) const {
    return s + U(table[h * width() + bucket(i, j)]);
  }
  template <class T>
  void apply_row(T* s, std::size_t n, std::size_t, std::size_t h, std::size_t i, std::size_t j0) const {
    const auto* row = table.data() + h * width();  // s[c] is the score of key j0 + c
    for (std::size_t c = 0; c < n; ++c) s[c] += T(row[bucket(i, j0 + c)]);
  }
  template <class T>  // its own backward: d(s + entry)/ds = 1, so g stays, and the entry read gets g
  void backward_row(const T*, T* g, std::size_t n, std::size_t, std::size_t h, std::size_t i, std::size_t j0,
                    T* dp) const {
    for (std::size_t c = 0; c < n; ++c)
      if (g[c] != T(0)) dp[h * width() + bucket(i, j0 + c)] += g[c];
  }
  relative_bias bind(const xattn::problem& pr) const {
    if (radius < 0 || table.size() != pr.q_heads * width())
      xattn::fail("relative_bias: table has ", table.size(), " entries, need ", pr.q_heads, " heads x ", width());
    return *this;
  }
  auto parameters() const { return std::tie(table); }

  std::size_t width() const { return std::size_t(2 * radius + 1); }
  std::size_t bucket(std::size_t i, std::size_t j) const {
    return std::size_t(std::clamp(std::int64_t(j) - std::int64_t(i), -radius, radius) + radius);
  }
};
// [end relative_bias]

}  // namespace dsl
