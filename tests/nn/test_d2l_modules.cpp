// d2l's DotProductAttention and AdditiveAttention as modules: the worked example, valid_lens
// forms, kept weights, dropout (eval vs training, keys per call, keep rate), init and set_weights.
#include "seeds_example.hpp"
#include "support/random.hpp"

#include <xattn/nn/nn.hpp>

#include <catch2/catch.hpp>

#include <cmath>

using namespace xattn;
using Catch::Matchers::WithinAbs;
using testing::max_abs_diff;

namespace {

const xt::xtensor<float, 3> d2l_expected = {{{2, 3, 4, 5}}, {{10, 11, 12, 13}}};

// Equal keys give equal scores, so the weights are uniform over the valid keys; 1e-5 absorbs the
// float rounding of (sum of 2 or 6 values of size <= 39) / count.
template <class A>
void require_d2l_result(const A& got) {
  REQUIRE(got.shape() == d2l_expected.shape());
  for (std::size_t n = 0; n < got.size(); ++n) REQUIRE_THAT(got.flat(n), WithinAbs(d2l_expected.flat(n), 1e-5));
}

template <class W>
void require_uniform_over_valid(const W& w) {
  for (std::size_t j = 0; j < 10; ++j) {
    REQUIRE_THAT(w(0, 0, j), WithinAbs(j < 2 ? 0.5 : 0.0, 1e-7));
    REQUIRE_THAT(w(1, 0, j), WithinAbs(j < 6 ? 1.0 / 6 : 0.0, 1e-7));
  }
}

// Values = identity: the output row of query i is its (dropped) weight row.
xt::xtensor<float, 3> identity_values(std::size_t batch, std::size_t n) {
  xt::xtensor<float, 3> v = xt::zeros<float>({batch, n, n});
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t j = 0; j < n; ++j) v(b, j, j) = 1;
  return v;
}

}  // namespace

TEST_CASE("nn::dot_product_attention: d2l's worked example, weights kept on request") {
  const dsl::seeds_example ex;
  nn::dot_product_attention attention(0.5f);
  require_d2l_result(attention.forward(ex.dot_queries, ex.keys, ex.values, ex.valid_lens));
  REQUIRE_THROWS_AS(attention.last_weights(), std::logic_error);  // not kept unless asked
  attention.keep_weights(true);
  testing::rng r(7);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 1, 2}, -3, 3);  // d2l: normal(0, 1); any q works
  require_d2l_result(attention.forward(q, ex.keys, ex.values, ex.valid_lens));
  require_uniform_over_valid(attention.last_weights());
  REQUIRE(attention.dropout_calls().calls() == 0);  // eval mode: dropout 0.5 not applied, no key used
}

TEST_CASE("nn::additive_attention: d2l's worked example with seeded init and with set weights") {
  const dsl::seeds_example ex;
  nn::additive_attention attention(2, 20, 8, 0.1f, 3);  // key_size 2, query_size 20, 8 hidden
  attention.keep_weights(true);
  require_d2l_result(attention.forward(ex.add_queries, ex.keys, ex.values, ex.valid_lens));
  require_uniform_over_valid(attention.last_weights());
  testing::rng r(11);
  const xt::xtensor<float, 2> w_q = r.tensor<float>({8, 20}), w_k = r.tensor<float>({8, 2});
  const xt::xtensor<float, 1> w_v = r.vector<float>(8);
  attention.set_weights(w_q, w_k, w_v);
  REQUIRE(attention.w_v().weight().shape()[0] == 1);
  REQUIRE(attention.w_v().weight()(0, 3) == w_v(3));
  require_d2l_result(attention.forward(ex.add_queries, ex.keys, ex.values, ex.valid_lens));
}

