// Runs the examples docs/training.md quotes from dsl/training_examples.hpp: gradient descent on the
// queries must approach a target that queries q* produce, and its first gradient must agree with a
// central finite difference of the forward pass; SGD on a user modifier's learnable table must
// recover the table that produced its target.
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

TEST_CASE("training guide: SGD on a user modifier's learnable table recovers the teacher's") {
  testing::rng rng(32);
  const std::size_t H = 2, S = 24, R = 4, W = 2 * R + 1;
  const xt::xtensor<float, 4> q = rng.tensor<float>({2, H, S, 16}), k = rng.tensor<float>({2, H, S, 16}),
                              v = rng.tensor<float>({2, H, S, 8}, -2, 2);
  dsl::relative_bias teacher{{}, std::int64_t(R)}, student{{}, std::int64_t(R)};
  for (std::size_t n = 0; n < H * W; ++n) {
    teacher.table.push_back(n % W > R ? 0.0 : 1.5 * std::sin(double(n)));  // buckets after the query are hidden
    student.table.push_back(0.0);
  }
  const xt::xtensor<float, 4> target =
      eval(softmax(mask(modify(ref(q) * trans(ref(k)) / 4.0f, teacher), causal())) * ref(v));
  const auto losses = dsl::training::fit_relative_bias(student, q, k, v, target, 300, 0.03);
  INFO("loss " << losses.front() << " -> " << losses.back());
  CHECK(losses.back() < 1e-6 * losses.front());
  for (std::size_t n = 1; n < losses.size(); ++n) CHECK(losses[n] <= losses[n - 1] * 1.0001);
  // the visible buckets (j <= i) come back, up to one constant per head: the softmax of a row
  // does not change when all its scores move together, and every row sees bucket R (j = i)
  double worst = 0;
  for (std::size_t n = 0; n < H * W; ++n) {
    const std::size_t diag = n / W * W + R;
    if (n % W <= R)
      worst = std::max(worst, std::abs((student.table[n].value - student.table[diag].value) -
                                       (teacher.table[n].value - teacher.table[diag].value)));
  }
  INFO("worst table error " << worst);
  CHECK(worst < 1e-3);
}
