#pragma once
// Planning: an expression tree is matched, at compile time, to the one shape the fused kernel
// runs -- a base scorer, a fixed scale, element-wise score modifiers in order, masks in order and
// optionally the values -- or rejected with a single static_assert that states the grammar.
#include "../../error.hpp"
#include "../../expr/nodes.hpp"
#include "../../expr/rope.hpp"
#include "../../expr/tensor_ref.hpp"
#include "../../hana.hpp"
#include "../../policy/concepts.hpp"
#include "../../policy/dot.hpp"
#include "../../policy/masks/selected_keys.hpp"
#include "../../policy/masks/sequence_lengths.hpp"
#include "bases.hpp"
#include "operands.hpp"

#include <cmath>
#include <tuple>

namespace xattn {

namespace hana = boost::hana;

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
    if (!std::isfinite(factor)) fail("scores * c or scores / c: the factor must be finite, got ", factor);
    return *this;
  }
};

struct no_values {};

template <class Base, class Ops, class Masks, class V = no_values, class Tm = no_softmax_term>
struct plan {
  Base base;
  double scale = 1;
  Ops ops;      // hana::tuple of score modifiers, applied first to last
  Masks masks;  // hana::tuple of masks, innermost first
  V v{};
  random::dropout drop{};  // p = 0: no dropout
  Tm term{};               // the softmax term (the sinks), or no_softmax_term
  static constexpr bool has_values = !std::is_same_v<V, no_values>;
  static constexpr bool has_term = !std::is_same_v<Tm, no_softmax_term>;
};

// ---- a plan changed one part at a time: the other parts are carried over, so a step that
// ---- changes the masks cannot drop the softmax term; leaving a part out is a named step of its own.

namespace detail {

/// A plan of the given parts, its type deduced from them.
template <class B, class Ops, class Masks, class V, class Tm>
plan<B, Ops, Masks, V, Tm> plan_of(B base, double scale, Ops ops, Masks masks, V v, random::dropout drop, Tm term) {
  return {.base = std::move(base),
          .scale = scale,
          .ops = std::move(ops),
          .masks = std::move(masks),
          .v = std::move(v),
          .drop = drop,
          .term = std::move(term)};
}

}  // namespace detail

template <class P, class B>
auto with_base(P p, B base) {
  return detail::plan_of(std::move(base), p.scale, std::move(p.ops), std::move(p.masks), std::move(p.v), p.drop,
                         std::move(p.term));
}

/// p with its score modifiers replaced (a hana::tuple, applied first to last).
template <class P, class Ops>
auto with_ops(P p, Ops ops) {
  return detail::plan_of(std::move(p.base), p.scale, std::move(ops), std::move(p.masks), std::move(p.v), p.drop,
                         std::move(p.term));
}

/// p with its masks replaced (a hana::tuple, innermost first).
template <class P, class Masks>
auto with_masks(P p, Masks masks) {
  return detail::plan_of(std::move(p.base), p.scale, std::move(p.ops), std::move(masks), std::move(p.v), p.drop,
                         std::move(p.term));
}

template <class P, class V>
auto with_values(P p, V v) {
  return detail::plan_of(std::move(p.base), p.scale, std::move(p.ops), std::move(p.masks), std::move(v), p.drop,
                         std::move(p.term));
}

template <class P, class Tm>
auto with_term(P p, Tm term) {
  return detail::plan_of(std::move(p.base), p.scale, std::move(p.ops), std::move(p.masks), std::move(p.v), p.drop,
                         std::move(term));
}

/// p without its softmax term: for a part of the keys whose results are merged, the term joining once.
template <class P>
auto without_term(P p) {
  return with_term(std::move(p), no_softmax_term{});
}

template <class P>
P with_dropout(P p, random::dropout drop) {
  p.drop = drop;
  return p;
}

