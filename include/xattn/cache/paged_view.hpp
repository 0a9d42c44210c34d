#pragma once
// A batch of a cache's sequences seen as (B, H, S, D) rows where they lie: row (b, h, j) is in page
// j / page_size of sequence b, at row j % page_size of head h's part of it. It answers the same
// questions a strided_view does (row, inner_stride, overlaps), so every score path packs or reads
// its rows unchanged. Pages past a sequence's end point at another stored page: rows there are
// never visible (the sequence lengths mask excludes them), only read when a key block is packed whole.
#include "../kernel/scaled_row.hpp"
#include "../layout.hpp"
#include "page_format.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace xattn {

/// Where key j is: page j / size, row j % size (a shift and a mask for powers of two).
struct page_index {
  std::size_t size = 1;
  unsigned shift = 0;
  bool pow2 = true;

  explicit page_index(std::size_t page_size = 1) noexcept
      : size(page_size), shift(unsigned(std::countr_zero(page_size))), pow2(std::has_single_bit(page_size)) {}
  std::pair<std::size_t, std::size_t> operator()(std::size_t j) const noexcept {
    if (pow2) return {j >> shift, j & (size - 1)};
    return {j / size, j % size};
  }
};

/// Where a page's rows of one head are (row_layout), and a quantized format's scales:
/// scales_offset bytes after the rows' start. Quantized rows are read through the format's row
/// handles (kernel::q8_pair_row for int8, kernel::packed_pair_row for q4, else kernel::scaled_row).
template <class T>
struct page_rows_at {
  static constexpr bool quantized = is_quantized_v<T>;
  row_layout layout;
  std::ptrdiff_t scales_offset = 0;

  /// Row r of the head part at `rows`: a pointer, or a quantized row's handle from column c on.
  auto row(const T* rows, std::size_t r, std::size_t c = 0) const noexcept {
    if constexpr (quantized) {
      using F = cache_format<T>;
      const T* q = rows + r * layout.row_step;
      const float* scale = reinterpret_cast<const float*>(reinterpret_cast<const char*>(rows) + scales_offset) +
                           r * layout.scale_row_step;
      if constexpr (requires { F::row(q, scale, c, layout); })
        return F::row(q, scale, c, layout);
      else
        return kernel::scaled_row<F>{q, scale, c};
    } else {
      return rows + (r * layout.row_step + c);
    }
  }
  /// The row after row r in the same page.
  const T* next(const T* r) const noexcept { return r + layout.row_step; }
  template <class R>
  requires(!std::is_pointer_v<R>) R next(const R& r)
  const noexcept { return r.step(layout.row_step, layout.scale_row_step); }
};

/// The value rows of one (sequence, head), from key j0 and column c0 on, for kernel::pv_tile_at.
template <class T>
struct paged_rows {
  using element = T;
  const T* const* pages;  // the sequence's pages (their head 0 rows)
  page_index idx;
  std::ptrdiff_t head_offset;  // elements from head 0's rows to this head's
  page_rows_at<T> in;
  std::size_t j0 = 0, c0 = 0;

  auto operator()(std::size_t j) const noexcept {
    const auto [p, r] = idx(j0 + j);
    return in.row(pages[p] + head_offset, r, c0);
  }
  /// Rows from j to the end of row j's page, and the row after a row of that page: kernels
  /// stepping through a page skip the page lookup of every key.
  std::size_t same_page(std::size_t j) const noexcept { return idx.size - idx(j0 + j).second; }
  template <class Row>
  Row next(const Row& r) const noexcept {
    return in.next(r);
  }
  paged_rows at(std::size_t j, std::size_t c) const noexcept {
    paged_rows r = *this;
    r.j0 += j;
    r.c0 += c;
    return r;
  }
};

template <class T>
struct paged_view {
  static constexpr bool paged = true;
  const T* data = nullptr;          // the first page's rows: the element type, and where the pages begin
  layout<4> at;                     // shape (B, H, S, D), S the longest sequence; stride[2] = D within a page
  const T* const* pages = nullptr;  // batch row b's pages at pages + b * per_row (head 0's rows)
  std::size_t per_row = 0;
  page_index idx;
  std::ptrdiff_t head_stride = 0;  // elements from one head's rows to the next one's in a page
  std::size_t page_elements = 0;   // elements of T a page spans (for overlap checks)
  page_rows_at<T> in;

  /// Row j of head h of batch row b: a pointer, or for quantized pages a row handle.
  auto row(std::size_t b, std::size_t h, std::size_t j) const noexcept {
    const auto [p, r] = idx(j);
    return in.row(pages[b * per_row + p] + std::ptrdiff_t(h) * head_stride, r);
  }
  paged_rows<T> rows(std::size_t b, std::size_t h) const noexcept {
    return {pages + b * per_row, idx, std::ptrdiff_t(h) * head_stride, in};
  }
  /// Element (b, h, j, d) (dequantized for quantized pages).
  decltype(auto) operator()(std::size_t b, std::size_t h, std::size_t j, std::size_t d) const noexcept {
    return row(b, h, j)[std::ptrdiff_t(d)];
  }
  std::ptrdiff_t inner_stride() const noexcept { return 1; }
  bool rows_contiguous() const noexcept { return true; }

  /// Whether the bytes [lo, hi) intersect any page this view reads.
  bool overlaps(const void* lo, const void* hi) const noexcept {
    const auto* a = static_cast<const unsigned char*>(lo);
    const auto* z = static_cast<const unsigned char*>(hi);
    for (std::size_t n = 0; n < at.shape[0] * per_row; ++n) {
      const auto* p = reinterpret_cast<const unsigned char*>(pages[n]);
      if (p < z && a < p + page_elements * sizeof(T)) return true;
    }
    return false;
  }
};

template <class V>
inline constexpr bool is_paged_view_v = false;
template <class T>
inline constexpr bool is_paged_view_v<paged_view<T>> = true;

}  // namespace xattn
