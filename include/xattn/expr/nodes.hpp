#pragma once
// Expression nodes hold their operands by value (terminals are cheap views) and do nothing.
#include "../policy/terms/sinks.hpp"
#include "../random/philox_dropout.hpp"
#include "base.hpp"

namespace xattn {

template <class K>
struct trans_node : expr_base<trans_node<K>> {
  K arg;
};

/// a * b between expressions: Q * trans(K) is a score, softmax(...) * V an attention.
template <class L, class R>
struct product_node : expr_base<product_node<L, R>> {
  L lhs;
  R rhs;
};

/// a + b of two score products, Q1 * trans(K1) + Q2 * trans(K2): one score, one softmax.
template <class L, class R>
struct sum_node : expr_base<sum_node<L, R>> {
  L lhs;
  R rhs;
};

/// score * c (division is stored as multiplication by 1/c).
template <class E>
struct scale_node : expr_base<scale_node<E>> {
  E arg;
  double factor;
};

/// score(policy, Q, K): a pluggable scoring function.
template <class P, class Q, class K>
struct score_node : expr_base<score_node<P, Q, K>> {
  P policy;
  Q q;
  K k;
};

/// An element-wise score modifier (bias tensor, softcap, ALiBi, user op), applied before masks.
template <class E, class Op>
struct modify_node : expr_base<modify_node<E, Op>> {
  E arg;
  Op op;
};

template <class E, class M>
struct mask_node : expr_base<mask_node<E, M>> {
  E arg;
  M mask;
};

/// softmax over the key axis, with a softmax term (policy/terms/: the sinks) or without.
template <class E, class Tm = no_softmax_term>
struct softmax_node : expr_base<softmax_node<E, Tm>> {
  E arg;
  Tm term{};
};

/// dropout(softmax(...), p, seed): training-mode dropout on the weights, keyed by
/// (seed, batch, head, query, key) so any tiling and thread count drops the same weights.
template <class E>
struct dropout_node : expr_base<dropout_node<E>> {
  E arg;
  random::dropout cfg;
};

}  // namespace xattn
