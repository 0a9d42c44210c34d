#pragma once
// The checks score(), mask() and modify() make on their policy argument: a type that is not a
// policy, or declares a capability only in part, stops here with one message naming the member,
// before anything deeper is instantiated.
#include "concepts.hpp"

namespace xattn::detail {

template <class P>
constexpr bool check_scoring_policy() {
  static_assert(scoring_policy<P>,
                "xattn: score(policy, Q, K): the policy has no score operator. It needs "
                "`T operator()(std::span<const T> q, std::span<const T> k) const` for T = float or double "
                "(a template serves both)");
  if constexpr (declares_features<P>)
    static_assert(projects_in<P, float> || projects_in<P, double>,
                  "xattn: score(policy, Q, K): the policy declares feature_size(dq, dk), so it also needs "
                  "`T project_query(std::span<const T> q, std::span<T> fq) const` and "
                  "`T project_key(std::span<const T> k, std::span<T> fk) const`, each returning its additive "
                  "term (0 if none)");
  static_assert(!separable<P>() || declares_features<P>,
                "xattn: score(policy, Q, K): `separable = true` says the score is fq·fk + α + β of the policy's "
                "projections, but it declares none: add feature_size, project_query and project_key (for plain "
                "q·k use xattn::dot)");
  if constexpr (declares_combine<P>)
    static_assert(declares_features<P> && (combines_in<P, float> || combines_in<P, double>),
                  "xattn: score(policy, Q, K): combine(fq, fk) works on the policy's projections: declare "
                  "feature_size, project_query and project_key, and "
                  "`T combine(std::span<const T> fq, std::span<const T> fk) const`, in one type T");
  return true;
}

template <class M>
constexpr bool check_mask_policy() {
  static_assert(mask_policy<M>,
                "xattn: mask(scores, m): m is not a mask policy. It needs "
                "`bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const`");
  return true;
}

template <class Op>
constexpr bool check_score_modifier() {
  static_assert(score_modifier<Op>,
                "xattn: modify(scores, op): op is not a score modifier. It needs "
                "`U operator()(U s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) const` for U = "
                "float or double (a template or a generic lambda serves both)");
  return true;
}

}  // namespace xattn::detail
