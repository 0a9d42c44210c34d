// The demo's training programs (dsl/training_demo.hpp) learn: the Nadaraya-Watson width moves to
// a lower leave-one-out loss, the additive-attention model's loss on the lookup task falls and
// its weights concentrate on the keys of the query's type, and the student's relative position
// biases come close to the teacher's.
#include "training_demo.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

TEST_CASE("training demo: Nadaraya-Watson learns its kernel width by SGD on d_sigma") {
  // seed 0, sigma from 2.0: loss 20.39 -> 7.40, sigma -> 0.27 (measured)
  const auto run = dsl::training::fit_nadaraya_watson(/*sigma*/ 2.0, /*steps*/ 30, /*lr*/ 0.02);
  REQUIRE(run.losses.size() == 30);
  CHECK(run.losses.back() < 0.5 * run.losses.front());
  CHECK(std::is_sorted(run.losses.rbegin(), run.losses.rend()));  // falls at every step
  CHECK(run.sigma > 0.1);
  CHECK(run.sigma < 0.5);
}

TEST_CASE("training demo: additive attention learns the lookup task by Adam") {
  // seed 0: loss 0.18 -> 0.0006 in 200 steps (measured)
  const auto run = dsl::training::fit_additive_lookup(/*steps*/ 200, /*lr*/ 0.05f);
  REQUIRE(run.losses.size() == 200);
  CHECK(run.losses.back() < 0.02 * run.losses.front());
  // each query reads the three keys of its type (keys sorted by type: 3 per type)
  for (std::size_t i = 0; i < 4; ++i) {
    double own = 0;
    for (std::size_t j = 3 * i; j < 3 * i + 3; ++j) own += run.weights(0, i, j);
    CHECK(own > 0.9);
  }
}

TEST_CASE("training demo: a user modifier's learnable table comes back from the teacher's outputs") {
  // seed 0: loss 122.4 -> 1.0e-9, worst bias error 3e-5 (measured)
  const auto run = dsl::training::fit_relative_bias_demo(/*steps*/ 200, /*lr*/ 0.015);
  REQUIRE(run.losses.size() == 200);
  INFO("loss " << run.losses.front() << " -> " << run.losses.back());
  CHECK(run.losses.back() < 1e-3 * run.losses.front());
  REQUIRE(run.learned.size() == run.teacher.size());
  double worst = 0;
  for (std::size_t n = 0; n < run.teacher.size(); ++n)
    worst = std::max(worst, std::abs(run.learned[n] - run.teacher[n]));
  INFO("worst bias error " << worst);
  CHECK(worst < 0.05);
}
