#pragma once
// Planning: an expression tree is matched, at compile time, to the one shape the fused kernel
// runs -- a base scorer, a fixed scale, element-wise score modifiers in order, masks in order and
// optionally the values -- or rejected with a single static_assert that states the grammar.
#include "../expr/nodes.hpp"
#include "../expr/tensor_ref.hpp"
#include "../policy/concepts.hpp"
#include "../policy/dot.hpp"

#include "../detail/format.hpp"

#include <boost/hana.hpp>

#include <cmath>

namespace xattn {

namespace hana = boost::hana;

/// scores from a scoring policy over Q and K (Q * trans(K) plans as dot).
template <class P, class Q, class K>
struct policy_base {
  P policy;
  Q q;
  K k;
};

/// scores given directly as a tensor (d2l's masked_softmax(X, valid_lens)).
template <class X>
struct tensor_base {
  X x;
};

/// s -> c * s, when a scale follows a modifier and cannot be folded into the base.
struct scale_op {
  double factor;
  template <class U>
  U operator()(U s, std::size_t, std::size_t, std::size_t, std::size_t) const {
    return s * U(factor);
  }
  template <class T>
  void apply_row(T* s, std::size_t n, std::size_t, std::size_t, std::size_t, std::size_t) const {
    for (std::size_t j = 0; j < n; ++j) s[j] *= T(factor);
  }
  scale_op bind(const problem&) const {
    if (!std::isfinite(factor)) detail::fail("scores * c or scores / c: the factor must be finite, got ", factor);
    return *this;
  }
};

struct no_values {};

template <class Base, class Ops, class Masks, class V = no_values>
struct plan {
  Base base;
  double scale = 1;
  Ops ops;      // hana::tuple of score modifiers, applied first to last
  Masks masks;  // hana::tuple of masks, innermost first
  V v{};
  random::dropout drop{};  // p = 0: no dropout
  static constexpr bool has_values = !std::is_same_v<V, no_values>;
};

template <class E>
void reject() {
  static_assert(sizeof(E) == 0,
                "xattn: unsupported attention expression. Supported grammar:\n"
                "  attention := weights * V\n"
                "  weights   := softmax(masked) | dropout(softmax(masked), p, seed)\n"
                "  masked    := scores | mask(masked, mask_policy)\n"
                "  scores    := Q * trans(K) | score(policy, Q, K) | X\n"
                "             | scores / c | scores * c | c * scores | scores + bias(t)\n"
                "             | softcap(scores, c) | alibi(scores, slopes) | modify(scores, op)\n"
                "  Q, K, V, X := ref(tensor) or heads(tensor, H); c a number.\n"
                "Scaling and score modifiers go inside mask(...), masks inside softmax(...).");
}

namespace planning {

template <class E>
struct is_mask_node : std::false_type {};
template <class E, class M>
struct is_mask_node<mask_node<E, M>> : std::true_type {};

/// Q * trans(K) with terminals
template <class E>
struct is_dot_product : std::false_type {};
template <class Q, class K>
struct is_dot_product<product_node<Q, trans_node<K>>> : std::bool_constant<is_terminal_v<Q> && is_terminal_v<K>> {};

template <class E>
struct is_score_node : std::false_type {};
template <class P, class Q, class K>
struct is_score_node<score_node<P, Q, K>> : std::bool_constant<is_terminal_v<Q> && is_terminal_v<K>> {};

template <class E>
struct is_softmax : std::false_type {};
template <class E>
struct is_softmax<softmax_node<E>> : std::true_type {};

/// softmax(...) or dropout(softmax(...), p, seed)
template <class E>
struct is_weights : std::false_type {};
template <class S>
struct is_weights<softmax_node<S>> : std::true_type {};
template <class S>
struct is_weights<dropout_node<softmax_node<S>>> : std::true_type {};

/// weights * V with V a terminal
template <class E>
struct is_attention : std::false_type {};
template <class W, class V>
struct is_attention<product_node<W, V>> : std::bool_constant<is_weights<W>::value && is_terminal_v<V>> {};

template <class W>
const auto& softmax_of(const W& w) {
  if constexpr (requires { w.cfg; })
    return w.arg;
  else
    return w;
}
template <class W>
random::dropout dropout_of(const W& w) {
  if constexpr (requires { w.cfg; })
    return w.cfg;
  else
    return {};
}

template <class Base>
auto start(Base b) {
  return plan<Base, hana::tuple<>, hana::tuple<>>{std::move(b), 1.0, {}, {}};
}

template <class P, class Op>
auto add_op(P p, Op op) {
  auto ops = hana::append(std::move(p.ops), std::move(op));
  return plan<decltype(p.base), decltype(ops), decltype(p.masks)>{std::move(p.base), p.scale, std::move(ops), {}};
}

/// scores without masks: base, scale and modifiers.
template <class E>
auto scores(const E& e) {
  if constexpr (is_terminal_v<E>) {
    return start(tensor_base<E>{e});
  } else if constexpr (is_dot_product<E>::value) {
    return start(policy_base<dot, std::decay_t<decltype(e.lhs)>, std::decay_t<decltype(e.rhs.arg)>>{{}, e.lhs, e.rhs.arg});
  } else if constexpr (is_score_node<E>::value) {
    return start(policy_base<std::decay_t<decltype(e.policy)>, std::decay_t<decltype(e.q)>, std::decay_t<decltype(e.k)>>{
        e.policy, e.q, e.k});
  } else if constexpr (requires { e.factor; }) {
    auto p = scores(e.arg);
    if constexpr (hana::length(decltype(p.ops){}) == hana::size_c<0>) {
      p.scale *= e.factor;
      return p;
    } else {
      return add_op(std::move(p), scale_op{e.factor});
    }
  } else if constexpr (requires { e.op; }) {
    return add_op(scores(e.arg), e.op);
  } else {
    return reject<E>();
  }
}

/// masked := scores | mask(masked, m)
template <class E>
auto masked(const E& e) {
  if constexpr (is_mask_node<E>::value) {
    auto p = masked(e.arg);
    auto ms = hana::append(std::move(p.masks), e.mask);
    return plan<decltype(p.base), decltype(p.ops), decltype(ms)>{std::move(p.base), p.scale, std::move(p.ops),
                                                                  std::move(ms)};
  } else {
    return scores(e);
  }
}

}  // namespace planning

/// The plan of an attention, weights or scores expression.
template <class E>
auto make_plan(const E& e) {
  if constexpr (planning::is_attention<E>::value) {
    using V = std::decay_t<decltype(e.rhs)>;
    auto p = planning::masked(planning::softmax_of(e.lhs).arg);
    return plan<decltype(p.base), decltype(p.ops), decltype(p.masks), V>{
        std::move(p.base), p.scale, std::move(p.ops), std::move(p.masks), e.rhs, planning::dropout_of(e.lhs)};
  } else if constexpr (planning::is_weights<E>::value) {
    auto p = planning::masked(planning::softmax_of(e).arg);
    p.drop = planning::dropout_of(e);
    return p;
  } else {
    return planning::masked(e);
  }
}

}  // namespace xattn
