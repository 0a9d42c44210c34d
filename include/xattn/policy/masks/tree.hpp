#pragma once
// tree_mask(parents): speculative decoding's draft tree (Medusa, EAGLE, SpecInfer). The newest n
// keys of each batch row are the tree's tokens and the n queries are the same tokens; parents[t] is
// token t's parent among them (-1: the last accepted token, the prefix's end), earlier in the list
// (parents[t] < t, the breadth-first order drafters emit). Query t sees the whole prefix, its
// ancestors and itself. parents is (n), shared by the batch, or (B, n). Over a cache's sequences
// each batch row's prefix ends at its own sequence's length, as bottom_right alignment does.
#include "../../error.hpp"
#include "../problem.hpp"
#include "fill.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace xattn {

struct draft_tree_mask {
  std::vector<std::int64_t> parents;  // (n) or (B, n)
  std::vector<std::size_t> shape;

  // set by bind: each batch row's first tree key, and whether tree token t sees token u (n x n per
  // row of parents)
  std::size_t n = 0;
  std::vector<std::int64_t> base;  // (B)
  std::vector<unsigned char> sees;

  bool visible(std::size_t b, std::size_t, std::size_t i, std::size_t j) const noexcept {
    const std::int64_t t = std::int64_t(j) - base[b];
    return t < 0 || (t <= std::int64_t(i) && sees[row(b) + i * n + std::size_t(t)]);
  }

  /// Ancestors come earlier in the list: row i sees no key past its own token.
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t, std::size_t i) const noexcept {
    return {0, base[b] + std::int64_t(i) + 1};
  }

  block classify(std::size_t b, std::size_t, std::size_t, std::size_t i1, std::size_t j0, std::size_t j1) const {
    if (std::int64_t(j1) <= base[b]) return block::visible;                       // the prefix only
    if (std::int64_t(j0) > base[b] + std::int64_t(i1) - 1) return block::hidden;  // past every row's token
    return block::partial;
  }

  template <class T>
  void hide_row(T* s, std::size_t count, std::size_t b, std::size_t h, std::size_t i, std::size_t j0, T value) const {
    for (std::size_t c = 0; c < count; ++c)
      if (!visible(b, h, i, j0 + c)) s[c] = value;
  }

  draft_tree_mask bind(const problem& pr) const {
    const std::size_t count = shape.back();  // the tree's tokens
    if (!((shape.size() == 1) || (shape.size() == 2 && shape[0] == pr.batch)))
      fail("tree_mask(parents): parents has shape ", shape_str(shape), " but must be (n) or (", pr.batch,
           ", n) for the scores ", shape_str(pr.score_shape()));
    if (count != pr.q_len)
      fail("tree_mask(parents): parents holds ", count, " tokens but there are ", pr.q_len,
           " queries: the queries are the tree's tokens");
    draft_tree_mask m = *this;
    m.n = count;
    m.base.resize(pr.batch);
    for (std::size_t b = 0; b < pr.batch; ++b) {
      const std::size_t len = pr.keys_of(b);
      if (len < count)
        fail("tree_mask(parents): batch row ", b, " has ", len, " keys, fewer than the tree's ", count, " tokens");
      m.base[b] = std::int64_t(len - count);
    }
    const std::size_t trees = shape.size() == 1 ? 1 : shape[0];
    m.sees.assign(trees * count * count, 0);
    for (std::size_t g = 0; g < trees; ++g)
      for (std::size_t t = 0; t < count; ++t) {
        const std::int64_t p = parents[g * count + t];
        if (p < -1 || p >= std::int64_t(t))
          fail("tree_mask(parents): parents[", shape.size() == 1 ? "" : std::to_string(g) + ", ", t, "] = ", p,
               "; a parent is -1 (the prefix) or an earlier token");
        unsigned char* mine = &m.sees[(g * count + t) * count];
        if (p >= 0) std::copy_n(&m.sees[(g * count + std::size_t(p)) * count], count, mine);
        mine[t] = 1;
      }
    return m;
  }

 private:
  std::size_t row(std::size_t b) const noexcept { return shape.size() == 1 ? 0 : b * n * n; }
};

/// The draft tree of the newest parents.size() tokens: parents (n) or (B, n), any integer type.
template <class E>
draft_tree_mask tree_mask(const E& parents) {
  static_assert(std::is_integral_v<typename E::value_type>, "xattn: tree_mask(parents) needs an integer tensor");
  draft_tree_mask m;
  m.shape.assign(parents.shape().begin(), parents.shape().end());
  if (m.shape.empty() || m.shape.size() > 2 || m.shape.back() == 0)
    fail("tree_mask(parents): parents must have rank 1 (n) or 2 (batch, n) with n > 0, got shape ", shape_str(m.shape));
  for (auto x : parents) m.parents.push_back(std::int64_t(x));
  return m;
}

}  // namespace xattn
