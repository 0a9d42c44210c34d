#pragma once
// The words of the DSL. Everything here only builds nodes; planning and evaluation are in eval/.
#include "../policy/check.hpp"
#include "../policy/ops/alibi.hpp"
#include "../policy/ops/bias.hpp"
#include "../policy/ops/softcap.hpp"
#include "nodes.hpp"
#include "tensor_ref.hpp"

#include <type_traits>
#include <utility>
#include <vector>

namespace xattn {

template <expression K>
auto trans(K k) {
  return trans_node<K>{{}, std::move(k)};
}

template <expression L, expression R>
auto operator*(L lhs, R rhs) {
  return product_node<L, R>{{}, std::move(lhs), std::move(rhs)};
}

template <expression E, arithmetic C>
auto operator*(E e, C c) {
  return scale_node<E>{{}, std::move(e), double(c)};
}

template <arithmetic C, expression E>
auto operator*(C c, E e) {
  return scale_node<E>{{}, std::move(e), double(c)};
}

template <expression E, arithmetic C>
auto operator/(E e, C c) {
  return scale_node<E>{{}, std::move(e), 1.0 / double(c)};
}

namespace detail {
template <class E>
inline constexpr bool is_product_term_v = false;
template <class Q, class K>
inline constexpr bool is_product_term_v<product_node<Q, trans_node<K>>> = true;
template <class E>
inline constexpr bool is_product_term_v<scale_node<E>> = is_product_term_v<E>;
}  // namespace detail

/// Q1 * trans(K1) + Q2 * trans(K2): one score from two products, each side scaled or not
/// (multi-head latent attention: the second term's key heads may be fewer, shared by the queries).
template <expression L, expression R>
auto operator+(L lhs, R rhs) {
  static_assert(detail::is_product_term_v<L> && detail::is_product_term_v<R>,
                "xattn: a + b adds two score products, Q1 * trans(K1) + Q2 * trans(K2), each side scaled or not "
                "(Q and K terminals or rope(...)); a bias tensor is added with scores + bias(t)");
  return sum_node<L, R>{{}, std::move(lhs), std::move(rhs)};
}

/// scores + bias(t): an additive bias tensor broadcast against the scores.
template <expression E, class T>
auto operator+(E e, tensor_bias<T> b) {
  return modify_node<E, tensor_bias<T>>{{}, std::move(e), std::move(b)};
}

/// score(policy, Q, K): scores from any scoring policy (see policy/concepts.hpp).
template <class P, expression Q, expression K>
auto score(P policy, Q q, K k) {
  static_assert(detail::check_scoring_policy<P>());
  return score_node<P, Q, K>{{}, std::move(policy), std::move(q), std::move(k)};
}

/// modify(scores, op): an element-wise score modifier op(s, b, h, i, j) (FlexAttention's score_mod).
template <expression E, class Op>
auto modify(E e, Op op) {
  static_assert(detail::check_score_modifier<Op>());
  return modify_node<E, Op>{{}, std::move(e), std::move(op)};
}

template <expression E>
auto softcap(E e, double cap) {
  return modify(std::move(e), softcap_op{cap});
}

template <expression E>
auto alibi(E e, std::vector<double> slopes) {
  return modify(std::move(e), alibi_op{std::move(slopes), 0, {}});
}

template <expression E, class M>
auto mask(E e, M m) {
  static_assert(detail::check_mask_policy<M>());
  return mask_node<E, M>{{}, std::move(e), std::move(m)};
}

template <expression E>
auto softmax(E e) {
  return softmax_node<E>{{}, std::move(e)};
}

/// softmax(masked, term): one more logit in every row's normaliser, e.g. sinks(t) (one per query
/// head); any type with the softmax_term protocol (policy/terms/term.hpp).
template <expression E, class Tm>
auto softmax(E e, Tm t) {
  static_assert(softmax_term<Tm>,
                "xattn: softmax(scores, term): term must be a softmax term, e.g. sinks(t), or a type with logit(b, h), "
                "check(problem), parameters(problem), add_gradient(b, h, g, d), name() and describe() "
                "(policy/terms/term.hpp)");
  return softmax_node<E, Tm>{{}, std::move(e), std::move(t)};
}

/// dropout(weights, p, seed): zero each weight with probability p, scale survivors by 1/(1-p).
template <expression E>
auto dropout(E e, double p, std::uint64_t seed) {
  return dropout_node<E>{{}, std::move(e), random::dropout{p, seed}};
}

}  // namespace xattn
