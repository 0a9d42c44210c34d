// The timed xattn call every fused variant shares (fp32 and 16-bit operands): the shape table's
// attention, scaled by 1/√D, causal bottom-right when the shape says so, written into o.
#pragma once

#include "common.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xtensor.hpp>

#include <cmath>

namespace xattn_bench {

/// The timed call; with a sinks(t) argument the softmax takes it (rows xattn_sinks).
template <class Q, class K, class V, class O, class... Sinks>
void time_xattn(benchmark::State& state, const attention_shape& s, const Q& q, const K& k, const V& v, O& o,
                int threads, const Sinks&... sinks) {
  auto Qr = xattn::ref(q);
  auto Kr = xattn::ref(k);
  auto Vr = xattn::ref(v);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const xattn::schedule sch{.threads = threads};  // blocks chosen by the library, as for a user
  if (s.causal)
    run_timed(state, attention_flop(s), [&] {
      xattn::eval_into(softmax(mask(Qr * trans(Kr) * scale, xattn::causal(xattn::align::bottom_right)), sinks...) * Vr,
                       o, sch);
    });
  else
    run_timed(state, attention_flop(s),
              [&] { xattn::eval_into(softmax(Qr * trans(Kr) * scale, sinks...) * Vr, o, sch); });
}

/// One sink logit per head for the xattn_sinks rows: values of the size gpt-oss learns.
inline xt::xtensor<float, 1> bench_sinks(int heads) {
  xt::xtensor<float, 1> t = xt::xtensor<float, 1>::from_shape({std::size_t(heads)});
  for (int h = 0; h < heads; ++h) t(std::size_t(h)) = 0.5f * float(h % 5) - 1.0f;
  return t;
}

}  // namespace xattn_bench
