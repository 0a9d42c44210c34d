#pragma once
// The caller's tensors in the accumulator type: read in place when they hold it, else copied (and
// turned by a rotary embedding when the call asks for one); results written in place or into a
// scratch rounded into the caller's dtype once the pass has succeeded.
#include "args.hpp"

#include <type_traits>
#include <vector>

namespace xattn::c_api::detail {

/// f(static_cast<E*>(data)) for the element type E that dtype names.
template <class F>
decltype(auto) with_element(xattn_dtype t, void* data, F&& f) {
  switch (t) {
    case XATTN_F64:
      return f(static_cast<double*>(data));
    case XATTN_BF16:
      return f(static_cast<bfloat16*>(data));
    case XATTN_F16:
      return f(static_cast<float16*>(data));
    default:
      return f(static_cast<float*>(data));
  }
}

/// f(row, cos, sin) for each row (b, h, s) of a (B, H, S, D) tensor with the angles of the row's
/// position under rotary embedding r.
template <class T, class F>
void for_each_turned_row(const rotary& r, T* data, const std::array<std::size_t, 4>& n,
                         const std::array<std::ptrdiff_t, 4>& st, F&& f) {
  const std::vector<float> inv = r.inverse_frequencies(n[3]);
  std::vector<float> cos(inv.size()), sin(inv.size());
  for (std::size_t b = 0; b < n[0]; ++b)
    for (std::size_t s = 0; s < n[2]; ++s) {
      kernel::rope_angles(r.position(b, s), inv.data(), inv.size(), cos.data(), sin.data());
      for (std::size_t h = 0; h < n[1]; ++h)
        f(data + std::ptrdiff_t(b) * st[0] + std::ptrdiff_t(h) * st[1] + std::ptrdiff_t(s) * st[2], cos.data(),
          sin.data());
    }
}

/// A (B, H, S, D) tensor of Acc: the caller's memory when it holds Acc and is not turned, else a
/// dense copy, turned by `turn` when given.
template <class Acc>
struct in_acc {
  std::vector<Acc> copy;
  raw_tensor<const Acc, 4> t;

  in_acc(const view4& v, xattn_dtype dtype, const std::optional<rotary>& turn = std::nullopt) {
    t.shape = v.shape;
    with_element(dtype, v.data, [&](auto* p) {
      using E = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
      if constexpr (std::is_same_v<E, Acc>)
        if (!turn) {
          t.data = p, t.strides = v.strides;
          return;
        }
      const auto& n = v.shape;
      copy.resize(n[0] * n[1] * n[2] * n[3]);
      std::size_t at = 0;
      for (std::size_t b = 0; b < n[0]; ++b)
        for (std::size_t h = 0; h < n[1]; ++h)
          for (std::size_t s = 0; s < n[2]; ++s)
            for (std::size_t d = 0; d < n[3]; ++d)
              copy[at++] = Acc(p[std::ptrdiff_t(b) * v.strides[0] + std::ptrdiff_t(h) * v.strides[1] +
                                 std::ptrdiff_t(s) * v.strides[2] + std::ptrdiff_t(d) * v.strides[3]]);
      t.data = copy.data();
      t.strides = {std::ptrdiff_t(n[1] * n[2] * n[3]), std::ptrdiff_t(n[2] * n[3]), std::ptrdiff_t(n[3]), 1};
      if (turn) {
        const std::size_t dims = turn->dims_for(n[3]);
        const rope_style style = turn->options.style;
        for_each_turned_row(*turn, copy.data(), n, t.strides, [&](Acc* row, const float* c, const float* s) {
          kernel::rope_row(row, 1, n[3], dims, style, c, s, Acc(1), row);
        });
      }
    });
  }
};

/// Where a result of shape `shape` is written: the caller's memory when it is wanted in Acc, else
/// a dense scratch, rounded into the caller's dtype by finish() (or dropped when not wanted).
template <class Acc>
struct out_acc {
  std::vector<Acc> scratch;
  raw_tensor<Acc, 4> t;
  const gradient_target& to;

  out_acc(const gradient_target& g, const std::array<std::size_t, 4>& shape) : to(g) {
    t.shape = shape;
    const bool direct = g.at.data != nullptr && (g.dtype == XATTN_F64) == std::is_same_v<Acc, double> &&
                        (g.dtype == XATTN_F32 || g.dtype == XATTN_F64);
    if (direct) {
      t.data = static_cast<Acc*>(g.at.data), t.strides = g.at.strides;
    } else {
      scratch.resize(shape[0] * shape[1] * shape[2] * shape[3]);
      t.data = scratch.data();
      t.strides = {std::ptrdiff_t(shape[1] * shape[2] * shape[3]), std::ptrdiff_t(shape[2] * shape[3]),
                   std::ptrdiff_t(shape[3]), 1};
    }
  }

  /// The gradient at turned rows taken back to the rows themselves (the transposed rotation).
  void turn_back(const std::optional<rotary>& turn) {
    if (!turn || to.at.data == nullptr) return;
    const std::size_t dims = turn->dims_for(t.shape[3]);
    const rope_style style = turn->options.style;
    const std::ptrdiff_t gs = t.strides[3];
    for_each_turned_row(*turn, t.data, t.shape, t.strides, [&](Acc* row, const float* c, const float* s) {
      kernel::rope_row_transposed(row, gs, dims, style, c, s);
    });
  }

  void finish() const {
    if (to.at.data == nullptr || t.data != scratch.data()) return;
    with_element(to.dtype, to.at.data, [&](auto* p) {
      using E = std::remove_pointer_t<decltype(p)>;
      const auto& n = t.shape;
      std::size_t at = 0;
      for (std::size_t b = 0; b < n[0]; ++b)
        for (std::size_t h = 0; h < n[1]; ++h)
          for (std::size_t s = 0; s < n[2]; ++s)
            for (std::size_t d = 0; d < n[3]; ++d)
              p[std::ptrdiff_t(b) * to.at.strides[0] + std::ptrdiff_t(h) * to.at.strides[1] +
                std::ptrdiff_t(s) * to.at.strides[2] + std::ptrdiff_t(d) * to.at.strides[3]] = E(scratch[at++]);
    });
  }
};

/// The caller's tensor t (F32 or F64, t's shape, any strides) = g (the same shape, dense).
template <class G>
void write_nd(const view_nd& t, const G& g) {
  std::array<std::size_t, 4> n{1, 1, 1, 1};
  std::array<std::ptrdiff_t, 4> st{};
  const std::size_t pad = 4 - t.shape.size();
  for (std::size_t a = 0; a < t.shape.size(); ++a) n[pad + a] = t.shape[a], st[pad + a] = t.strides[a];
  with_element(t.dtype, t.data, [&](auto* p) {
    using E = std::remove_pointer_t<decltype(p)>;
    std::size_t at = 0;
    for (std::size_t a = 0; a < n[0]; ++a)
      for (std::size_t b = 0; b < n[1]; ++b)
        for (std::size_t c = 0; c < n[2]; ++c)
          for (std::size_t d = 0; d < n[3]; ++d)
            p[std::ptrdiff_t(a) * st[0] + std::ptrdiff_t(b) * st[1] + std::ptrdiff_t(c) * st[2] +
              std::ptrdiff_t(d) * st[3]] = E(g.data()[at++]);
  });
}

}  // namespace xattn::c_api::detail
