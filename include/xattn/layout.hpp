#pragma once
// One value for "where is element (i0, ..., iN-1)": a shape and element strides, as CuTe's Layout.
// Terminals, broadcast tensors, log-sum-exp targets, key features and key panels are all a pointer
// plus a layout; no index arithmetic is written anywhere else.
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace xattn {

template <std::size_t N>
struct layout {
  std::array<std::size_t, N> shape{};
  std::array<std::ptrdiff_t, N> stride{};  // in elements; 0 on a broadcast axis

  /// Offset of element (i...), in elements.
  template <class... I>
  requires(sizeof...(I) == N) constexpr std::ptrdiff_t operator()(I... i) const noexcept {
    std::ptrdiff_t o = 0;
    std::size_t a = 0;
    ((o += std::ptrdiff_t(i) * stride[a++]), ...);
    return o;
  }

  constexpr std::size_t size() const noexcept {
    std::size_t n = 1;
    for (std::size_t s : shape) n *= s;
    return n;
  }

  /// Dense, last axis fastest.
  static constexpr layout row_major(const std::array<std::size_t, N>& shape) noexcept {
    layout l{shape, {}};
    std::ptrdiff_t s = 1;
    for (std::size_t a = N; a-- > 0;) {
      l.stride[a] = s;
      s *= std::ptrdiff_t(shape[a]);
    }
    return l;
  }

  /// Lowest and highest offset any element reaches (an empty layout reaches none: {0, -1}).
  constexpr std::pair<std::ptrdiff_t, std::ptrdiff_t> reach() const noexcept {
    std::ptrdiff_t lo = 0, hi = 0;
    for (std::size_t a = 0; a < N; ++a) {
      if (shape[a] == 0) return {0, -1};
      const std::ptrdiff_t span = std::ptrdiff_t(shape[a] - 1) * stride[a];
      (span < 0 ? lo : hi) += span;
    }
    return {lo, hi};
  }

  /// Whether distinct indices always reach distinct elements (sufficient test: sorted by stride,
  /// each axis steps over everything the faster axes reach; an empty layout has no elements to
  /// share an address, whatever its strides, as torch gives an empty tensor). Outputs must be unique.
  constexpr bool unique() const noexcept {
    for (std::size_t a = 0; a < N; ++a)
      if (shape[a] == 0) return true;
    std::array<std::size_t, N> order{};
    for (std::size_t a = 0; a < N; ++a) order[a] = a;
    auto mag = [&](std::size_t a) { return stride[a] < 0 ? -stride[a] : stride[a]; };
    for (std::size_t a = 1; a < N; ++a)  // insertion sort by |stride|
      for (std::size_t b = a; b > 0 && mag(order[b]) < mag(order[b - 1]); --b) std::swap(order[b], order[b - 1]);
    std::ptrdiff_t covered = 0;  // extent the faster axes span
    for (std::size_t a : order) {
      if (shape[a] <= 1) continue;
      if (mag(a) <= covered) return false;
      covered += mag(a) * std::ptrdiff_t(shape[a] - 1);
    }
    return true;
  }
};

/// Memory seen through a layout: data[at(i...)].
template <class T, std::size_t N = 4>
struct strided_view {
  T* data = nullptr;
  layout<N> at;

  template <class... I>
  T& operator()(I... i) const noexcept {
    return data[at(i...)];
  }
  /// First element of the innermost row at (i..., 0).
  template <class... I>
  requires(sizeof...(I) == N - 1) T* row(I... i) const noexcept { return data + at(i..., 0); }
  std::ptrdiff_t inner_stride() const noexcept { return at.stride[N - 1]; }
  bool rows_contiguous() const noexcept { return at.stride[N - 1] == 1 || at.shape[N - 1] <= 1; }

  /// Whether the bytes [lo, hi) intersect the elements this view reaches.
  bool overlaps(const void* lo, const void* hi) const noexcept {
    const auto [first, last] = at.reach();
    if (last < first) return false;
    const auto* a = reinterpret_cast<const unsigned char*>(data + first);
    const auto* b = reinterpret_cast<const unsigned char*>(data + last + 1);
    return a < static_cast<const unsigned char*>(hi) && static_cast<const unsigned char*>(lo) < b;
  }
};

}  // namespace xattn
