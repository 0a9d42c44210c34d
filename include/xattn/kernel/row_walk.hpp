#pragma once
// Walking a row accessor in key order: rows that name the extent of their page (a cache's:
// same_page, next) are stepped through it, a page lookup per page rather than per key.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <utility>

namespace xattn::kernel {

/// Whether rows v can be stepped through a page: v.same_page(j) keys from j share j's page, and
/// v.next(row) is the row after row on it.
template <class Rows>
concept paged_walk = requires(const Rows& v) {
  { v.next(v(0)) } -> std::same_as<decltype(v(0))>;
  v.same_page(0);
};

/// f(j, v(j)) for j in [j0, end), in order.
template <class Rows, class F>
[[gnu::always_inline]] inline void for_each_row(const Rows& v, std::size_t j0, std::size_t end, F&& f) {
  if constexpr (paged_walk<Rows>) {
    for (std::size_t j = j0; j < end;) {
      auto row = v(j);
      for (const std::size_t stop = std::min(end, j + v.same_page(j));;) {
        f(j, row);
        if (++j == stop) break;
        row = v.next(row);
      }
    }
  } else {
    for (std::size_t j = j0; j < end; ++j) f(j, v(j));
  }
}

/// The rows of v from j on, one after the other: next() is v(j), then v(j + 1), ..., stepped
/// through each page where v can be (a page lookup per page, not per key).
template <class Rows>
struct row_cursor {
  const Rows& v;
  std::size_t j = 0;
  std::size_t left = 0;  // rows after `row` on its page
  decltype(std::declval<const Rows&>()(0)) row{};

  [[gnu::always_inline]] auto next() noexcept {
    if constexpr (paged_walk<Rows>) {
      if (left == 0) {
        row = v(j);
        left = v.same_page(j);
      } else {
        row = v.next(row);
      }
      --left;
      ++j;
      return row;
    } else {
      return v(j++);
    }
  }
};

}  // namespace xattn::kernel
