#pragma once
// The examples quoted by docs/training.md; tests/docs/test_training_examples.cpp runs them.
#include "catalogue/relative_bias.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xnoalias.hpp>

#include <vector>

namespace dsl::training {

/// Gradient descent on the queries of a causal attention so that its output approaches `target`:
/// returns the loss 0.5·|out - target|² before each of `steps` steps. q (B, H, Sq, D) is updated.
inline std::vector<float> fit_queries(xt::xtensor<float, 4>& q, const xt::xtensor<float, 4>& k,
                                      const xt::xtensor<float, 4>& v, const xt::xtensor<float, 4>& target, int steps,
                                      float lr) {
  using namespace xattn;
  std::vector<float> losses;
  // [snippet fit_queries]
  const auto e = softmax(mask(ref(q) * trans(ref(k)) / 4.0f, causal())) * ref(v);  // e reads q in place
  for (int step = 0; step < steps; ++step) {
    const auto f = eval_with_lse(e);                        // forward: output and each row's log-sum-exp
    const xt::xtensor<float, 4> d_out = f.output - target;  // d loss / d output for 0.5·|out - target|²
    losses.push_back(0.5f * xt::sum(d_out * d_out)());
    const auto g = grad(e, f, d_out);  // one fused backward: g.dq, g.dk, g.dv
    xt::noalias(q) -= lr * g.dq;       // SGD, in place: `q -= ...` would move q's storage away from e's view
  }
  // [end fit_queries]
  return losses;
}

/// SGD on a user modifier's learnable table: relative position biases (catalogue/relative_bias.hpp)
/// fitted so that causal attention's output approaches `target`. Returns the loss before each
/// of `steps` steps; rb's table is updated.
inline std::vector<double> fit_relative_bias(dsl::relative_bias& rb, const xt::xtensor<float, 4>& q,
                                             const xt::xtensor<float, 4>& k, const xt::xtensor<float, 4>& v,
                                             const xt::xtensor<float, 4>& target, int steps, double lr) {
  using namespace xattn;
  std::vector<double> losses;
  // [snippet fit_relative_bias]
  for (int step = 0; step < steps; ++step) {
    const auto e = softmax(mask(modify(ref(q) * trans(ref(k)) / 4.0f, rb), causal())) * ref(v);  // copies rb
    const auto f = eval_with_lse(e);
    const xt::xtensor<float, 4> d_out = f.output - target;
    losses.push_back(0.5 * xt::sum(d_out * d_out)());
    const auto g = grad(e, f, d_out);  // g.dmodify[0]: d loss / d table, in rb.parameters()'s order
    for (std::size_t n = 0; n < rb.table.size(); ++n) rb.table[n].value -= lr * g.dmodify[0][n];
  }
  // [end fit_relative_bias]
  return losses;
}

}  // namespace dsl::training
