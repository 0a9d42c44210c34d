#pragma once
// The sinks' gradient. A sink holds no value, so its dP is 0 and the softmax's backward gives
// dt_h = −Σ_{b,i} p_sink(b,h,i) · Δ(b,h,i), with p_sink = e^{t_h − lse} and Δ = rowsum(dO ∘ O):
// one pass over the rows, in double, after the attention's backward (which needs nothing else:
// the sink is already in each row's lse).
#include "backward.hpp"

#include <xtensor/xtensor.hpp>

#include <cmath>

namespace xattn {

/// dt of sinks (Hq) from the backward's inputs over the rows of pr, in double, as Acc.
template <class Acc, class Sk, class DO, class O>
xt::xtensor<Acc, 1> sink_gradients(const Sk& sinks, const problem& pr, const backward_inputs<Acc, DO, O>& in) {
  xt::xtensor<Acc, 1> d = xt::zeros<Acc>({pr.q_heads});
  for (std::size_t h = 0; h < pr.q_heads; ++h) {
    const double t = sinks.at(h);
    if (std::isinf(t)) continue;  // no sink in this head
    double sum = 0;
    for (std::size_t b = 0; b < pr.batch; ++b)
      for (std::size_t i = 0; i < pr.q_len; ++i) {
        const DO* g = in.d_out.row(b, h, i);
        const O* o = in.out.row(b, h, i);
        double delta = 0;
        for (std::size_t c = 0; c < pr.v_dim; ++c)
          delta += double(g[std::ptrdiff_t(c) * in.d_out.inner_stride()]) *
                   double(o[std::ptrdiff_t(c) * in.out.inner_stride()]);
        sum += std::exp(t - double(in.lse(b, h, i))) * delta;
      }
    d(h) = Acc(-sum);
  }
  return d;
}

}  // namespace xattn
