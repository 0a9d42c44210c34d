#pragma once
// The softmax term's gradient. A term holds no value, so its dP is 0 and the softmax's backward
// gives row (b, h, i) the gradient −p_t · Δ at its logit t(b, h), with p_t = e^{t − lse} and
// Δ = rowsum(dO ∘ O): one pass over the rows, in double, after the attention's backward (which
// needs nothing else: the term is already in each row's lse). The term adds the sum over (b, h)'s
// rows to its parameters (the sinks: per head).
#include "../../policy/terms/term.hpp"
#include "backward.hpp"

#include <xtensor/xtensor.hpp>

#include <cmath>
#include <vector>

namespace xattn {

/// The gradients of term's parameters from the backward's inputs over the rows of pr, in double,
/// as Acc (empty when it has none).
template <class Acc, softmax_term Tm, class DO, class O>
xt::xtensor<Acc, 1> term_gradients(const Tm& term, const problem& pr, const backward_inputs<Acc, DO, O>& in) {
  std::vector<double> d(term.parameters(pr), 0.0);
  if (!d.empty())
    for (std::size_t b = 0; b < pr.batch; ++b)
      for (std::size_t h = 0; h < pr.q_heads; ++h) {
        const double t = term.logit(b, h);
        if (std::isinf(t)) continue;  // no term in these rows
        double sum = 0;
        for (std::size_t i = 0; i < pr.q_len; ++i) {
          const DO* g = in.d_out.row(b, h, i);
          const O* o = in.out.row(b, h, i);
          double delta = 0;
          for (std::size_t c = 0; c < pr.v_dim; ++c)
            delta += double(g[std::ptrdiff_t(c) * in.d_out.inner_stride()]) *
                     double(o[std::ptrdiff_t(c) * in.out.inner_stride()]);
          sum += std::exp(t - double(in.lse(b, h, i))) * delta;
        }
        term.add_gradient(b, h, -sum, d.data());
      }
  xt::xtensor<Acc, 1> r = xt::zeros<Acc>({d.size()});
  for (std::size_t n = 0; n < d.size(); ++n) r(n) = Acc(d[n]);
  return r;
}

}  // namespace xattn
