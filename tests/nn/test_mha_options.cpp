// Every equinox option of multihead_attention (and kv_heads), against the independent
// double-precision reference in mha_reference.hpp.
//
// Tolerances. Outputs here are averages of O(1) projected values, of size <= 0.2. T = double:
// module and reference compute the same sums in other orders (BLAS blocking, online vs
// two-pass softmax): ~1e-16 relative, so 1e-12 absolute. T = float: each step (GEMMs of length
// <= 48, the kernel's exp with ~1e-7..1e-6 relative error, P·V, output GEMM) adds a few float
// ulps relative to the values it touches; the observed maximum over these cases is 2e-8, and
// 1e-6 is 50x that. Both stay far below what a real mistake moves: scaling the logits by 1.1
// (a wrong 1/sqrt(qk)) moves outputs by ~2e-3, one output weight off by 0.01 by ~5e-4.
#include "mha_reference.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using nn::mha_options;

namespace {

template <class T>
constexpr double tol = std::is_same_v<T, double> ? 1e-12 : 1e-6;

/// Unbatched forward of `o` on random inputs equals the reference; returns the module's output.
template <class T>
xt::xtensor<T, 2> check_against_reference(const mha_options& o, std::size_t sq, std::size_t skv, std::uint64_t seed,
                                          const xt::xarray<bool>* mask = nullptr) {
  nn::multihead_attention<T> m(o);
  const auto& c = m.config();
  testing::rng r(seed);
  const xt::xtensor<T, 2> q = r.tensor<T>({sq, c.query_size}), k = r.tensor<T>({skv, c.key_size}),
                          v = r.tensor<T>({skv, c.value_size});
  const xt::xtensor<T, 2> out = mask ? m(q, k, v, *mask) : m(q, k, v);
  REQUIRE(out.shape()[0] == sq);
  REQUIRE(out.shape()[1] == c.output_size);
  const auto want = nn_test::mha(c, nn_test::params_of(m), q, k, v, 0, {mask});
  INFO("seed " << seed);
  REQUIRE(nn_test::max_err(out, want.out) < tol<T>);
  return out;
}

template <class T>
void check_both(const mha_options& o, std::size_t sq = 5, std::size_t skv = 7, std::uint64_t seed = 1) {
  check_against_reference<T>(o, sq, skv, seed);
}

}  // namespace

TEMPLATE_TEST_CASE("multihead_attention: equinox's defaults", "[nn][mha]", float, double) {
  nn::multihead_attention<TestType> m({.num_heads = 4, .query_size = 16});
  const auto& c = m.config();
  CHECK(c.key_size == 16);
  CHECK(c.value_size == 16);
  CHECK(c.output_size == 16);
  CHECK(c.qk_size == 4);
  CHECK(c.vo_size == 4);
  CHECK(c.kv_heads == 4);
  CHECK_FALSE((c.use_query_bias || c.use_key_bias || c.use_value_bias || c.use_output_bias));
  CHECK(c.dropout_p == 0.0f);
  CHECK_FALSE(c.inference);
  CHECK(m.query_proj().weight().shape() == std::array<std::size_t, 2>{16, 16});
  CHECK(m.output_proj().weight().shape() == std::array<std::size_t, 2>{16, 16});
  CHECK(m.query_proj().bias().size() == 0);
  check_both<TestType>({.num_heads = 4, .query_size = 16});
  check_both<TestType>({.num_heads = 1, .query_size = 3}, 1, 1);  // one head, one query, one key
}

TEMPLATE_TEST_CASE("multihead_attention: each bias flag", "[nn][mha]", float, double) {
  const mha_options base{.num_heads = 2, .query_size = 8};
  auto with = [&](auto set) {
    mha_options o = base;
    set(o);
    return o;
  };
  for (const auto& o :
       {with([](mha_options& o) { o.use_query_bias = true; }), with([](mha_options& o) { o.use_key_bias = true; }),
        with([](mha_options& o) { o.use_value_bias = true; }), with([](mha_options& o) { o.use_output_bias = true; }),
        with(
            [](mha_options& o) { o.use_query_bias = o.use_key_bias = o.use_value_bias = o.use_output_bias = true; })}) {
    nn::multihead_attention<TestType> m(o);
    CHECK(m.query_proj().has_bias() == o.use_query_bias);
    CHECK(m.key_proj().bias().size() == (o.use_key_bias ? 8u : 0u));
    CHECK(m.value_proj().has_bias() == o.use_value_bias);
    CHECK(m.output_proj().has_bias() == o.use_output_bias);
    for (auto b : m.output_proj().bias()) CHECK(std::abs(double(b)) <= 1 / std::sqrt(8.0));  // ±1/sqrt(in)
    check_both<TestType>(o);
  }
  // a bias that shifts every key's logit equally changes nothing (softmax invariance): a real
  // check that the key bias enters the logits, not the output
  nn::multihead_attention<TestType> m({.num_heads = 2, .query_size = 8, .use_key_bias = true});
  testing::rng r(3);
  const xt::xtensor<TestType, 2> q = r.tensor<TestType>({3, 8}), k = r.tensor<TestType>({4, 8});
  const auto y0 = m(q, k, k);
  m.key_proj().set_bias(r.tensor<TestType>({8}, -3, 3));
  CHECK(testing::max_abs_diff(y0, m(q, k, k)) < tol<TestType>);
}

