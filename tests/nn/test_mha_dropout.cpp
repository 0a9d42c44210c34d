// multihead_attention's dropout: off in inference (module flag or per call), keyed per call,
// bitwise reproducible, the same decisions as the reference, and a sane keep rate.
#include "mha_reference.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

using namespace xattn;
using testing::max_abs_diff;

namespace {

struct inputs {
  xt::xtensor<float, 2> q, k, v;
  explicit inputs(std::uint64_t seed, std::size_t sq = 6, std::size_t skv = 40, std::size_t size = 8) {
    testing::rng r(seed);
    q = r.tensor<float>({sq, size});
    k = r.tensor<float>({skv, size});
    v = r.tensor<float>({skv, size});
  }
};

}  // namespace

TEST_CASE("multihead_attention dropout: inference (module or call) is deterministic and equals p = 0") {
  const inputs in(1);
  nn::multihead_attention plain({.num_heads = 2, .query_size = 8, .seed = 5});
  nn::multihead_attention infer({.num_heads = 2, .query_size = 8, .dropout_p = 0.4f, .inference = true, .seed = 5});
  nn::multihead_attention train({.num_heads = 2, .query_size = 8, .dropout_p = 0.4f, .seed = 5});
  const auto y = plain(in.q, in.k, in.v);
  REQUIRE((infer(in.q, in.k, in.v) == y));  // same seed: same parameters whatever dropout_p
  REQUIRE((train(in.q, in.k, in.v, nn::none, {.inference = true}) == y));
  REQUIRE(train.dropout_calls().calls() == 0);
  REQUIRE(max_abs_diff(infer(in.q, in.k, in.v, nn::none, {.inference = false}), y) > 1e-3);
  train.set_inference(true);
  REQUIRE((train(in.q, in.k, in.v) == y));
}

TEST_CASE("multihead_attention dropout: keys per call, replay, explicit keys, threads") {
  const inputs in(2);
  const nn::mha_options o{.num_heads = 2, .query_size = 8, .dropout_p = 0.3f, .seed = 11};
  nn::multihead_attention a(o), b(o);
  const auto a0 = a(in.q, in.k, in.v), a1 = a(in.q, in.k, in.v);
  REQUIRE(a.dropout_calls().calls() == 2);
  REQUIRE((b(in.q, in.k, in.v) == a0));  // same seed: bitwise the same first call
  REQUIRE(max_abs_diff(a0, a1) > 1e-3);  // second call, second key
  REQUIRE((b(in.q, in.k, in.v, nn::none, {.key = nn::call_seed(11, 1)}) == a1));  // the key call 1 used
  REQUIRE(b.dropout_calls().calls() == 1);  // an explicit key does not advance the counter
  a.rewind_dropout();
  REQUIRE((a(in.q, in.k, in.v) == a0));
  nn::multihead_attention other({.num_heads = 2, .query_size = 8, .dropout_p = 0.3f, .seed = 12});
  other.query_proj().set_weight(a.query_proj().weight());
  other.key_proj().set_weight(a.key_proj().weight());
  other.value_proj().set_weight(a.value_proj().weight());
  other.output_proj().set_weight(a.output_proj().weight());
  REQUIRE(max_abs_diff(other(in.q, in.k, in.v), a0) > 1e-3);  // same parameters, other seed: other drops
  // the fused pass gives bitwise the same result on 1 and 2 threads
  a.set_schedule({64, 128, 1});
  const auto one = a(in.q, in.k, in.v, nn::none, {.key = 3});
  a.set_schedule({64, 128, 2});
  REQUIRE((a(in.q, in.k, in.v, nn::none, {.key = 3}) == one));
}

TEMPLATE_TEST_CASE("multihead_attention dropout: the reference's Philox decisions, batched too", "[nn][mha]", float,
                   double) {
  const double tol = std::is_same_v<TestType, double> ? 1e-12 : 1e-6;  // as in test_mha_options.cpp
  nn::multihead_attention<TestType> m(
      {.num_heads = 4, .query_size = 8, .use_value_bias = true, .dropout_p = 0.5f, .seed = 3, .kv_heads = 2});
  testing::rng r(4);
  const xt::xtensor<TestType, 3> q = r.tensor<TestType>({2, 5, 8}), k = r.tensor<TestType>({2, 9, 8});
  xt::xarray<bool> mask = xt::ones<bool>({4, 5, 9});
  mask(1, 2, 3) = false;
  const std::uint64_t key = nn::call_seed(3, 0);
  const auto y = m(q, k, k, mask);
  for (std::size_t b = 0; b < 2; ++b) {
    const auto want = nn_test::mha(m.config(), nn_test::params_of(m), q, k, k, b, {&mask, random::dropout{0.5f, key}});
    CHECK(nn_test::max_err(y, want.out, b) < tol);
  }
}

TEST_CASE("multihead_attention dropout: kept weights scaled by 1/(1-p), keep rate near 1-p") {
  // identity value and output projections and one-hot values: the output is the dropped weights
  const std::size_t h = 2, sq = 16, skv = 64;
  nn::multihead_attention m({.num_heads = 2,
                             .query_size = 8,
                             .value_size = skv,
                             .output_size = h * skv,
                             .vo_size = skv,
                             .dropout_p = 0.2f,
                             .seed = 9});
  xt::xtensor<float, 2> eye = xt::zeros<float>({h * skv, skv});
  for (std::size_t n = 0; n < h * skv; ++n) eye(n, n % skv) = 1;
  m.value_proj().set_weight(eye);
  xt::xtensor<float, 2> out_eye = xt::zeros<float>({h * skv, h * skv});
  for (std::size_t n = 0; n < h * skv; ++n) out_eye(n, n) = 1;
  m.output_proj().set_weight(out_eye);
  testing::rng r(6);
  const xt::xtensor<float, 2> q = r.tensor<float>({sq, 8}), k = r.tensor<float>({skv, 8});
  xt::xtensor<float, 2> v = xt::zeros<float>({skv, skv});
  for (std::size_t j = 0; j < skv; ++j) v(j, j) = 1;
  const auto w = m.weights(q, k);  // (h, sq, skv) before dropout
  const auto y = m(q, k, v);
  std::size_t kept = 0;
  for (std::size_t hh = 0; hh < h; ++hh)
    for (std::size_t i = 0; i < sq; ++i)
      for (std::size_t j = 0; j < skv; ++j) {
        const float got = y(i, hh * skv + j);
        if (got == 0.0f) continue;  // dropped: exactly zero
        ++kept;
        // float: the 1/(1-p) scale rounded and the fused P·V sum vs the reference softmax, 1e-6
        REQUIRE(got == Approx(w(hh, i, j) / 0.8).margin(1e-6));
      }
  // 2048 Bernoulli(0.8) draws: 5 standard errors = 5 * sqrt(0.16 / 2048) = 0.044
  REQUIRE(std::abs(double(kept) / double(h * sq * skv) - 0.8) < 0.044);
}
