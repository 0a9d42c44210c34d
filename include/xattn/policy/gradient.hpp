#pragma once
// How the backward differentiates a scoring policy. The fused backward works in feature space:
// it projects every query and key once (fq, α; fk, β), computes dS tile by tile, accumulates the
// gradients at the features (dfq, dα; dfk, dβ) and finally maps them back through the projections.
// Each step uses the policy's analytic member when it has one, else reverse-mode automatic
// differentiation of the policy's generic code (var.hpp: one evaluation on xattn::var per pair or
// row, whatever the number of inputs), which also differentiates the learnable parameters the
// policy lists in parameters() (learnable.hpp).
//
// optional analytic members (T = the accumulator type, float or double):
//   using parameter_gradients = ...;   what grad(e).dscore holds (default: learned_gradients when the
//                                      policy lists learnables, else no_parameters)
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
#include "../learnable.hpp"
#include "concepts.hpp"
#include "pair_lanes.hpp"

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
  else if constexpr (declares_learnables<P>)
    return std::type_identity<learned_gradients>{};
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

/// Whether the backward differentiates P's learnables itself (P has no analytic parameter gradients).
template <class P>
constexpr bool learns_automatically() {
  return declares_learnables<P> && !declares_parameter_gradients<P>;
}

/// The learnables P's backward differentiates automatically (none when it has analytic members).
template <class P>
parameter_slots automatic_slots(const P& p) {
  if constexpr (learns_automatically<P>())
    return parameter_slots(p);
  else
    return {};
}

template <class P>
parameter_gradients_t<P> zero_parameter_gradients(const P& p) {
  if constexpr (declares_parameter_gradients<P>)
    return p.zero_gradients();
  else if constexpr (declares_learnables<P>)
    return parameter_slots(p).zeros();
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

/// dx = Σ_f df[f] · ∂out_f/∂x + dterm · ∂term/∂x for (out, term) = project(x), and the
/// learnables' share (slots) added into dparams: one evaluation on the tape, one sweep.
template <class T, class Project, class DParams>
void project_backward_reverse(Project&& project, std::span<const T> x, std::span<const T> df, T dterm, std::span<T> dx,
                              const parameter_slots& slots, DParams&& dparams) {
  using V = var<T>;
  tape<T>& t = tape<T>::local();
  t.clear();
  thread_local std::vector<V> xv, out;
  thread_local std::vector<std::pair<std::uint32_t, T>> seeds;
  xv.resize(x.size());
  for (std::size_t n = 0; n < x.size(); ++n) xv[n] = t.input(x[n]);
  out.assign(df.size(), V{});
  const V term = project(std::span<const V>(xv), std::span<V>(out));
  seeds.assign(1, {term.id, dterm});
  for (std::size_t f = 0; f < df.size(); ++f) seeds.push_back({out[f].id, df[f]});
  t.sweep(std::span<const std::pair<std::uint32_t, T>>(seeds));
  for (std::size_t n = 0; n < x.size(); ++n) dx[n] = t.adjoint(xv[n]);
  if (slots.size()) add_learned_adjoints(t, slots, T(1), dparams);
}

/// dfq += ds · ∂c/∂fq, dfk += ds · ∂c/∂fk and dp += ds · ∂c/∂(learnables) for c = pair(fq, fk):
/// one evaluation on the tape, one sweep.
template <class T, class Pair>
void pair_backward_reverse(Pair&& pair, std::span<const T> fq, std::span<const T> fk, T ds, std::span<T> dfq,
                           std::span<T> dfk, const parameter_slots& slots, std::span<T> dp) {
  using V = var<T>;
  tape<T>& t = tape<T>::local();
  t.clear();
  thread_local std::vector<V> qv, kv;
  qv.resize(fq.size());
  kv.resize(fk.size());
  for (std::size_t n = 0; n < fq.size(); ++n) qv[n] = t.input(fq[n]);
  for (std::size_t n = 0; n < fk.size(); ++n) kv[n] = t.input(fk[n]);
  t.sweep(V(pair(std::span<const V>(qv), std::span<const V>(kv))), ds);
  for (std::size_t n = 0; n < fq.size(); ++n) dfq[n] += t.adjoint(qv[n]);
  for (std::size_t n = 0; n < fk.size(); ++n) dfk[n] += t.adjoint(kv[n]);
  if (slots.size()) add_learned_adjoints(t, slots, T(1), dp);
}

}  // namespace detail

