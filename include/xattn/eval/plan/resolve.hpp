#pragma once
// Run-time half of planning: read the sizes off the terminals, check that they fit together
// (every mismatch names the argument and the shapes), and bind masks and modifiers to them.
#include "../../error.hpp"
#include "../../hana.hpp"
#include "plan.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace xattn {

namespace detail {

template <class Tm>
std::string shape_of(const Tm& t) {
  return shape_str(t.user_shape());
}

inline const char* role_name(operand_role r) {
  switch (r) {
    case operand_role::scores:
      return "scores";
    case operand_role::queries:
      return "queries";
    case operand_role::keys:
      return "keys";
    case operand_role::values:
      return "values";
  }
  return "";
}

/// The element count of an operand must fit in size_t (raw-pointer views can claim anything).
template <class O>
void check_size(const O& o) {
  std::size_t n = 1;
  for (std::size_t s : o.terminal.view.at.shape)
    if (__builtin_mul_overflow(n, s, &n))
      fail(role_name(o.role), " ", o.symbol, " ", shape_str(o.terminal.view.at.shape),
           ": the number of elements overflows size_t");
}

/// The policy's own size check, or by default equal sizes: a policy that accepts queries and keys
/// of different sizes says so in validate(dq, dk).
template <class P>
void validate_sizes(const P& p, std::size_t dq, std::size_t dk) {
  if constexpr (validates_sizes<P>)
    p.validate(dq, dk);
  else if (dq != dk)
    fail("score(policy, Q, K): queries have size ", dq, " but keys have size ", dk,
         "; a policy that accepts different sizes declares validate(dq, dk)");
}

/// A cache operand's sequence lengths become the problem's keys per batch row; every operand from
/// a cache must hold the same sequences' lengths.
template <class O>
void take_lengths(problem& pr, const O& o) {
  if constexpr (is_cache_terminal_v<std::decay_t<decltype(o.terminal)>>) {
    if (pr.kv_lens.empty())
      pr.kv_lens = o.terminal.lengths;
    else if (pr.kv_lens != o.terminal.lengths)
      fail(role_name(o.role), " ", o.symbol, " ", shape_of(o.terminal),
           " come from cache sequences of other lengths than the keys': ", shape_str(o.terminal.lengths), " against ",
           shape_str(pr.kv_lens));
  }
}

template <class Base>
problem from_base(const Base& base) {
  problem pr;
  if constexpr (Base::tensor_scores) {
    const auto& s = base.x.view.at.shape;
    pr = {s[0], s[1], s[1], s[2], s[3], 0, 0, 0, base.x.how == form::bsd ? 3u : 4u, {}};
  } else {
    const auto& q = base.q.view.at.shape;
    const auto& k = base.k.view.at.shape;
    pr = {q[0], q[1], k[1], q[2], k[2], q[3], k[3], 0, base.q.how == form::bsd ? 3u : 4u, {}};
    if (q[0] != k[0])
      fail("queries and keys have different batch sizes: Q ", shape_of(base.q), ", K ", shape_of(base.k),
           is_cache_terminal_v<std::decay_t<decltype(base.k)>> ? " (K: one batch row per cache sequence)" : "");
    hana::for_each(base_operands(base), [&](const auto& o) { take_lengths(pr, o); });
    if (k[1] == 0 || q[1] % k[1] != 0)
      fail("the ", q[1], " query heads are not a multiple of the ", k[1],
           " key heads (grouped-query attention needs Hq = G * Hkv): Q ", shape_of(base.q), ", K ", shape_of(base.k));
    try {
      validate_sizes(base.policy, q[3], k[3]);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(e.what()) + " [Q " + shape_of(base.q) + ", K " + shape_of(base.k) + "]");
    }
  }
  if (pr.kv_len == 0) fail("there are no keys (Skv = 0): softmax over an empty set is undefined");
  return pr;
}

