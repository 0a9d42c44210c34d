#pragma once
// A plan evaluated over one block of a larger problem: rows [q0, q0 + Sq) and keys [k0, k0 + Skv)
// of the whole. Its masks and modifiers are bound to the whole problem (so a lengths tensor, a
// bias tensor or causal alignment are checked and read against it) and see every position shifted
// into it; dropout draws the whole problem's decisions. One mechanism for every policy, built-in or
// a user's: context parallelism evaluates each rank's rows against each travelling key block so.
#include "../../learnable.hpp"
#include "plan.hpp"
#include "resolve.hpp"

#include <cstddef>
#include <cstdint>
#include <utility>

namespace xattn {

/// Where a block starts in the whole problem.
struct positions {
  std::size_t q0 = 0, k0 = 0;
};

/// A bound mask or modifier that sees (b, h, q0 + i, k0 + j); each optional member exists exactly
/// when X has it, so the kernel keeps the same fast paths.
template <class X>
struct shifted {
  X x;
  positions at;

  bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const requires mask_policy<X> {
    return x.visible(b, h, at.q0 + i, at.k0 + j);
  }
  block classify(std::size_t b, std::size_t h, std::size_t i0, std::size_t i1, std::size_t j0,
                 std::size_t j1) const requires has_classify<X> {
    return x.classify(b, h, at.q0 + i0, at.q0 + i1, at.k0 + j0, at.k0 + j1);
  }
  double fill() const requires has_fill<X> { return double(x.fill()); }
  /// The visible keys of row i, in the block's key coordinates.
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t h,
                                                 std::size_t i) const requires has_row_span<X> {
    const auto [first, last] = x.row_span(b, h, at.q0 + i);
    return {std::int64_t(first) - std::int64_t(at.k0), std::int64_t(last) - std::int64_t(at.k0)};
  }
  template <class T>
  void hide_row(T* s, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0,
                T value) const requires has_hide_row<X, T> {
    x.hide_row(s, n, b, h, at.q0 + i, at.k0 + j0, value);
  }
  auto parameters() const requires declares_learnables<X> { return x.parameters(); }
  template <class U>
  U operator()(U s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) const requires modifies_in<X, U> {
    return x(s, b, h, at.q0 + i, at.k0 + j);
  }
  template <class T>
  void apply_row(T* s, std::size_t n, std::size_t b, std::size_t h, std::size_t i,
                 std::size_t j0) const requires has_apply_row<X, T> {
    x.apply_row(s, n, b, h, at.q0 + i, at.k0 + j0);
  }
  template <class T>
  void backward_row(const T* s, T* g, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0,
                    T* dp) const requires has_backward_row<X, T> {
    x.backward_row(s, g, n, b, h, at.q0 + i, at.k0 + j0, dp);
  }
};

/// p's masks and modifiers bound to `whole` and shifted to the block at `at`; dropout too; the
/// rest of p as it is. The block's own sizes come from p's operands as usual.
template <class Plan>
auto at_positions(const Plan& p, const problem& whole, positions at) {
  auto wrap = [&](const auto& x) { return shifted<decltype(bound(x, whole))>{bound(x, whole), at}; };
  auto r = with_masks(with_ops(p, hana::transform(p.ops, wrap)), hana::transform(p.masks, wrap));
  r.drop.i0 += std::uint32_t(at.q0);
  r.drop.j0 += std::uint32_t(at.k0);
  return r;
}

}  // namespace xattn
