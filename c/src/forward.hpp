#pragma once
// The C interface's forward: the runtime choices of forward_args turned into one of a few
// compiled-in expressions (softcap or not; no mask, causal() or window(), each with lengths or
// not; sinks or not; the output's type), each the C++ DSL's own fused pass on the caller's memory.
#include "args.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace xattn::c_api {

namespace detail {

/// f(true_type) or f(false_type): a runtime flag as a compile-time one.
template <class F>
void with_flag(bool on, F&& f) {
  if (on)
    f(std::true_type{});
  else
    f(std::false_type{});
}

template <class Acc, class E, class O>
void write(const forward_args& a, const E& e, O* out) {
  if (a.lse != nullptr) {
    eval_with_lse_into(e, out, a.out.shape, a.out.strides, static_cast<Acc*>(a.lse), a.lse_shape, a.lse_strides, a.sch);
  } else {
    // the log-sum-exp is computed anyway; a scratch row of it costs nothing next to the pass
    const std::array<std::size_t, 3> shape{a.out.shape[0], a.out.shape[1], a.out.shape[2]};
    std::vector<Acc> scratch(shape[0] * shape[1] * shape[2]);
    const std::array<std::ptrdiff_t, 3> strides{std::ptrdiff_t(shape[1] * shape[2]), std::ptrdiff_t(shape[2]), 1};
    eval_with_lse_into(e, out, a.out.shape, a.out.strides, scratch.data(), shape, strides, a.sch);
  }
}

}  // namespace detail

template <class T>
void forward_as(const forward_args& a) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const auto Q = ref(static_cast<const T*>(a.q.data), a.q.shape, a.q.strides);
  const auto K = ref(static_cast<const T*>(a.k.data), a.k.shape, a.k.strides);
  const auto V = ref(static_cast<const T*>(a.v.data), a.v.shape, a.v.strides);
  xt::xtensor<double, 1> sink_values = xt::zeros<double>({a.sinks.size()});
  std::copy(a.sinks.begin(), a.sinks.end(), sink_values.begin());
  const auto scores = Q * trans(K) * a.scale;
  detail::with_flag(a.softcap > 0, [&](auto capped) {
    const auto s = [&] {
      if constexpr (decltype(capped)::value)
        return softcap(scores, a.softcap);
      else
        return scores;
    }();
    const auto run = [&](const auto& masked) {
      detail::with_flag(!a.sinks.empty(), [&](auto with_sinks) {
        const auto weights = [&] {
          if constexpr (decltype(with_sinks)::value)
            return softmax(masked, sinks(sink_values));
          else
            return softmax(masked);
        }();
        if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>)  // 16-bit: out in T or float
          if (a.out_dtype == XATTN_F32) return detail::write<Acc>(a, weights * V, static_cast<float*>(a.out.data));
        detail::write<Acc>(a, weights * V, static_cast<T*>(a.out.data));
      });
    };
    // causal alone is the DSL's causal(); any window bound makes it one window (the causal bound
    // folded into its right side); lengths come outermost, as a user writes them
    const auto with_lengths = [&](const auto& m) {
      if (a.lengths)
        run(mask(m, *a.lengths));
      else
        run(m);
    };
    if (a.band && a.windowed)
      with_lengths(mask(s, window(a.left, a.right, a.where)));
    else if (a.band)
      with_lengths(mask(s, causal(a.where)));
    else
      with_lengths(s);
  });
}

}  // namespace xattn::c_api