/// The rotary embeddings of a dot base's operands, and the second term of a sum against the first.
template <class Base>
void check_terms(const Base& base, const problem& pr) {
  if constexpr (is_sum_base_v<Base>) {
    const auto& q = base.q2.view.at.shape;
    const auto& k = base.k2.view.at.shape;
    const auto shapes = [&] {
      return "Q1 " + shape_of(base.q) + ", K1 " + shape_of(base.k) + ", Q2 " + shape_of(base.q2) + ", K2 " +
             shape_of(base.k2);
    };
    const char* sum = "Q1 * trans(K1) + Q2 * trans(K2)";
    if (q[0] != pr.batch || k[0] != pr.batch) fail(sum, ": the terms have different batch sizes: ", shapes());
    if (q[2] != pr.q_len) fail(sum, ": Q2 has ", q[2], " queries but Q1 has ", pr.q_len, ": ", shapes());
    if (k[2] != pr.kv_len) fail(sum, ": K2 has ", k[2], " keys but K1 has ", pr.kv_len, ": ", shapes());
    if (q[1] != pr.q_heads) fail(sum, ": Q2 has ", q[1], " heads but Q1 has ", pr.q_heads, ": ", shapes());
    if (k[1] == 0 || pr.kv_heads % k[1] != 0)
      fail(sum, ": K2's ", k[1], " heads must divide K1's ", pr.kv_heads,
           " (each key head is shared by whole groups of query heads): ", shapes());
    if (q[3] != k[3]) fail(sum, ": Q2 has ", q[3], " features but K2 has ", k[3], ": ", shapes());
    if (!std::isfinite(base.s1) || !std::isfinite(base.s2))
      fail(sum, ": each term's scale must be finite, got ", base.s1, " and ", base.s2);
  }
  hana::for_each(base_operands(base), [&](const auto& o) {  // a load transform fits the operand's rows
    if constexpr (is_transformed_v<std::decay_t<decltype(o.terminal)>>)
      o.terminal.transform.check(pr.batch, o.role == operand_role::queries ? pr.q_len : pr.kv_len,
                                 o.terminal.view.at.shape[3], o.symbol);
  });
}

/// keys() describes the keys for a message: only a failing call builds strings (decoding steps are
/// short enough for them to show).
template <class V, class Keys>
void add_values(problem& pr, const V& v, const Keys& keys) {
  const auto& s = v.view.at.shape;
  if (s[0] != pr.batch || s[2] != pr.kv_len)
    fail("values V ", shape_of(v), " do not match the keys ", keys(), ": need the same batch (", pr.batch,
         ") and number of keys (", pr.kv_len, ")");
  if (s[1] == 0 || pr.q_heads % s[1] != 0 || (pr.q_dim != 0 && s[1] != pr.kv_heads))
    fail("values V ", shape_of(v), " have ", s[1], " heads; they must match the ", pr.kv_heads, " key heads (keys ",
         keys(), ")");
  take_lengths(pr, plan_operand{operand_role::values, 0, "V", v});
  pr.v_dim = s[3];
  if (pr.q_dim == 0) pr.kv_heads = s[1];  // scores given as a tensor: V's heads are the kv heads
}

}  // namespace detail

/// Sizes of the plan, checked.
template <class P>
problem resolve(const P& p) {
  if (!std::isfinite(p.scale))
    fail("scores * c or scores / c: the scale must be finite and c non-zero, got scale ", p.scale);
  hana::for_each(plan_operands(p), [](const auto& o) { detail::check_size(o); });
  problem pr = detail::from_base(p.base);
  p.drop.check();
  if (p.drop.p > 0 && std::max({pr.batch, pr.q_heads, pr.q_len, pr.kv_len}) > 0xffffffffu)
    fail("dropout: batch, heads and sequence lengths must be below 2^32 (the Philox counter words)");
  p.term.check(pr);
  if constexpr (!decltype(p.base)::tensor_scores) detail::check_terms(p.base, pr);
  if constexpr (P::has_values) {
    if constexpr (decltype(p.base)::tensor_scores)
      detail::add_values(pr, p.v, [&] { return "(scores " + detail::shape_of(p.base.x) + ")"; });
    else
      detail::add_values(pr, p.v, [&] { return detail::shape_of(p.base.k); });
  }
  return pr;
}

/// Masks and modifiers bound to the sizes (each validates its own arguments).
template <class Tuple>
auto bind_all(const Tuple& t, const problem& pr) {
  return hana::transform(t, [&](const auto& x) { return bound(x, pr); });
}

}  // namespace xattn
