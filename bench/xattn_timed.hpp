// The timed xattn call every fused variant shares (fp32 and 16-bit operands): the shape table's
// attention, scaled by 1/√D, causal bottom-right when the shape says so, written into o.
#pragma once

#include "common.hpp"

#include <xattn/xattn.hpp>

#include <cmath>

namespace xattn_bench {

template <class Q, class K, class V, class O>
void time_xattn(benchmark::State& state, const attention_shape& s, const Q& q, const K& k, const V& v, O& o,
                int threads) {
  auto Qr = xattn::ref(q);
  auto Kr = xattn::ref(k);
  auto Vr = xattn::ref(v);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const xattn::schedule sch{.threads = threads};  // blocks chosen by the library, as for a user
  if (s.causal)
    run_timed(state, attention_flop(s), [&] {
      xattn::eval_into(softmax(mask(Qr * trans(Kr) * scale, xattn::causal(xattn::align::bottom_right))) * Vr, o, sch);
    });
  else
    run_timed(state, attention_flop(s), [&] { xattn::eval_into(softmax(Qr * trans(Kr) * scale) * Vr, o, sch); });
}

}  // namespace xattn_bench
