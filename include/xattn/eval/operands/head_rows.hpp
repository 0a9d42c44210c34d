#pragma once
// The rows of one head of a view as the tile operations read them: an accessor whose (j) points to
// row j. A tensor's rows are kernel::strided_rows, a named type, so the packing and products over
// them are compiled once per element type (kernel/instance_list.hpp) instead of in every program
// over each lambda; other views (a cache's pages) keep their own row function.
#include "../../kernel/blocking.hpp"
#include "../../kernel/prefetch_queue.hpp"
#include "../../layout.hpp"

#include <cstddef>
#include <type_traits>

namespace xattn {

template <class View>
inline constexpr bool is_strided_view_v = false;
template <class T, std::size_t N>
inline constexpr bool is_strided_view_v<strided_view<T, N>> = true;

/// Row j of head (b, h) of a view, as an accessor over j (a cache's pages: its paged_rows, held
/// by value, which also name each page's extent for the kernels that step through a page).
template <class View>
auto head_rows(const View& kv, std::size_t b, std::size_t h) {
  if constexpr (is_strided_view_v<View>)
    return kernel::strided_rows<std::remove_cvref_t<decltype(*kv.row(b, h, 0))>>{kv.row(b, h, 0), kv.at.stride[2]};
  else if constexpr (requires { kv.rows(b, h).at(0, 0); })
    return kv.rows(b, h);
  else
    return [&kv, b, h](std::size_t j) { return kv.row(b, h, j); };
}

/// The rows of an accessor from key j0 on: strided rows stay strided rows.
template <class Rows>
auto rows_from(const Rows& rows, std::size_t j0) {
  if constexpr (requires { rows.at(j0, j0); })
    return rows.at(j0, 0);
  else
    return [rows, j0](std::size_t c) { return rows(j0 + c); };
}

/// Rows [i0, i0 + rows) of head (b, h) of a view into the prefetch queue (write: they will be
/// written): contiguous rows of a tensor only; a cache's pages are prefetched as they are read.
template <class View>
void queue_head_rows(kernel::prefetch_queue& q, const View& v, std::size_t b, std::size_t h, std::size_t i0,
                     std::size_t rows, bool write) {
  if constexpr (is_strided_view_v<View>)
    if (v.data && v.rows_contiguous())
      q.add(v.row(b, h, i0), rows, v.at.shape[3] * sizeof(*v.data), v.at.stride[2] * std::ptrdiff_t(sizeof(*v.data)),
            write);
}

}  // namespace xattn