/// Whether P differentiates in T at all: analytically, or by its code running on var<T>.
template <class P, class T>
constexpr bool differentiable_in() {
  const bool projections = !declares_features<P> || projects_backward_in<P, T> || projects_in<P, var<T>>;
  bool pair = true;
  if constexpr (!separable<P>()) {
    if constexpr (declares_features<P>)
      pair = combines_backward_in<P, T> || combines_in<P, var<T>>;
    else
      pair = scores_in<P, var<T>>;
  }
  return projections && pair;
}

/// The policy's projection backward for queries (keys = false) or keys: analytic, or on the tape
/// (slots: automatic_slots(p), whose gradients are added into g).
template <class P, class T>
void project_backward(const P& p, bool keys, std::span<const T> x, std::span<const T> df, T dterm, std::span<T> dx,
                      const parameter_slots& slots, parameter_gradients_t<P>& g) {
  if constexpr (projects_backward_in<P, T>) {
    if (keys)
      p.project_key_backward(x, df, dterm, dx, g);
    else
      p.project_query_backward(x, df, dterm, dx, g);
  } else {
    auto project = [&](auto in, auto out) { return keys ? p.project_key(in, out) : p.project_query(in, out); };
    if constexpr (learns_automatically<P>())
      detail::project_backward_reverse<T>(project, x, df, dterm, dx, slots, g.d);
    else
      detail::project_backward_reverse<T>(project, x, df, dterm, dx, parameter_slots{}, std::span<double>{});
  }
}

/// Number of the per-pair step's parameters (accumulated per pair by the backward): the analytic
/// combine's, or the learnables of a pair policy differentiated automatically.
template <class P>
std::size_t combine_parameter_count(const P& p) {
  if constexpr (requires { p.combine_parameter_count(); })
    return p.combine_parameter_count();
  else if constexpr (learns_automatically<P>() && !separable<P>())
    return parameter_slots(p).size();
  else
    return 0;
}

/// The per-pair backward: ds · ∂score/∂(fq, fk, per-pair parameters) added into dfq, dfk, dp.
/// Policies without projections pair the raw rows through operator(); slots as in project_backward.
template <class P, class T>
void pair_backward(const P& p, std::span<const T> fq, std::span<const T> fk, T ds, std::span<T> dfq, std::span<T> dfk,
                   const parameter_slots& slots, std::span<T> dp) {
  if constexpr (combines_backward_in<P, T>) {
    p.combine_backward(fq, fk, ds, dfq, dfk, dp);
  } else if constexpr (declares_features<P>) {
    detail::pair_backward_reverse<T>([&](auto a, auto b) { return p.combine(a, b); }, fq, fk, ds, dfq, dfk, slots, dp);
  } else {
    detail::pair_backward_reverse<T>([&](auto a, auto b) { return p(a, b); }, fq, fk, ds, dfq, dfk, slots, dp);
  }
}

/// Whether the per-pair backward of P runs on lanes of pairs (pair_lanes.hpp): P has no analytic
/// combine_backward, and its per-pair code is generic.
template <class P, class T>
constexpr bool pairs_in_lanes() {
  if constexpr (combines_backward_in<P, T>)
    return false;
  else
    return pair_code_in_lanes<P, T>();
}

/// dp += g · ∂op(s)/∂(op's learnables) for a score modifier at one score (g: the gradient at its
/// output): one evaluation on the tape, with s a constant, one sweep.
template <class T, class Op>
void modifier_parameters_backward(const Op& op, T s, std::size_t b, std::size_t h, std::size_t i, std::size_t j, T g,
                                  const parameter_slots& slots, std::span<T> dp) {
  tape<T>& t = tape<T>::local();
  t.clear();
  t.sweep(var<T>(op(var<T>(s), b, h, i, j)), g);
  add_learned_adjoints(t, slots, T(1), dp);
}

}  // namespace xattn
