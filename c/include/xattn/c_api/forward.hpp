#pragma once
// The C interface's forward: the expression with_attention builds (or another builder's), run by
// the C++ DSL's own fused pass on the caller's memory, with the output in the inputs' type or float.
// Calls with a rarer part or rotary embeddings run on operands in the accumulator type.
#include "buffers.hpp"
#include "general.hpp"

#include <type_traits>
#include <vector>

namespace xattn::c_api {

namespace detail {

template <class Acc, class E, class O>
void write(const forward_args& a, const E& e, O* out, const std::array<std::ptrdiff_t, 4>& strides) {
  if (a.lse != nullptr) {
    eval_with_lse_into(e, out, a.out.shape, strides, static_cast<Acc*>(a.lse), a.lse_shape, a.lse_strides, a.sch);
  } else {
    // the log-sum-exp is computed anyway; a scratch row of it costs nothing next to the pass
    const std::array<std::size_t, 3> shape{a.out.shape[0], a.out.shape[1], a.out.shape[2]};
    std::vector<Acc> scratch(shape[0] * shape[1] * shape[2]);
    const std::array<std::ptrdiff_t, 3> lse_strides{std::ptrdiff_t(shape[1] * shape[2]), std::ptrdiff_t(shape[2]), 1};
    eval_with_lse_into(e, out, a.out.shape, strides, scratch.data(), shape, lse_strides, a.sch);
  }
}

}  // namespace detail

/// The forward of the expression build(a, Q, K, V, f) hands to f, on queries of element type T and
/// keys and values of KV.
template <class T, class KV = T, class Build>
void forward_with(const forward_args& a, Build&& build) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const auto Q = ref(static_cast<const T*>(a.q.data), a.q.shape, a.q.strides);
  const auto K = ref(static_cast<const KV*>(a.k.data), a.k.shape, a.k.strides);
  const auto V = ref(static_cast<const KV*>(a.v.data), a.v.shape, a.v.strides);
  build(a, Q, K, V, [&](const auto& e) {
    if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>)  // 16-bit: out in T or float
      if (a.out_dtype == XATTN_F32) return detail::write<Acc>(a, e, static_cast<float*>(a.out.data), a.out.strides);
    detail::write<Acc>(a, e, static_cast<T*>(a.out.data), a.out.strides);
  });
}

/// The forward of build's expression on q, k, v in Acc (read in place when they hold Acc and are
/// not turned); out written in place in Acc, else rounded from a scratch once the pass succeeded.
template <class Acc, class Build>
void forward_in_acc_with(const forward_args& a, Build&& build) {
  const detail::in_acc<Acc> q(a.q, a.dtype, a.rope_q), k(a.k, a.kv_dtype, a.rope_k), v(a.v, a.kv_dtype);
  const gradient_target target{a.out_dtype, a.out};
  detail::out_acc<Acc> out(target, a.out.shape);
  const auto Q = ref(q.t.data, q.t.shape, q.t.strides);
  const auto K = ref(k.t.data, k.t.shape, k.t.strides);
  const auto V = ref(v.t.data, v.t.shape, v.t.strides);
  build(a, Q, K, V, [&](const auto& e) { detail::write<Acc>(a, e, out.t.data, out.t.strides); });
  out.finish();
}

template <class Acc>
void forward_in_acc(const forward_args& a) {
  forward_in_acc_with<Acc>(a, [](const auto&... x) { with_any_attention(x...); });
}

extern template void forward_in_acc<float>(const forward_args&);
extern template void forward_in_acc<double>(const forward_args&);

/// The common options run the C++ DSL's expressions on the caller's memory (forward_*.cpp); the
/// rarer ones and rotary embeddings run forward_in_acc, compiled in translation units of their
/// own (forward_general_*.cpp) so that they leave the common kernels' code as it was.
template <class T>
void forward_as(const forward_args& a) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  if (a.general() || a.rope_q)
    forward_in_acc<Acc>(a);
  else
    forward_with<T>(a, [](const auto&... x) { with_attention(x...); });
}

/// Float queries over 16-bit keys and values (forward_mixed_*.cpp): the keys and values read in
/// place, as the C++ DSL reads 16-bit operands.
template <class KV>
void forward_mixed(const forward_args& a) {
  if (a.general() || a.rope_q)
    forward_in_acc<float>(a);
  else
    forward_with<float, KV>(a, [](const auto&... x) { with_attention(x...); });
}

}  // namespace xattn::c_api
