#pragma once
// ALiBi: adds -slope[h] * |pos(i) - j| to the score of query i and key j. Query positions are
// aligned to the end of the keys (pos(i) = i + Skv - Sq), so a decode step (Sq = 1) sits at the
// last key and square problems get the usual i - j; over a cache, each sequence's own end.
#include "../../error.hpp"
#include "../problem.hpp"

#include <cmath>
#include <cstddef>
#include <vector>

namespace xattn {

struct alibi_op {
  std::vector<double> slopes;          // one per query head
  std::ptrdiff_t shift = 0;            // Skv - Sq, set by bind
  std::vector<std::ptrdiff_t> shifts;  // per batch row, over a cache's sequences of different lengths

  template <class U>
  U operator()(U s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    const std::ptrdiff_t d = std::ptrdiff_t(i) + (shifts.empty() ? shift : shifts[b]) - std::ptrdiff_t(j);
    return s - U(slopes[h]) * U(d < 0 ? -d : d);
  }

  alibi_op bind(const problem& pr) const {
    if (slopes.size() != pr.q_heads)
      fail("alibi(scores, slopes): slopes has ", slopes.size(), " entries but there are ", pr.q_heads, " query heads");
    for (double s : slopes)
      if (!std::isfinite(s)) fail("alibi(scores, slopes): slopes must be finite, got ", s);
    alibi_op b = *this;
    b.shift = pr.bottom_right_shift(0);
    if (!pr.kv_lens.empty())
      for (std::size_t n = 0; n < pr.batch; ++n) b.shifts.push_back(pr.bottom_right_shift(n));
    return b;
  }

  /// The geometric slopes of the ALiBi paper: 2^(-8 k / H) for k = 1..H.
  static std::vector<double> standard_slopes(std::size_t num_heads) {
    std::vector<double> s(num_heads);
    for (std::size_t k = 0; k < num_heads; ++k) s[k] = std::exp2(-8.0 * double(k + 1) / double(num_heads));
    return s;
  }
};

}  // namespace xattn
