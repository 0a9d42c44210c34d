// Build cost of training: one translation unit that evaluates a user scoring policy (the
// catalogue's Laplace kernel, on the pair-with-features path) and fits its learnable bandwidth by
// gradient descent. bench/compile_probe.sh times compiling it.
#include "catalogue/laplace_kernel.hpp"

#include <xattn/xattn.hpp>

#include <vector>

std::vector<double> fit_bandwidth(dsl::laplace_kernel& kernel, const xt::xtensor<float, 4>& q,
                                  const xt::xtensor<float, 4>& k, const xt::xtensor<float, 4>& v,
                                  const xt::xtensor<float, 4>& target, int steps, double lr) {
  using namespace xattn;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const auto e = softmax(mask(score(kernel, ref(q), ref(k)), causal())) * ref(v);
    const auto f = eval_with_lse(e);
    const xt::xtensor<float, 4> d_out = f.output - target;
    losses.push_back(0.5 * xt::sum(d_out * d_out)());
    const auto g = grad(e, f, d_out);
    kernel.bandwidth.value -= lr * g.dscore[0];
  }
  return losses;
}
