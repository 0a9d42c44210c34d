#pragma once
// The runtime choices of forward_args turned into one of a few compiled-in expressions: softcap
// or not; no mask, causal() or window(), each with lengths or not; sinks or not. The forward and
// the backward both build theirs here, so they differentiate what ran.
#include "args.hpp"

#include <algorithm>
#include <type_traits>

namespace xattn::c_api {

/// f(true_type) or f(false_type): a runtime flag as a compile-time one.
template <class F>
void with_flag(bool on, F&& f) {
  if (on)
    f(std::true_type{});
  else
    f(std::false_type{});
}

/// f(softmax(masked scores [, sinks]) * V) for the terminals Q, K, V, as a C++ user writes it.
template <class Q, class K, class V, class F>
void with_attention(const forward_args& a, const Q& q, const K& k, const V& v, F&& f) {
  xt::xtensor<double, 1> sink_values = xt::zeros<double>({a.sinks.size()});
  std::copy(a.sinks.begin(), a.sinks.end(), sink_values.begin());
  const auto scores = q * trans(k) * a.scale;
  with_flag(a.softcap > 0, [&](auto capped) {
    const auto s = [&] {
      if constexpr (decltype(capped)::value)
        return softcap(scores, a.softcap);
      else
        return scores;
    }();
    const auto run = [&](const auto& masked) {
      with_flag(!a.sinks.empty(), [&](auto with_sinks) {
        if constexpr (decltype(with_sinks)::value)
          f(softmax(masked, sinks(sink_values)) * v);
        else
          f(softmax(masked) * v);
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
    if (a.windowed)
      with_lengths(mask(s, window(a.left, a.right, a.where)));
    else if (a.band)
      with_lengths(mask(s, causal(a.where)));
    else
      with_lengths(s);
  });
}

}  // namespace xattn::c_api