TEST_CASE("nn::additive_attention: scores are w_v·tanh(W_q q + W_k k) (checked in double), init per seed") {
  testing::rng r(5);
  const xt::xtensor<double, 3> q = r.tensor<double>({2, 3, 5}), k = r.tensor<double>({2, 7, 4}),
                               v = r.tensor<double>({2, 7, 3});
  const xt::xtensor<int, 2> lens = {{7, 2, 5}, {1, 7, 3}};
  nn::additive_attention<double> attention(4, 5, 6, 0.0f, 21);
  const auto& Wq = attention.w_q().weight();
  const auto& Wk = attention.w_k().weight();
  const auto& wv = attention.w_v().weight();
  for (double x : Wq) REQUIRE(std::abs(x) <= 1 / std::sqrt(5.0));  // PyTorch Linear: ±1/sqrt(fan_in)
  for (double x : Wk) REQUIRE(std::abs(x) <= 1 / std::sqrt(4.0));
  for (double x : wv) REQUIRE(std::abs(x) <= 1 / std::sqrt(6.0));
  REQUIRE(nn::additive_attention<double>(4, 5, 6, 0.0f, 21).w_q().weight() == Wq);  // same seed, same init
  REQUIRE(nn::additive_attention<double>(4, 5, 6, 0.0f, 22).w_q().weight() != Wq);

  const auto out = attention.forward(q, k, v, lens);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 3; ++i) {
      std::vector<double> s(7);
      for (std::size_t j = 0; j < 7; ++j) {
        double acc = 0;
        for (std::size_t h = 0; h < 6; ++h) {
          double f = 0;
          for (std::size_t c = 0; c < 5; ++c) f += Wq(h, c) * q(b, i, c);
          for (std::size_t c = 0; c < 4; ++c) f += Wk(h, c) * k(b, j, c);
          acc += wv(0, h) * std::tanh(f);
        }
        s[j] = j < std::size_t(lens(b, i)) ? acc : -1e6;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (std::size_t e = 0; e < 3; ++e) {
        double o = 0;
        for (std::size_t j = 0; j < 7; ++j) o += s[j] / l * v(b, j, e);
        REQUIRE_THAT(out(b, i, e), WithinAbs(o, 1e-12));  // double throughout: only summation order differs
      }
    }
}

TEST_CASE("nn::dot_product_attention: valid_lens absent, (batch), or (batch, queries)") {
  testing::rng r(2);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 3, 4}), k = r.tensor<float>({2, 5, 4}),
                              v = r.tensor<float>({2, 5, 2});
  nn::dot_product_attention attention;
  attention.keep_weights(true);
  const auto plain = attention.forward(q, k, v);
  const auto w_plain = attention.last_weights();
  for (std::size_t j = 0; j < 5; ++j) REQUIRE(w_plain(1, 2, j) > 0);  // no mask: every key weighs
  REQUIRE(max_abs_diff(attention.forward(q, k, v, xt::xtensor<int, 1>{5, 5}), plain) < 1e-6);
  const xt::xtensor<long, 2> lens = {{1, 2, 3}, {5, 4, 1}};
  attention.forward(q, k, v, lens);
  const auto& w = attention.last_weights();
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 5; ++j) REQUIRE((w(b, i, j) == 0) == (j >= std::size_t(lens(b, i))));
}

TEST_CASE("nn d2l modules: dropout only in training; keys per call; same seed replays bitwise; keep rate") {
  testing::rng r(4);
  const std::size_t n = 64;
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 16, 8}), k = r.tensor<float>({2, n, 8});
  const auto v = identity_values(2, n);
  nn::dot_product_attention a(0.25f, 77), b(0.25f, 77), c(0.25f, 78);
  a.keep_weights(true);
  const auto eval_mode = a.forward(q, k, v, nn::none, false);
  REQUIRE(max_abs_diff(eval_mode, a.last_weights()) < 1e-6);  // identity values: output = weights
  const auto a0 = a.forward(q, k, v, nn::none, true), a1 = a.forward(q, k, v, nn::none, true);
  const auto b0 = b.forward(q, k, v, nn::none, true), c0 = c.forward(q, k, v, nn::none, true);
  REQUIRE(a.dropout_calls().calls() == 2);
  REQUIRE((a0 == b0));                   // same seed, same call index: bitwise
  REQUIRE(max_abs_diff(a0, a1) > 0.01);  // next call, next key
  REQUIRE(max_abs_diff(a0, c0) > 0.01);  // other seed
  a.rewind_dropout(1);
  REQUIRE((a.forward(q, k, v, nn::none, true) == a1));
  // a kept weight is w / (1 - p) (float rounding of the scale and the fused sum: 1e-6), a dropped one exactly 0
  std::size_t kept = 0;
  for (std::size_t e = 0; e < a0.size(); ++e) {
    if (a0.flat(e) == 0.0f) continue;
    ++kept;
    REQUIRE_THAT(a0.flat(e), WithinAbs(eval_mode.flat(e) / 0.75, 1e-6));
  }
  // 2048 Bernoulli(0.75) draws: 5 standard errors = 5 * sqrt(0.75 * 0.25 / 2048) = 0.048
  REQUIRE(std::abs(double(kept) / double(a0.size()) - 0.75) < 0.048);
  // additive attention draws its keys the same way
  nn::additive_attention add1(8, 8, 4, 0.25f, 77), add2(8, 8, 4, 0.25f, 77);
  REQUIRE((add1.forward(q, k, v, nn::none, true) == add2.forward(q, k, v, nn::none, true)));
  REQUIRE((add1.forward(q, k, v) == add2.forward(q, k, v)));
}
