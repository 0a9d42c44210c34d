// Every misuse of the modules throws std::invalid_argument naming the argument and the shapes.
#include "support/random.hpp"

#include <xattn/nn/nn.hpp>

#include <catch2/catch.hpp>

using namespace xattn;
using Catch::Contains;

namespace {

template <class F>
void require_throws_with_all(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    INFO(msg);
    for (const char* p : parts) CHECK_THAT(msg, Contains(p));
    return;
  }
  FAIL("no std::invalid_argument thrown");
}

}  // namespace

TEST_CASE("multihead_attention: impossible options") {
  require_throws_with_all([] { nn::multihead_attention({.num_heads = 3, .query_size = 8}); },
                          {"query_size (8) is not divisible by num_heads (3)", "qk_size"});
  require_throws_with_all([] { nn::multihead_attention({.num_heads = 3, .query_size = 8, .qk_size = 2}); },
                          {"vo_size", "not divisible"});
  require_throws_with_all([] { nn::multihead_attention({.num_heads = 6, .query_size = 12, .kv_heads = 4}); },
                          {"num_heads (6) must be a multiple of kv_heads (4)"});
  require_throws_with_all([] { nn::multihead_attention({.num_heads = 0, .query_size = 12}); },
                          {"num_heads must be > 0"});
  require_throws_with_all([] { nn::multihead_attention({.num_heads = 2, .query_size = 4, .output_size = 0}); },
                          {"output_size (0)"});
  require_throws_with_all([] { nn::multihead_attention({.num_heads = 2, .query_size = 4, .dropout_p = 1.0f}); },
                          {"dropout_p must be in [0, 1), got 1"});
  nn::multihead_attention({.num_heads = 3, .query_size = 8, .qk_size = 2, .vo_size = 5});  // explicit sizes: fine
}

TEST_CASE("multihead_attention: inputs of the wrong width, rank, batch or length") {
  nn::multihead_attention m({.num_heads = 2, .query_size = 8, .key_size = 6, .value_size = 4});
  testing::rng r(1);
  const xt::xtensor<float, 2> q = r.tensor<float>({3, 8}), k = r.tensor<float>({5, 6}), v = r.tensor<float>({5, 4});
  REQUIRE_NOTHROW(m(q, k, v));
  require_throws_with_all(
      [&] {
        m(xt::xtensor<float, 2>(r.tensor<float>({3, 7})), k, v);
      },
      {"query has shape (3,7)", "query_size = 8"});
  require_throws_with_all([&] { m(q, v, v); }, {"key_ has shape (5,4)", "key_size = 6"});
  require_throws_with_all([&] { m(q, k, k); }, {"value has shape (5,6)", "value_size = 4"});
  require_throws_with_all(
      [&] {
        m(q, k, xt::xtensor<float, 2>(r.tensor<float>({4, 4})));
      },
      {"key_ (5,6) and value (4,4)", "same rank, batch and sequence length"});
  const xt::xtensor<float, 3> qb = r.tensor<float>({2, 3, 8}), kb = r.tensor<float>({3, 5, 6});
  require_throws_with_all([&] { m(qb, k, v); }, {"query (2,3,8) and key_ (5,6)", "both batched"});
  require_throws_with_all(
      [&] {
        m(qb, kb, xt::xtensor<float, 3>(r.tensor<float>({3, 5, 4})));
      },
      {"query (2,3,8) and key_ (3,5,6) have different batch sizes"});
  const xt::xarray<float> q4 = r.tensor<float>({1, 1, 3, 8});
  require_throws_with_all([&] { m(q4, k, v); }, {"query: expected rank 2 (seq, size) or 3", "(1,1,3,8)"});
  require_throws_with_all(
      [&] {
        m(q, xt::xtensor<float, 2>::from_shape({0, 6}), xt::xtensor<float, 2>::from_shape({0, 4}));
      },
      {"key_ has shape (0,6)", "no keys"});
}

