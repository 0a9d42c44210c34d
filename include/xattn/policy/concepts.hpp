#pragma once
// What a policy can do is detected, not declared in a base class: a user's policy is a plain type
// with the members below, and the plan picks the fastest path its capabilities allow.
//
// scoring policy   required:  T operator()(span<const T> q, span<const T> k) const   (T = float, double)
//                  optional:  void validate(size_t dq, size_t dk) const               (throws invalid_argument)
//                             size_t feature_size(size_t dq, size_t dk) const          \  project once:
//                             T project_query(span<const T> q, span<T> fq) const        |  returns a per-query term
//                             T project_key(span<const T> k, span<T> fk) const         /   returns a per-key term
//                             static constexpr bool separable = true;   score = fq·fk + terms (dot-product path)
//                             T combine(span<const T> fq, span<const T> fk) const;  score = combine + terms
// mask policy      required:  bool visible(size_t b, size_t h, size_t i, size_t j) const
//                  optional:  block classify(b, h, i0, i1, j0, j1) const   (ranges are [i0, i1) x [j0, j1))
//                             double fill() const   (score of masked keys; default -inf: excluded)
//                             pair<int64, int64> row_span(b, h, i) const  (visible keys are exactly [first, last))
//                             auto bind(const problem&) const   (validate sizes, precompute)
// score modifier   required:  U operator()(U s, size_t b, size_t h, size_t i, size_t j) const  (U = float, double)
//                  optional:  void apply_row(T* s, size_t n, b, h, i, j0) const  (vectorised row)
//                             auto bind(const problem&) const
#include "problem.hpp"

#include <boost/hana.hpp>

#include <cstddef>
#include <span>
#include <type_traits>

namespace xattn::caps {

namespace hana = boost::hana;

inline constexpr auto has_bind = hana::is_valid([](auto&& p) -> decltype(p.bind(std::declval<const problem&>())) {});
inline constexpr auto has_validate = hana::is_valid([](auto&& p) -> decltype(p.validate(std::size_t{}, std::size_t{})) {});
inline constexpr auto has_features = hana::is_valid([](auto&& p) -> decltype(p.feature_size(std::size_t{}, std::size_t{})) {});
inline constexpr auto has_combine = hana::is_valid(
    [](auto&& p) -> decltype(p.combine(std::span<const float>{}, std::span<const float>{})) {});
inline constexpr auto has_classify = hana::is_valid([](auto&& m) -> decltype(m.classify(
    std::size_t{}, std::size_t{}, std::size_t{}, std::size_t{}, std::size_t{}, std::size_t{})) {});
inline constexpr auto has_fill = hana::is_valid([](auto&& m) -> decltype(m.fill()) {});
inline constexpr auto has_row_span =
    hana::is_valid([](auto&& m) -> decltype(m.row_span(std::size_t{}, std::size_t{}, std::size_t{})) {});
inline constexpr auto has_apply_row = hana::is_valid([](auto&& op) -> decltype(op.apply_row(
    static_cast<float*>(nullptr), std::size_t{}, std::size_t{}, std::size_t{}, std::size_t{}, std::size_t{})) {});

template <class P>
constexpr bool separable() {
  if constexpr (requires { P::separable; }) return P::separable;
  return false;
}

template <class P, class T>
concept scoring_policy = requires(const P& p, std::span<const T> q, std::span<const T> k) {
  { p(q, k) } -> std::convertible_to<T>;
};

template <class M>
concept mask_policy = requires(const M& m, std::size_t n) {
  { m.visible(n, n, n, n) } -> std::convertible_to<bool>;
};

template <class Op, class T>
concept score_modifier = requires(const Op& op, T s, std::size_t n) {
  { op(s, n, n, n, n) } -> std::convertible_to<T>;
};

/// bind(p, problem): the policy's own bind() when it has one, else the policy itself.
template <class P>
auto bind(const P& p, const problem& pr) {
  if constexpr (decltype(has_bind(p))::value)
    return p.bind(pr);
  else
    return p;
}

}  // namespace xattn::caps
