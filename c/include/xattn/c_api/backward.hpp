#pragma once
// The C interface's backward: grad_into on the expression the forward ran (with_attention), in
// the accumulator type. 16-bit inputs are widened to float copies first (as the C++ backward
// widens them itself), so only float and double backwards are compiled in; gradients wanted in
// a 16-bit dtype are rounded from float ones.
#include "expression.hpp"

#include <type_traits>
#include <vector>

namespace xattn::c_api {

namespace detail {

/// f(static_cast<const E*>(data)) for the element type E that dtype names.
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

/// A (B, H, S, D) tensor of Acc: the caller's memory when it holds Acc, else a contiguous copy.
template <class Acc>
struct in_acc {
  std::vector<Acc> copy;
  raw_tensor<const Acc, 4> t;

  in_acc(const view4& v, xattn_dtype dtype) {
    t.shape = v.shape;
    with_element(dtype, v.data, [&](auto* p) {
      using E = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
      if constexpr (std::is_same_v<E, Acc>) {
        t.data = p, t.strides = v.strides;
      } else {
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
      }
    });
  }
};

/// Where a gradient of shape `shape` is written: the caller's memory when it is wanted in Acc,
/// else a contiguous scratch, rounded into the caller's dtype by finish() (or dropped).
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

}  // namespace detail

/// The backward of the expression build(a, Q, K, V, f) hands to f, in Acc; after(g) sees the
/// gradients grad_into returns (parameter gradients among them).
template <class Acc, class Build, class After>
void backward_with(const backward_args& a, Build&& build, After&& after) {
  const forward_args& f = a.f;
  const detail::in_acc<Acc> q(f.q, f.dtype), k(f.k, f.dtype), v(f.v, f.dtype), out(f.out, f.out_dtype),
      d_out(a.d_out, a.d_out_dtype);
  const raw_tensor<const Acc, 3> lse{static_cast<const Acc*>(f.lse), f.lse_shape, f.lse_strides};
  detail::out_acc<Acc> dq(a.dq, f.q.shape), dk(a.dk, f.k.shape), dv(a.dv, f.v.shape);
  const auto Q = ref(q.t.data, q.t.shape, q.t.strides);
  const auto K = ref(k.t.data, k.t.shape, k.t.strides);
  const auto V = ref(v.t.data, v.t.shape, v.t.strides);
  build(f, Q, K, V, [&](const auto& e) {
    const auto g = grad_into(e, out.t, lse, d_out.t, dq.t, dk.t, dv.t, f.sch);
    for (const auto* x : {&dq, &dk, &dv}) x->finish();
    if (a.dsinks != nullptr)
      for (std::size_t h = 0; h < g.dsinks.size(); ++h) {
        const std::ptrdiff_t at = std::ptrdiff_t(h) * a.dsinks_stride;
        if (a.dsinks_dtype == XATTN_F64)
          static_cast<double*>(a.dsinks)[at] = double(g.dsinks(h));
        else
          static_cast<float*>(a.dsinks)[at] = float(g.dsinks(h));
      }
    after(g);
  });
}

template <class Acc>
void backward_as(const backward_args& a) {
  backward_with<Acc>(
      a, [](const auto&... x) { with_attention(x...); }, [](const auto&) {});
}

}  // namespace xattn::c_api