namespace detail {

// ---- the grammar, as type traits (nothing here instantiates a function body) ------------------

template <class E>
inline constexpr bool is_dot_product_v = false;  // Q * trans(K) with terminals, either transformed (rope)
template <class Q, class K>
inline constexpr bool is_dot_product_v<product_node<Q, trans_node<K>>> = (is_terminal_v<Q> ||
                                                                          is_transformed_v<Q>)&&(is_terminal_v<K> ||
                                                                                                 is_transformed_v<K>);

/// One side of a sum of products: Q * trans(K), scaled or not.
template <class E>
inline constexpr bool is_score_term_v = is_dot_product_v<E>;
template <class E>
inline constexpr bool is_score_term_v<scale_node<E>> = is_score_term_v<E>;

template <class E>
inline constexpr bool is_sum_node_v = false;
template <class L, class R>
inline constexpr bool is_sum_node_v<sum_node<L, R>> = is_score_term_v<L>&& is_score_term_v<R>;

template <class E>
inline constexpr bool is_score_node_v = false;
template <class P, class Q, class K>
inline constexpr bool is_score_node_v<score_node<P, Q, K>> = is_terminal_v<Q>&& is_terminal_v<K>;

template <class E>
inline constexpr bool is_scale_node_v = false;
template <class E>
inline constexpr bool is_scale_node_v<scale_node<E>> = true;

template <class E>
inline constexpr bool is_modify_node_v = false;
template <class E, class Op>
inline constexpr bool is_modify_node_v<modify_node<E, Op>> = true;

template <class E>
inline constexpr bool is_mask_node_v = false;
template <class E, class M>
inline constexpr bool is_mask_node_v<mask_node<E, M>> = true;

/// scores := Q * trans(K) | score(policy, Q, K) | X | scores * c | modify(scores, op)
template <class E>
constexpr bool is_scores() {
  if constexpr (is_terminal_v<E> || is_dot_product_v<E> || is_score_node_v<E> || is_sum_node_v<E>)
    return true;
  else if constexpr (is_scale_node_v<E> || is_modify_node_v<E>)
    return is_scores<std::decay_t<decltype(std::declval<E>().arg)>>();
  else
    return false;
}

/// masked := scores | mask(masked, m)
template <class E>
constexpr bool is_masked() {
  if constexpr (is_mask_node_v<E>)
    return is_masked<std::decay_t<decltype(std::declval<E>().arg)>>();
  else
    return is_scores<E>();
}

/// softmax(masked[, term]) or dropout(softmax(...), p, seed)
template <class E>
inline constexpr bool is_weights_v = false;
template <class S, class Tm>
inline constexpr bool is_weights_v<softmax_node<S, Tm>> = is_masked<S>();
template <class S, class Tm>
inline constexpr bool is_weights_v<dropout_node<softmax_node<S, Tm>>> = is_masked<S>();

/// weights * V with V a terminal
template <class E>
inline constexpr bool is_attention_v = false;
template <class W, class V>
inline constexpr bool is_attention_v<product_node<W, V>> = is_weights_v<W>&& is_terminal_v<V>;

template <class E>
inline constexpr bool in_grammar_v = is_attention_v<E> || is_weights_v<E> || is_masked<E>();

}  // namespace detail

/// The entry points' first check: true for an expression in the grammar, one static_assert otherwise.
template <class E>
constexpr bool check_grammar() {
  static_assert(
      detail::in_grammar_v<E>,
      "xattn: unsupported attention expression. Supported grammar:\n"
      "  attention := weights * V\n"
      "  weights   := softmax(masked) | softmax(masked, sinks(t) | softmax_term) | dropout(softmax(...), p, seed)\n"
      "  masked    := scores | mask(masked, mask_policy)\n"
      "  scores    := Q * trans(K) | score(policy, Q, K) | X | term + term\n"
      "             | scores / c | scores * c | c * scores | scores + bias(t)\n"
      "             | softcap(scores, c) | alibi(scores, slopes) | modify(scores, op)\n"
      "  Q, K, V, X := ref(tensor) or heads(tensor, H); c a number;\n"
      "  in Q * trans(K) also rope(Q, positions[, options]) or transformed(Q, load_transform);\n"
      "  term := Q * trans(K), scaled or not (a sum of two products, each with its own K heads).\n"
      "Scaling and score modifiers go inside mask(...), masks inside softmax(...).");
  return detail::in_grammar_v<E>;
}

namespace detail {

template <class E>
inline constexpr bool is_dropout_node_v = false;
template <class E>
inline constexpr bool is_dropout_node_v<dropout_node<E>> = true;

template <class W>
const auto& softmax_of(const W& w) {
  if constexpr (is_dropout_node_v<W>)
    return w.arg;
  else
    return w;
}
template <class W>
random::dropout dropout_of(const W& w) {
  if constexpr (is_dropout_node_v<W>)
    return w.cfg;
  else
    return {};
}

template <class Base>
auto start(Base b) {
  return plan<Base, hana::tuple<>, hana::tuple<>>{
      .base = std::move(b), .scale = 1.0, .ops = {}, .masks = {}, .v = {}, .drop = {}, .term = {}};
}

template <class P, class Op>
auto add_op(P p, Op op) {
  auto ops = hana::append(std::move(p.ops), std::move(op));
  return with_ops(std::move(p), std::move(ops));
}

/// A side of a sum: its operands and the product of its scales.
template <class E>
auto term_of(const E& e) {
  if constexpr (is_scale_node_v<E>) {
    auto t = term_of(e.arg);
    std::get<2>(t) *= e.factor;
    return t;
  } else {
    return std::tuple{e.lhs, e.rhs.arg, 1.0};
  }
}

/// scores without masks: base, scale and modifiers.
template <class E>
auto plan_scores(const E& e) {
  if constexpr (is_terminal_v<E>) {
    return start(tensor_base<E>{e});
  } else if constexpr (is_dot_product_v<E>) {
    return start(
        policy_base<dot, std::decay_t<decltype(e.lhs)>, std::decay_t<decltype(e.rhs.arg)>>{{}, e.lhs, e.rhs.arg});
  } else if constexpr (is_sum_node_v<E>) {
    // Built in the plan's own storage: GCC 12 tuned for some CPUs (-march=znver1) warns that a
    // temporary base's shared_ptr may be destroyed uninitialised (-Wmaybe-uninitialized).
    auto [q1, k1, s1] = term_of(e.lhs);
    auto [q2, k2, s2] = term_of(e.rhs);
    using base_t = sum_base<decltype(q1), decltype(k1), decltype(q2), decltype(k2)>;
    return plan<base_t, hana::tuple<>, hana::tuple<>>{
        .base = base_t{{{}, std::move(q1), std::move(k1)}, std::move(q2), std::move(k2), s1, s2},
        .scale = 1.0,
        .ops = {},
        .masks = {},
        .v = {},
        .drop = {},
        .term = {}};
  } else if constexpr (is_score_node_v<E>) {
    return start(
        policy_base<std::decay_t<decltype(e.policy)>, std::decay_t<decltype(e.q)>, std::decay_t<decltype(e.k)>>{
            e.policy, e.q, e.k});
  } else if constexpr (is_scale_node_v<E>) {
    auto p = plan_scores(e.arg);
    if constexpr (hana::length(decltype(p.ops){}) == hana::size_c<0>) {
      p.scale *= e.factor;
      return p;
    } else {
      return add_op(std::move(p), scale_op{e.factor});
    }
  } else {
    static_assert(is_modify_node_v<E>);
    return add_op(plan_scores(e.arg), e.op);
  }
}

/// masked := scores | mask(masked, m)
template <class E>
auto plan_masked(const E& e) {
  if constexpr (is_mask_node_v<E>) {
    auto p = plan_masked(e.arg);
    auto ms = hana::append(std::move(p.masks), e.mask);
    return with_masks(std::move(p), std::move(ms));
  } else {
    return plan_scores(e);
  }
}

}  // namespace detail

