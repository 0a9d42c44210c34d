// The user programs of dsl/modules, exactly as the demo runs them.
#include "mha_reference.hpp"
#include "modules/d2l_modules.hpp"
#include "modules/equinox_mha.hpp"
#include "modules/unfused_attention.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

using Catch::Matchers::WithinAbs;

TEST_CASE("dsl/modules d2l_modules_example: both modules give d2l's [[2,3,4,5]], [[10,11,12,13]]") {
  const auto r = dsl::d2l_modules_example();
  const xt::xtensor<float, 3> want = {{{2, 3, 4, 5}}, {{10, 11, 12, 13}}};
  for (std::size_t n = 0; n < want.size(); ++n) {
    REQUIRE_THAT(r.dot_output.flat(n), WithinAbs(want.flat(n), 1e-5));
    REQUIRE_THAT(r.additive_output.flat(n), WithinAbs(want.flat(n), 1e-5));
  }
  for (std::size_t j = 0; j < 10; ++j) {
    REQUIRE_THAT(r.additive_weights(0, 0, j), WithinAbs(j < 2 ? 0.5 : 0.0, 1e-7));
    REQUIRE_THAT(r.dot_weights(1, 0, j), WithinAbs(j < 6 ? 1.0 / 6 : 0.0, 1e-7));
  }
}

TEST_CASE("dsl/modules equinox_mha_example: causal weights per head; dropout only in training") {
  const auto r = dsl::equinox_mha_example();
  REQUIRE(r.weights.shape() == std::array<std::size_t, 3>{4, 12, 12});
  for (std::size_t h = 0; h < 4; ++h)
    for (std::size_t i = 0; i < 12; ++i) {
      double sum = 0;
      for (std::size_t j = 0; j < 12; ++j) {
        if (j > i) REQUIRE(r.weights(h, i, j) == 0.0f);  // exp(finfo.min - m) is exactly 0
        sum += r.weights(h, i, j);
      }
      REQUIRE_THAT(sum, WithinAbs(1.0, 1e-6));
    }
  REQUIRE(xattn::testing::max_abs_diff(r.train_output, r.inference_output) > 1e-3);
}

TEST_CASE("dsl/modules unfused_attention equals the fused pass") {
  xattn::testing::rng g(3);
  const xt::xtensor<float, 4> q = g.tensor<float>({2, 3, 33, 16}), k = g.tensor<float>({2, 3, 70, 16}),
                              v = g.tensor<float>({2, 3, 70, 8});
  auto Q = xattn::ref(q), K = xattn::ref(k), V = xattn::ref(v);
  const xt::xtensor<float, 4> fused = xattn::eval(xattn::softmax(Q * xattn::trans(K) / 4.0f) * V);
  // both float, different exp and summation order: ~1e-7 on outputs of size <= 1
  REQUIRE(xattn::testing::max_abs_diff(fused, dsl::unfused_attention(q, k, v)) < 1e-5);
}