TEST_CASE("multihead_attention: masks of the wrong shape") {
  nn::multihead_attention m({.num_heads = 2, .query_size = 8});
  testing::rng r(2);
  const xt::xtensor<float, 2> q = r.tensor<float>({3, 8}), k = r.tensor<float>({5, 8});
  require_throws_with_all(
      [&] {
        m(q, k, k, xt::xtensor<bool, 3>(xt::ones<bool>({3, 3, 5})));
      },
      {"mask has shape (3,3,5)", "(num_heads, q_seq, kv_seq) = (2,3,5)"});
  require_throws_with_all([&] { m(q, k, k, xt::xtensor<bool, 2>(xt::ones<bool>({5, 3}))); }, {"mask has shape (5,3)"});
  require_throws_with_all(
      [&] {
        m(q, k, k, xt::xtensor<bool, 4>(xt::ones<bool>({1, 2, 3, 5})));
      },
      {"mask has shape (1,2,3,5)"});  // an unbatched call takes no batch axis
  const xt::xtensor<float, 3> qb = r.tensor<float>({4, 3, 8}), kb = r.tensor<float>({4, 5, 8});
  require_throws_with_all(
      [&] {
        m(qb, kb, kb, xt::xtensor<bool, 4>(xt::ones<bool>({3, 2, 3, 5})));
      },
      {"mask has shape (3,2,3,5)", "(batch, num_heads, q_seq, kv_seq) = (4,2,3,5)"});
  require_throws_with_all([&] { m.weights(q, k, xt::xtensor<bool, 1>(xt::ones<bool>({4}))); },
                          {"multihead_attention.weights: mask has shape (4)"});
}

TEST_CASE("nn parameters: set_weight / set_bias check shapes") {
  nn::multihead_attention m({.num_heads = 2, .query_size = 8, .output_size = 3});
  require_throws_with_all(
      [&] {
        m.output_proj().set_weight(xt::xtensor<float, 2>::from_shape({8, 3}));
      },
      {"multihead_attention.output_proj.set_weight", "(8,3)", "must be (3,8)"});
  require_throws_with_all([&] { m.query_proj().set_bias(xt::xtensor<float, 1>::from_shape({8})); },
                          {"multihead_attention.query_proj.set_bias", "without a bias"});
  nn::multihead_attention mb({.num_heads = 2, .query_size = 8, .use_key_bias = true});
  require_throws_with_all([&] { mb.key_proj().set_bias(xt::xtensor<float, 1>::from_shape({7})); },
                          {"key_proj.set_bias: bias has shape (7)", "must be (8)"});
  nn::additive_attention a(2, 20, 8);
  const auto before = a.w_q().weight();
  require_throws_with_all(
      [&] {
        a.set_weights(xt::xtensor<float, 2>::from_shape({8, 20}), xt::xtensor<float, 2>::from_shape({8, 3}),
                      xt::xtensor<float, 1>::from_shape({8}));
      },
      {"additive_attention.W_k.set_weight", "(8,3)", "must be (8,2)"});
  REQUIRE((a.w_q().weight() == before));  // all or nothing
  require_throws_with_all(
      [&] {
        a.set_weights(before, xt::xtensor<float, 2>::from_shape({8, 2}), xt::xtensor<float, 1>::from_shape({7}));
      },
      {"additive_attention.w_v.set_weight", "(7)"});
}

TEST_CASE("d2l modules: bad dropout, ranks, lengths and mismatched shapes name the module") {
  require_throws_with_all([] { nn::dot_product_attention(1.5f); },
                          {"dot_product_attention: dropout must be in [0, 1)"});
  require_throws_with_all([] { nn::additive_attention(2, 0, 8); }, {"query_size (0)"});
  nn::dot_product_attention d;
  testing::rng r(3);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 1, 4}), k = r.tensor<float>({2, 6, 4}),
                              v = r.tensor<float>({2, 6, 3});
  require_throws_with_all(
      [&] {
        d.forward(xt::xarray<float>::from_shape({1, 4}), k, v);
      },
      {"dot_product_attention.forward: queries must be (batch, queries, d), got shape (1,4)"});
  require_throws_with_all(
      [&] {
        d.forward(q, k, v, xt::xtensor<int, 1>{2, 3, 4});
      },
      {"dot_product_attention.forward: lengths(lens): lens has shape (3)"});
  require_throws_with_all(
      [&] {
        d.forward(q, k, v, xt::xtensor<int, 1>{2, 7});
      },
      {"dot_product_attention.forward", "= 7"});
  require_throws_with_all(
      [&] {
        d.forward(q, k, xt::xtensor<float, 3>::from_shape({2, 5, 3}));
      },
      {"dot_product_attention.forward: values V (2,5,3)", "(2,6,4)"});
  nn::additive_attention a(4, 4, 8, 0.2f);
  require_throws_with_all(
      [&] {
        a.forward(q, xt::xtensor<float, 3>::from_shape({2, 6, 5}), v);
      },
      {"additive_attention.forward", "K (2,6,5)"});
  REQUIRE(a.dropout_calls().calls() == 0);
  require_throws_with_all(
      [&] {
        a.forward(q, k, xt::xtensor<float, 3>::from_shape({2, 5, 3}), nn::none, true);
      },
      {"additive_attention.forward: values V"});
  REQUIRE(a.dropout_calls().calls() == 0);  // a failed training call does not use up a key
}
