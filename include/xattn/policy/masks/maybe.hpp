#pragma once
// A mask given or not at run time: the masks of a C or Python call, which may each be absent, as
// fixed places in the plan's mask list. An absent mask hides nothing and classifies every block
// visible, so the kernel composes the masks that are given as it composes any (eval/tiling/
// mask_eval.hpp), and an absent one costs a branch.
#include "../concepts.hpp"
#include "../problem.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

namespace xattn {

template <mask_policy M>
struct maybe_mask {
  std::optional<M> m;
  std::size_t kv_len = 0;  // set by bind: an absent mask's span

  bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const noexcept {
    return !m || m->visible(b, h, i, j);
  }

  block classify(std::size_t b, std::size_t h, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    if (!m) return block::visible;
    if constexpr (has_classify<M>)
      return m->classify(b, h, i0, i1, j0, j1);
    else
      return block::partial;
  }

  double fill() const requires has_fill<M> { return m ? double(m->fill()) : -std::numeric_limits<double>::infinity(); }

  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t h,
                                                 std::size_t i) const noexcept requires has_row_span<M> {
    if (m) return m->row_span(b, h, i);
    return {0, std::int64_t(kv_len)};
  }

  template <class T>
  void hide_row(T* s, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0,
                T value) const requires has_hide_row<M, T> {
    if (m) m->hide_row(s, n, b, h, i, j0, value);
  }

  maybe_mask bind(const problem& pr) const {
    maybe_mask r{std::nullopt, pr.kv_len};
    if (m) {
      if constexpr (requires { m->bind(pr); })
        r.m = m->bind(pr);
      else
        r.m = m;
    }
    return r;
  }
};

}  // namespace xattn
