#pragma once
// The C interface's backward: grad_into on the expression the forward ran, in the accumulator
// type. 16-bit inputs are widened to float copies first (as the C++ backward widens them itself),
// so only float and double backwards are compiled in; gradients wanted in a 16-bit dtype are
// rounded from float ones. With rotary embeddings the pass differentiates the turned copies, and
// dq, dk are turned back.
#include "buffers.hpp"
#include "general.hpp"

#include <type_traits>
#include <vector>

namespace xattn::c_api {

/// The backward of the expression build(a, Q, K, V, f) hands to f, in Acc; after(g) sees the
/// gradients grad_into returns (parameter gradients among them).
template <class Acc, class Build, class After>
void backward_with(const backward_args& a, Build&& build, After&& after) {
  const forward_args& f = a.f;
  const detail::in_acc<Acc> q(f.q, f.dtype, f.rope_q), k(f.k, f.kv_dtype, f.rope_k), v(f.v, f.kv_dtype),
      out(f.out, f.out_dtype), d_out(a.d_out, a.d_out_dtype);
  const raw_tensor<const Acc, 3> lse{static_cast<const Acc*>(f.lse), f.lse_shape, f.lse_strides};
  detail::out_acc<Acc> dq(a.dq, f.q.shape), dk(a.dk, f.k.shape), dv(a.dv, f.v.shape);
  const auto Q = ref(q.t.data, q.t.shape, q.t.strides);
  const auto K = ref(k.t.data, k.t.shape, k.t.strides);
  const auto V = ref(v.t.data, v.t.shape, v.t.strides);
  build(f, Q, K, V, [&](const auto& e) {
    const auto g = grad_into(e, out.t, lse, d_out.t, dq.t, dk.t, dv.t, f.sch);
    dq.turn_back(f.rope_q);
    dk.turn_back(f.rope_k);
    for (const auto* x : {&dq, &dk, &dv}) x->finish();
    if (a.dbias.given && !g.dbias.empty()) detail::write_nd(a.dbias, g.dbias.front());
    if constexpr (std::is_same_v<std::decay_t<decltype(g.dscore)>, additive_gradients>) {
      if (a.d_w_q.given) detail::write_nd(a.d_w_q, g.dscore.d_w_q);
      if (a.d_w_k.given) detail::write_nd(a.d_w_k, g.dscore.d_w_k);
      if (a.d_w_v.given) detail::write_nd(a.d_w_v, g.dscore.d_w_v);
    }
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

/// The backward of the rarer options (backward_general_*.cpp).
template <class Acc>
void backward_general(const backward_args& a) {
  backward_with<Acc>(
      a, [](const auto&... x) { with_rarer_attention(x...); }, [](const auto&) {});
}

extern template void backward_general<float>(const backward_args&);
extern template void backward_general<double>(const backward_args&);

template <class Acc>
void backward_as(const backward_args& a) {
  if (a.f.general())
    backward_general<Acc>(a);
  else
    backward_with<Acc>(
        a, [](const auto&... x) { with_attention(x...); }, [](const auto&) {});
}

}  // namespace xattn::c_api
