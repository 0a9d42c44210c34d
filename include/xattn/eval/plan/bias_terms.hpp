#pragma once
// The bias(t) terms among a plan's modifiers, and how their gradients are gathered: a gradient in
// the shape of t, seen through t's broadcast against the scores (stride 0 on broadcast axes), so
// that adding the full (B, H, Sq, Skv) gradient through it sums over those axes.
#include "../../hana.hpp"
#include "../../policy/ops/bias.hpp"
#include "positions.hpp"

#include <xtensor/xarray.hpp>

#include <utility>

namespace xattn {

template <class Op>
inline constexpr bool is_tensor_bias_v = false;
template <class T>
inline constexpr bool is_tensor_bias_v<tensor_bias<T>> = true;
/// A bias term shifted to a block of a larger problem (context parallelism) is a bias term: its
/// gradient, in the whole tensor's shape, receives the block's part.
template <class X>
inline constexpr bool is_tensor_bias_v<shifted<X>> = is_tensor_bias_v<X>;

/// Number of bias(t) terms among a plan's modifiers.
template <class Ops>
constexpr std::size_t count_biases() {
  return decltype(hana::count_if(std::declval<Ops>(), [](const auto& op) {
    return hana::bool_c<is_tensor_bias_v<std::decay_t<decltype(op)>>>;
  }))::value;
}

/// The tensor bias inside a (possibly shifted) bias term.
template <class T>
const tensor_bias<T>& bias_term(const tensor_bias<T>& op) {
  return op;
}
template <class X>
const auto& bias_term(const shifted<X>& op) {
  return bias_term(op.x);
}

/// A (B, H, Sq, Skv) view of g, a tensor in the shape of bias term `op`'s tensor, with the bias's
/// broadcast: adding through the view sums over the broadcast axes.
template <class A, class T>
strided_view<A> bias_gradient_view(xt::xarray<A>& g, const tensor_bias<T>& op, const problem& pr) {
  nd_ref<A> r{g.data(), op.tensor.shape, {g.strides().begin(), g.strides().end()}, {}};
  const auto v = broadcast_to_scores(r, pr, "bias(tensor)");
  return {const_cast<A*>(v.data), v.at};
}

/// bias_gradient_view of the whole problem's gradient, narrowed to the block the term sees.
template <class A, class X>
strided_view<A> bias_gradient_view(xt::xarray<A>& g, const shifted<X>& op, const problem& pr) {
  problem whole = pr;
  whole.q_len = op.x.bound.at.shape[2], whole.kv_len = op.x.bound.at.shape[3];
  strided_view<A> v = bias_gradient_view(g, op.x, whole);
  v.data += std::ptrdiff_t(op.at.q0) * v.at.stride[2] + std::ptrdiff_t(op.at.k0) * v.at.stride[3];
  v.at.shape[2] = pr.q_len, v.at.shape[3] = pr.kv_len;
  return v;
}

}  // namespace xattn