TEMPLATE_TEST_CASE("multihead_attention: sizes (key/value/output size, qk_size != vo_size)", "[nn][mha]", float,
                   double) {
  check_both<TestType>({.num_heads = 3, .query_size = 12, .key_size = 5, .value_size = 9});
  check_both<TestType>({.num_heads = 2, .query_size = 8, .output_size = 3});
  check_both<TestType>({.num_heads = 2, .query_size = 8, .qk_size = 5, .vo_size = 11});
  check_both<TestType>({.num_heads = 4, .query_size = 6, .qk_size = 3, .vo_size = 2});  // 6 % 4 != 0: explicit sizes
  check_both<TestType>({.num_heads = 4,
                        .query_size = 32,
                        .key_size = 20,
                        .value_size = 24,
                        .output_size = 7,
                        .qk_size = 16,
                        .vo_size = 8,
                        .use_query_bias = true,
                        .use_output_bias = true},
                       70, 150, 9);  // several kernel blocks in both directions
  nn::multihead_attention<TestType> m(
      {.num_heads = 2, .query_size = 8, .key_size = 5, .value_size = 9, .output_size = 3, .qk_size = 5, .vo_size = 11});
  CHECK(m.query_proj().weight().shape() == std::array<std::size_t, 2>{10, 8});
  CHECK(m.key_proj().weight().shape() == std::array<std::size_t, 2>{10, 5});
  CHECK(m.value_proj().weight().shape() == std::array<std::size_t, 2>{22, 9});
  CHECK(m.output_proj().weight().shape() == std::array<std::size_t, 2>{3, 22});
}

TEMPLATE_TEST_CASE("multihead_attention: kv_heads (grouped-query attention)", "[nn][mha]", float, double) {
  nn::multihead_attention<TestType> m({.num_heads = 6, .query_size = 12, .kv_heads = 2});
  CHECK(m.key_proj().out_features() == 2 * 2);
  CHECK(m.value_proj().out_features() == 2 * 2);
  check_both<TestType>({.num_heads = 6, .query_size = 12, .kv_heads = 2});
  check_both<TestType>({.num_heads = 4,
                        .query_size = 8,
                        .qk_size = 3,
                        .vo_size = 5,
                        .use_key_bias = true,
                        .use_value_bias = true,
                        .kv_heads = 1});  // multi-query
  xt::xarray<bool> mask = xt::ones<bool>({6, 5, 7});
  mask(4, 2, 3) = mask(1, 0, 0) = false;
  check_against_reference<TestType>({.num_heads = 6, .query_size = 12, .kv_heads = 3}, 5, 7, 4, &mask);
}

TEMPLATE_TEST_CASE("multihead_attention: batched (B, S, size) equals B unbatched calls", "[nn][mha]", float, double) {
  const mha_options o{
      .num_heads = 2, .query_size = 8, .key_size = 6, .output_size = 5, .use_value_bias = true, .kv_heads = 1};
  nn::multihead_attention<TestType> m(o);
  testing::rng r(8);
  const xt::xtensor<TestType, 3> q = r.tensor<TestType>({3, 4, 8}), k = r.tensor<TestType>({3, 9, 6}),
                                 v = r.tensor<TestType>({3, 9, 8});
  const xt::xtensor<TestType, 3> y = m(q, k, v);
  REQUIRE(y.shape() == std::array<std::size_t, 3>{3, 4, 5});
  const auto p = nn_test::params_of(m);
  for (std::size_t b = 0; b < 3; ++b) {
    const xt::xtensor<TestType, 2> qb = xt::view(q, b), kb = xt::view(k, b), vb = xt::view(v, b);
    const xt::xtensor<TestType, 2> yb = xt::view(y, b);
    // per-row GEMM results may differ in the last bit between M = 4 and M = 12 row blocks
    CHECK(testing::max_abs_diff(yb, m(qb, kb, vb)) < tol<TestType> / 10);
    CHECK(nn_test::max_err(y, nn_test::mha(m.config(), p, q, k, v, b).out, b) < tol<TestType>);
  }
  // non-contiguous inputs (strided views) are read correctly, through a copy
  const auto qs = xt::view(q, xt::all(), xt::range(0, 4, 2), xt::all());
  const xt::xtensor<TestType, 3> qc = qs;
  CHECK((m(qs, k, v) == m(qc, k, v)));
}