namespace detail {

/// The plan as the expression is written.
template <class E>
auto plan_of(const E& e) {
  static_assert(in_grammar_v<E>, "xattn: make_plan needs an expression in the grammar (check_grammar)");
  if constexpr (is_attention_v<E>) {
    const auto& sm = softmax_of(e.lhs);
    return with_dropout(with_term(with_values(plan_masked(sm.arg), e.rhs), sm.term), dropout_of(e.lhs));
  } else if constexpr (is_weights_v<E>) {
    const auto& sm = softmax_of(e);
    return with_dropout(with_term(plan_masked(sm.arg), sm.term), dropout_of(e));
  } else {
    return plan_masked(e);
  }
}

}  // namespace detail

namespace detail {

/// What an attention over selected keys (select(K, idx)) may be: its mask sees a query's selected
/// columns, not positions, so positions are for the indexer to use (it picks visible keys).
template <class P>
constexpr bool check_selection() {
  using base_t = decltype(std::declval<P>().base);
  if constexpr (requires(const base_t& b) {
                  b.q;
                  b.k;
                } &&
                !is_sum_base_v<base_t> && P::has_values) {
    using K = std::decay_t<decltype(std::declval<P>().base.k)>;
    using Q = std::decay_t<decltype(std::declval<P>().base.q)>;
    using V = std::decay_t<decltype(std::declval<P>().v)>;
    static_assert(is_selected_terminal_v<K> && is_selected_terminal_v<V>,
                  "xattn: select(K, idx) needs select(V, idx) with the same idx, and the keys selected too: "
                  "softmax(Q * trans(select(K, idx)) * s) * select(V, idx)");
    static_assert(!is_selected_terminal_v<Q> && !is_transformed_v<Q>,
                  "xattn: select(K, idx): the queries must be a plain ref() (turn them by rope before, as the keys)");
    static_assert(decltype(hana::is_empty(std::declval<P>().ops))::value &&
                      decltype(hana::is_empty(std::declval<P>().masks))::value,
                  "xattn: select(K, idx): masks and score modifiers would see a query's selected columns, not key "
                  "positions: let the indexer choose only the keys a query may see (pad with -1)");
    return is_selected_terminal_v<K> && is_selected_terminal_v<V>;
  } else {
    static_assert(sizeof(P) == 0,
                  "xattn: select(K, idx) works in an attention softmax(Q * trans(select(K, idx)) * s) * "
                  "select(V, idx) or score(policy, Q, select(K, idx)) alike; not in weights, sums or scores");
    return false;
  }
}

}  // namespace detail

/// The plan of an attention, weights or scores expression (one in the grammar: check_grammar).
/// Over a cache's sequences the keys past each one's end are excluded by the outermost mask; over
/// a selection, the keys its index leaves out (negative).
template <class E>
auto make_plan(const E& e) {
  auto p = detail::plan_of(e);
  using P = decltype(p);
  if constexpr (selects_v<P>) {
    if constexpr (detail::check_selection<P>()) {
      using I = typename std::decay_t<decltype(p.base.k)>::index_type;
      auto ms = hana::append(std::move(p.masks), selected_keys_mask<I>{p.base.k.view.idx});
      return with_masks(std::move(p), std::move(ms));
    }
  } else if constexpr (reads_cache_v<P>) {
    auto ms = hana::append(std::move(p.masks), sequence_lengths_mask{});
    return with_masks(std::move(p), std::move(ms));
  } else {
    return p;
  }
}

}  // namespace xattn
