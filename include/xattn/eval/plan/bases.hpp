#pragma once
// The bases a plan's scores come from: a scoring policy over Q and K, a sum of two products (MLA),
// or scores given as a tensor. They hold their operands and do nothing.
#include "../../hana.hpp"
#include "../../policy/dot.hpp"

#include <type_traits>

namespace xattn {

namespace hana = boost::hana;

/// scores from a scoring policy over Q and K (Q * trans(K) plans as dot).
template <class P, class Q, class K>
struct policy_base {
  static constexpr bool tensor_scores = false;
  using policy_type = P;
  P policy;
  Q q;
  K k;
};

/// scores that are a sum of two products, s1 · Q·Kᵀ + s2 · Q2·K2ᵀ (multi-head latent attention):
/// the first term fixes the sizes; the second has features of its own and key heads that divide
/// the first's.
template <class Q, class K, class Q2, class K2>
struct sum_base : policy_base<dot, Q, K> {
  Q2 q2;
  K2 k2;
  double s1 = 1, s2 = 1;
};

template <class Base>
inline constexpr bool is_sum_base_v = false;
template <class Q, class K, class Q2, class K2>
inline constexpr bool is_sum_base_v<sum_base<Q, K, Q2, K2>> = true;

/// One product of a base's scores: its operands and its own scale.
template <class Q, class K>
struct score_term {
  const Q& q;
  const K& k;
  double scale;
};

/// The products a dot base sums: one, or the two of a sum_base.
template <class Base>
auto score_terms(const Base& b) {
  if constexpr (is_sum_base_v<Base>)
    return hana::make_tuple(score_term<decltype(b.q), decltype(b.k)>{b.q, b.k, b.s1},
                            score_term<decltype(b.q2), decltype(b.k2)>{b.q2, b.k2, b.s2});
  else
    return hana::make_tuple(score_term<decltype(b.q), decltype(b.k)>{b.q, b.k, 1.0});
}

/// scores given directly as a tensor (d2l's masked_softmax(X, valid_lens)).
template <class X>
struct tensor_base {
  static constexpr bool tensor_scores = true;
  X x;
};

/// The terminal that fixes the result's layout and sizes: Q, or the score tensor X.
template <class Base>
const auto& lead_terminal(const Base& b) {
  if constexpr (Base::tensor_scores)
    return b.x;
  else
    return b.q;
}

}  // namespace xattn
