// Runs the example docs/training.md quotes from dsl/training_examples.hpp: gradient descent on the
// queries must approach a target that queries q* produce, and its first gradient must agree with a
// central finite difference of the forward pass.
#include "support/random.hpp"
#include "training_examples.hpp"

#include <catch2/catch.hpp>

using namespace xattn;

TEST_CASE("training guide: SGD on the queries drives the loss down") {
  testing::rng rng(31);
  const xt::xtensor<float, 4> q_star = rng.tensor<float>({1, 2, 12, 16}, -2, 2), k = rng.tensor<float>({1, 2, 12, 16}),
                              v = rng.tensor<float>({1, 2, 12, 8});
  const xt::xtensor<float, 4> target = eval(softmax(mask(ref(q_star) * trans(ref(k)) / 4.0f, causal())) * ref(v));
  xt::xtensor<float, 4> q = q_star + rng.tensor<float>({1, 2, 12, 16});

  // the first step's gradient against a finite difference of the loss in one query element
  auto loss = [&](const xt::xtensor<float, 4>& qq) {
    const xt::xtensor<double, 4> d =
        reference(softmax(mask(ref(qq) * trans(ref(k)) / 4.0f, causal())) * ref(v)).output - xt::cast<double>(target);
    return 0.5 * xt::sum(d * d)();
  };
  xt::xtensor<float, 4> probe = q;
  const auto e = softmax(mask(ref(probe) * trans(ref(k)) / 4.0f, causal())) * ref(v);
  const auto f = eval_with_lse(e);
  const auto g = grad(e, f, xt::xtensor<float, 4>(f.output - target));
  const float x = probe(0, 1, 5, 3), h = 1e-2f;
  xt::xtensor<float, 4> up = probe, down = probe;
  up(0, 1, 5, 3) = x + h;
  down(0, 1, 5, 3) = x - h;
  CHECK(g.dq(0, 1, 5, 3) == Approx((loss(up) - loss(down)) / (2 * h)).epsilon(1e-2).margin(1e-4));

  const auto losses = dsl::training::fit_queries(q, k, v, target, 60, 0.5f);
  INFO("loss " << losses.front() << " -> " << losses.back());
  CHECK(losses.back() < 0.2f * losses.front());  // measured: 0.478 -> 0.059
  for (std::size_t n = 1; n < losses.size(); ++n) CHECK(losses[n] <= losses[n - 1] * 1.0001f);
}
