#pragma once
// How the backward differentiates a scoring policy. The fused backward works in feature space:
// it projects every query and key once (fq, α; fk, β), computes dS tile by tile, accumulates the
// gradients at the features (dfq, dα; dfk, dβ) and finally maps them back through the projections.
// Each step uses the policy's analytic member when it has one, else forward-mode dual numbers over
// the policy's generic code (one evaluation per input element: correct for any policy written as
// a template over its scalar type, and as slow as that count says).
//
// optional analytic members (T = the accumulator type, float or double):
//   using parameter_gradients = ...;   what grad(e).dscore holds (default: no_parameters)
//   parameter_gradients zero_gradients() const;
//   void project_query_backward(span<const T> q, span<const T> dfq, T dα, span<T> dq, parameter_gradients&) const;
//   void project_key_backward(span<const T> k, span<const T> dfk, T dβ, span<T> dk, parameter_gradients&) const;
//        (write dq / dk; add the parameters' share into the gradients)
//   size_t combine_parameter_count() const;
//   void combine_backward(span<const T> fq, span<const T> fk, T ds, span<T> dfq, span<T> dfk, span<T> dp) const;
//        (add ds · ∂combine/∂fq into dfq, ∂/∂fk into dfk, ∂/∂(combine's parameters) into dp)
//   void add_combine_gradients(span<const double> dp, parameter_gradients&) const;
//   size_t combine_saved_size(size_t n) const;   values per pair that combine_backward can reuse
//   T combine_saving(span<const T> fq, span<const T> fk, span<T> saved) const;
//        (combine(fq, fk), bit for bit, also writing those values: the backward's recomputed score)
//   void combine_backward_saved(span<const T> saved, T ds, span<T> dfq, span<T> dfk, span<T> dp) const;
//        (combine_backward from them: additive saves tanh(fq + fk) instead of evaluating it twice)
// and on parameter_gradients, for context parallelism (mpi::context::grad sums the ranks' parts):
//   auto parts();   std::tie of its members, each a double or a contiguous tensor of double
#include "../dual.hpp"
#include "concepts.hpp"

#include <algorithm>
#include <span>
#include <tuple>
#include <vector>

