#pragma once
// What a policy is and what it can do. A user's policy is a plain type with the members below;
// nothing is declared in a base class. The words score(), mask() and modify() check the required
// members (check.hpp); the plan picks the fastest path the optional ones allow. Members may be
// written for float, for double, or as templates: the kernel calls them in its accumulator type
// when they accept it, otherwise in the one floating type they do accept (rows are converted).
//
// scoring policy   required:  T operator()(span<const T> q, span<const T> k) const   (T = float, double)
//                  optional:  void validate(size_t dq, size_t dk) const   (throws; without it dq == dk is required)
//                             size_t feature_size(size_t dq, size_t dk) const          \  project once:
//                             T project_query(span<const T> q, span<T> fq) const        |  returns a per-query term
//                             T project_key(span<const T> k, span<T> fk) const         /   returns a per-key term
//                             static constexpr bool separable = true;   score = fq·fk + terms (dot-product path)
//                             T combine(span<const T> fq, span<const T> fk) const;  score = combine + terms
// mask policy      required:  bool visible(size_t b, size_t h, size_t i, size_t j) const
//                  optional:  block classify(b, h, i0, i1, j0, j1) const   (ranges are [i0, i1) x [j0, j1))
//                             double fill() const   (score of masked keys; default -inf: excluded)
//                             pair<int64, int64> row_span(b, h, i) const  (visible keys are exactly [first, last);
//                                                                          with hide_row: within it)
//                             void hide_row(T* s, size_t n, b, h, i, j0, T value) const  (s[c] = value where hidden)
//                             auto bind(const problem&) const   (validate sizes, precompute)
// score modifier   required:  U operator()(U s, size_t b, size_t h, size_t i, size_t j) const  (U = float, double)
//                  optional:  void apply_row(T* s, size_t n, b, h, i, j0) const  (vectorised row)
//                             void backward_row(const T* s, T* g, size_t n, b, h, i, j0, T* dp) const
//                               (its own backward of a row: g in, d/d output; out, d/d input s; dp[k] +=
//                                d/d its k-th learnable, dp null without learnables; g[c] == 0: skip)
//                             auto bind(const problem&) const
#include "problem.hpp"

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>

namespace xattn {

// ---- scoring policies -------------------------------------------------------------------------

template <class P, class T>
concept scores_in = requires(const P& p, std::span<const T> q, std::span<const T> k) {
  { p(q, k) } -> std::convertible_to<T>;
};

template <class P>
concept scoring_policy = scores_in<P, float> || scores_in<P, double>;

template <class P>
concept declares_features = requires(const P& p, std::size_t n) {
  p.feature_size(n, n);
};

template <class P, class T>
concept projects_in = requires(const P& p, std::span<const T> x, std::span<T> f, std::size_t n) {
  { p.feature_size(n, n) } -> std::convertible_to<std::size_t>;
  { p.project_query(x, f) } -> std::convertible_to<T>;
  { p.project_key(x, f) } -> std::convertible_to<T>;
};

template <class P, class T>
concept combines_in = projects_in<P, T> && requires(const P& p, std::span<const T> f) {
  { p.combine(f, f) } -> std::convertible_to<T>;
};

template <class P>
concept declares_combine = requires {
  &P::combine;
}
|| requires(const P& p, std::span<const float> f) { p.combine(f, f); }
|| requires(const P& p, std::span<const double> f) { p.combine(f, f); };

template <class P>
concept validates_sizes = requires(const P& p, std::size_t n) {
  p.validate(n, n);
};

template <class P>
constexpr bool separable() {
  if constexpr (requires { P::separable; })
    return P::separable;
  else
    return false;
}

namespace detail {

/// The first of (Want, float, double) for which Has<T> holds; Want when none does.
template <class Want, template <class> class Has>
using first_accepted_t = std::conditional_t<
    Has<Want>::value, Want,
    std::conditional_t<Has<float>::value, float, std::conditional_t<Has<double>::value, double, Want>>>;

template <class P>
struct scores_in_t {
  template <class T>
  using test = std::bool_constant<scores_in<P, T>>;
};
template <class P>
struct projects_in_t {
  template <class T>
  using test = std::bool_constant<projects_in<P, T>>;
};
template <class P>
struct combines_in_t {
  template <class T>
  using test = std::bool_constant<combines_in<P, T>>;
};

}  // namespace detail

/// The type operator() of P is called in when the kernel computes in Want.
template <class P, class Want>
using score_scalar_t = detail::first_accepted_t<Want, detail::scores_in_t<P>::template test>;
/// The type P's projections are called in (and its features kept in, on the pair paths).
template <class P, class Want>
using projection_scalar_t = detail::first_accepted_t<Want, detail::projects_in_t<P>::template test>;
/// The type P's projections and combine are called in, together.
template <class P, class Want>
using combine_scalar_t = detail::first_accepted_t<Want, detail::combines_in_t<P>::template test>;

// ---- masks and modifiers ----------------------------------------------------------------------

template <class M>
concept mask_policy = requires(const M& m, std::size_t n) {
  { m.visible(n, n, n, n) } -> std::convertible_to<bool>;
};

template <class Op, class T>
concept modifies_in = requires(const Op& op, T s, std::size_t n) {
  { op(s, n, n, n, n) } -> std::convertible_to<T>;
};

template <class Op>
concept score_modifier = modifies_in<Op, float> || modifies_in<Op, double>;

template <class M>
concept has_classify = requires(const M& m, std::size_t n) {
  { m.classify(n, n, n, n, n, n) } -> std::convertible_to<block>;
};

template <class M>
concept has_fill = requires(const M& m) {
  { m.fill() } -> std::convertible_to<double>;
};

template <class M>
concept has_row_span = requires(const M& m, std::size_t n) {
  m.row_span(n, n, n);
};

template <class M, class T>
concept has_hide_row = requires(const M& m, T* s, std::size_t n) {
  m.hide_row(s, n, n, n, n, n, T(0));
};

template <class Op, class T>
concept has_backward_row = requires(const Op& op, const T* s, T* g, std::size_t n, T* dp) {
  op.backward_row(s, g, n, n, n, n, n, dp);
};

template <class Op, class T>
concept has_apply_row = requires(const Op& op, T* s, std::size_t n) {
  op.apply_row(s, n, n, n, n, n);
};

template <class X>
concept has_bind = requires(const X& x, const problem& pr) {
  x.bind(pr);
};

/// The policy bound to the sizes: its own bind(problem) when it has one, else the policy itself.
template <class X>
auto bound(const X& x, const problem& pr) {
  if constexpr (has_bind<X>)
    return x.bind(pr);
  else
    return x;
}

}  // namespace xattn