TEMPLATE_TEST_CASE("multihead_attention: mask shapes broadcast; True = attend; a fully hidden row is uniform",
                   "[nn][mha]", float, double) {
  const mha_options o{.num_heads = 2, .query_size = 8};
  testing::rng r(12);
  auto random_mask = [&](std::vector<std::size_t> shape) {
    xt::xarray<bool> m = xt::xarray<bool>::from_shape(shape);
    for (auto& x : m) x = r.coin(0.7);
    return m;
  };
  for (const auto& shape :
       std::vector<std::vector<std::size_t>>{{2, 5, 7}, {5, 7}, {1, 5, 7}, {2, 1, 7}, {7}, {2, 5, 1}}) {
    const auto mask = random_mask(shape);
    INFO("mask shape " << xattn::shape_str(shape));
    check_against_reference<TestType>(o, 5, 7, 13, &mask);
  }
  // every key hidden for query 1 of head 0: equinox fills finfo.min, so that row's weights are uniform
  xt::xarray<bool> mask = xt::ones<bool>({2, 5, 7});
  for (std::size_t j = 0; j < 7; ++j) mask(0, 1, j) = false;
  check_against_reference<TestType>(o, 5, 7, 14, &mask);
  nn::multihead_attention<TestType> m(o);
  const xt::xtensor<TestType, 2> q = r.tensor<TestType>({5, 8}), k = r.tensor<TestType>({7, 8});
  const auto w = m.weights(q, k, mask);
  REQUIRE(w.shape() == std::array<std::size_t, 3>{2, 5, 7});
  for (std::size_t j = 0; j < 7; ++j) CHECK(double(w(0, 1, j)) == Approx(1.0 / 7).epsilon(1e-6));
  // batched masks: (B, H, Sq, Skv) and (B, 1, Sq, Skv)
  const xt::xtensor<TestType, 3> qb = r.tensor<TestType>({2, 5, 8}), kb = r.tensor<TestType>({2, 7, 8});
  for (const auto& shape : std::vector<std::vector<std::size_t>>{{2, 2, 5, 7}, {2, 1, 5, 7}, {2, 5, 7}}) {
    const auto bm = random_mask(shape);
    const auto y = m(qb, kb, kb, bm);
    for (std::size_t b = 0; b < 2; ++b)
      CHECK(nn_test::max_err(y, nn_test::mha(m.config(), nn_test::params_of(m), qb, kb, kb, b, {&bm}).out, b) <
            tol<TestType>);
  }
}

TEMPLATE_TEST_CASE("multihead_attention: weights() per head, before dropout; set_weight is used", "[nn][mha]", float,
                   double) {
  nn::multihead_attention<TestType> m(
      {.num_heads = 3, .query_size = 9, .qk_size = 4, .dropout_p = 0.5f, .kv_heads = 1});
  testing::rng r(21);
  m.query_proj().set_weight(r.tensor<TestType>({12, 9}, -2, 2));
  const xt::xtensor<TestType, 2> q = r.tensor<TestType>({4, 9}), k = r.tensor<TestType>({6, 9});
  const auto want = nn_test::mha(m.config(), nn_test::params_of(m), q, k, k, 0, {.keep_weights = true});
  const auto w = m.weights(q, k);
  REQUIRE(w.shape() == std::array<std::size_t, 3>{3, 4, 6});
  for (std::size_t h = 0; h < 3; ++h)
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 6; ++j)
        CHECK(double(w(h, i, j)) == Approx(want.weights[h][i][j]).margin(tol<TestType>));
  const xt::xtensor<TestType, 3> qb = r.tensor<TestType>({2, 4, 9});
  CHECK(m.weights(qb, xt::xtensor<TestType, 3>(r.tensor<TestType>({2, 6, 9}))).shape() ==
        std::array<std::size_t, 4>{2, 3, 4, 6});
}