namespace xattn {

/// A scoring policy without parameters (Q * trans(K), scaled_dot, most user policies).
struct no_parameters {};

template <class P>
concept declares_parameter_gradients = requires(const P& p) {
  typename P::parameter_gradients;
  { p.zero_gradients() } -> std::same_as<typename P::parameter_gradients>;
};

namespace detail {
template <class P>
auto parameter_gradients_of() {
  if constexpr (declares_parameter_gradients<P>)
    return std::type_identity<typename P::parameter_gradients>{};
  else
    return std::type_identity<no_parameters>{};
}
}  // namespace detail

/// What grad(e).dscore holds for policy P.
template <class P>
using parameter_gradients_t = typename decltype(detail::parameter_gradients_of<P>())::type;

/// Whether gradients G can be summed part by part (no_parameters: nothing to sum).
template <class G>
concept summable_by_parts = std::same_as<G, no_parameters> || requires(G& g) {
  std::tuple_size<decltype(g.parts())>{};
};

template <class P>
parameter_gradients_t<P> zero_parameter_gradients(const P& p) {
  if constexpr (declares_parameter_gradients<P>)
    return p.zero_gradients();
  else
    return {};
}

template <class P, class T>
concept projects_backward_in = requires(const P& p, std::span<const T> x, std::span<T> y, T t,
                                        parameter_gradients_t<P>& g) {
  p.project_query_backward(x, x, t, y, g);
  p.project_key_backward(x, x, t, y, g);
};

template <class P, class T>
concept combines_backward_in = requires(const P& p, std::span<const T> f, std::span<T> y, T t,
                                        std::span<const double> dp, parameter_gradients_t<P>& g) {
  p.combine_backward(f, f, t, y, y, y);
  { p.combine_parameter_count() } -> std::convertible_to<std::size_t>;
  p.add_combine_gradients(dp, g);
};

template <class P, class T>
concept combines_saved_in = combines_backward_in<P, T> &&
    requires(const P& p, std::span<const T> f, std::span<T> y, T t) {
  { p.combine_saved_size(std::size_t{}) } -> std::convertible_to<std::size_t>;
  { p.combine_saving(f, f, y) } -> std::convertible_to<T>;
  p.combine_backward_saved(f, t, y, y, y);
};

namespace detail {

/// dx[n] = Σ_f df[f] · ∂out_f/∂x_n + dterm · ∂term/∂x_n for out, term = project(x), by one dual
/// evaluation per element of x.
template <class T, class Project>
void project_backward_dual(Project&& project, std::span<const T> x, std::span<const T> df, T dterm, std::span<T> dx) {
  using D = dual<T>;
  std::vector<D> xd(x.begin(), x.end()), out(df.size());
  for (std::size_t n = 0; n < x.size(); ++n) {
    xd[n].d = T(1);
    const D term = project(std::span<const D>(xd), std::span<D>(out));
    xd[n].d = T(0);
    T s = dterm * term.d;
    for (std::size_t f = 0; f < df.size(); ++f) s += df[f] * out[f].d;
    dx[n] = s;
  }
}

/// dfq += ds · ∂c/∂fq and dfk += ds · ∂c/∂fk for c = pair(fq, fk), one dual evaluation per element.
template <class T, class Pair>
void pair_backward_dual(Pair&& pair, std::span<const T> fq, std::span<const T> fk, T ds, std::span<T> dfq,
                        std::span<T> dfk) {
  using D = dual<T>;
  thread_local std::vector<D> qd, kd;
  qd.assign(fq.begin(), fq.end());
  kd.assign(fk.begin(), fk.end());
  auto one = [&](std::vector<D>& x, std::size_t n) {
    x[n].d = T(1);
    const T d = T(pair(std::span<const D>(qd), std::span<const D>(kd)).d);
    x[n].d = T(0);
    return d;
  };
  for (std::size_t n = 0; n < fq.size(); ++n) dfq[n] += ds * one(qd, n);
  for (std::size_t n = 0; n < fk.size(); ++n) dfk[n] += ds * one(kd, n);
}

}  // namespace detail

/// Whether P differentiates in T at all: analytically, or by its code running on dual<T>.
template <class P, class T>
constexpr bool differentiable_in() {
  const bool projections = !declares_features<P> || projects_backward_in<P, T> || projects_in<P, dual<T>>;
  bool pair = true;
  if constexpr (!separable<P>()) {
    if constexpr (declares_features<P>)
      pair = combines_backward_in<P, T> || combines_in<P, dual<T>>;
    else
      pair = scores_in<P, dual<T>>;
  }
  return projections && pair;
}

/// The policy's projection backward for queries (keys = false) or keys: analytic or by duals.
template <class P, class T>
void project_backward(const P& p, bool keys, std::span<const T> x, std::span<const T> df, T dterm, std::span<T> dx,
                      parameter_gradients_t<P>& g) {
  if constexpr (projects_backward_in<P, T>) {
    if (keys)
      p.project_key_backward(x, df, dterm, dx, g);
    else
      p.project_query_backward(x, df, dterm, dx, g);
  } else {
    auto project = [&](auto in, auto out) { return keys ? p.project_key(in, out) : p.project_query(in, out); };
    detail::project_backward_dual<T>(project, x, df, dterm, dx);
  }
}

/// Number of the combine step's parameters (accumulated per pair by the backward).
template <class P>
std::size_t combine_parameter_count(const P& p) {
  if constexpr (requires { p.combine_parameter_count(); })
    return p.combine_parameter_count();
  else
    return 0;
}

/// The per-pair backward: ds · ∂score/∂(fq, fk, combine's parameters) added into dfq, dfk, dp.
/// Policies without projections pair the raw rows through operator().
template <class P, class T>
void pair_backward(const P& p, std::span<const T> fq, std::span<const T> fk, T ds, std::span<T> dfq, std::span<T> dfk,
                   std::span<T> dp) {
  if constexpr (combines_backward_in<P, T>) {
    p.combine_backward(fq, fk, ds, dfq, dfk, dp);
  } else if constexpr (declares_features<P>) {
    detail::pair_backward_dual<T>([&](auto a, auto b) { return p.combine(a, b); }, fq, fk, ds, dfq, dfk);
  } else {
    detail::pair_backward_dual<T>([&](auto a, auto b) { return p(a, b); }, fq, fk, ds, dfq, dfk);
  }
}

}  // namespace xattn
