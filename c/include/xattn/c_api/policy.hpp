#pragma once
// A scoring policy written in C++ behind the C interface: what the Python package's xattn.policy
// compiles around a user's struct. One expression per element type, so a policy compiles once:
// softmax(mask(modify(score(P, Q, K) * scale, terms), masks), sinks) * V with the call's additive
// terms (softcap, additive mask, ALiBi) and masks (causal or window, lengths, documents, boolean
// mask) chosen at run time (general.hpp), and no sink a sink of -inf. Rotary embeddings turn
// copies of Q and K first. A bias tensor, dropout and the additive scorer are not offered. Parameters are the
// policy's learnables, as doubles in parameters()'s order.
#include "backward.hpp"
#include "forward.hpp"
#include "status.hpp"

#include <cstddef>
#include <ranges>
#include <tuple>
#include <type_traits>
#include <utility>

namespace xattn::c_api::policy {

/// f(learnable) for each learnable parameters() lists, ranges flattened, in order.
template <class P, class F>
void for_each_learnable(const P& p, F&& f) {
  if constexpr (declares_learnables<P>)
    std::apply(
        [&](const auto&... entry) {
          const auto one = [&](const auto& e) {
            if constexpr (is_learnable_v<std::remove_cvref_t<decltype(e)>>)
              f(e);
            else
              for (const auto& x : e) f(x);
          };
          (one(entry), ...);
        },
        p.parameters());
}

template <class P>
std::size_t parameter_count() {
  std::size_t n = 0;
  for_each_learnable(P{}, [&](const auto&) { ++n; });
  return n;
}

/// The policy P with its learnables set from values (parameters()'s order).
template <class P>
P with_values(const double* values) {
  P p{};
  std::size_t n = 0;
  for_each_learnable(p, [&](const auto& x) {
    using L = std::remove_cvref_t<decltype(x)>;
    const_cast<L&>(x).value = decltype(x.value)(values[n++]);  // parameters() lists members of p itself
  });
  return p;
}

/// The one expression a compiled policy runs.
template <class P>
struct builder {
  const P& policy;

  template <class Q, class K, class V, class F>
  void operator()(const forward_args& a, const Q& q, const K& k, const V& v, F&& f) const {
    if (a.bias.given || a.dropout_p > 0 || a.scorer)
      throw unsupported(
          "xattn.policy: desc.bias, desc.dropout_p and desc.additive are not supported with a compiled policy");
    using Acc = std::remove_cv_t<typename Q::value_type>;
    const general_parts<Acc> parts(a);
    f(parts.weights(score(policy, q, k) * a.scale, std::true_type{}, std::false_type{}, a) * v);
  }
};

template <class T>
constexpr xattn_dtype dtype_of() {
  return std::is_same_v<T, double> ? XATTN_F64 : XATTN_F32;
}

inline void check_dtype(xattn_dtype want, xattn_dtype got) {
  if (want != got)
    fail("xattn.policy: this policy was compiled for ", dtype_name(want), " inputs, not ", dtype_name(got));
}

/// xattn_forward's contract with policy P compiled for element type T (float or double).
template <class P, class T>
xattn_status forward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                     const xattn_attention_desc* desc, xattn_tensor* out, xattn_tensor* lse, const double* values) {
  return guarded([&] {
    const forward_args a = forward_arguments(q, k, v, desc, out, lse, "xattn.policy forward");
    check_dtype(dtype_of<T>(), a.dtype);
    const P p = with_values<P>(values);
    forward_in_acc_with<T>(a, builder<P>{p});
  });
}

/// xattn_backward's contract with policy P; d_values (parameters()'s order) receives the
/// parameters' gradients.
template <class P, class T>
xattn_status backward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                      const xattn_attention_desc* desc, const xattn_tensor* out, const xattn_tensor* lse,
                      const xattn_tensor* d_out, xattn_tensor* dq, xattn_tensor* dk, xattn_tensor* dv,
                      xattn_tensor* dsinks, const double* values, double* d_values) {
  return guarded([&] {
    const backward_args a = backward_arguments(q, k, v, desc, out, lse, d_out, dq, dk, dv, dsinks, nullptr);
    check_dtype(dtype_of<T>(), a.f.dtype);
    const P p = with_values<P>(values);
    backward_with<T>(a, builder<P>{p}, [&](const auto& g) {
      if constexpr (declares_learnables<P>)
        for (std::size_t n = 0; n < g.dscore.size(); ++n) d_values[n] = g.dscore[n];
    });
  });
}

}  // namespace xattn::c_api::policy
