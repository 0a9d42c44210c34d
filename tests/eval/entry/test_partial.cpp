// The log-sum-exp tap and the merge of key shards, against the full computation.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using testing::max_abs_diff;

TEST_CASE("lse equals log-sum-exp of the reference scores") {
  testing::rng r(1);
  const xt::xtensor<double, 4> q = r.tensor<double>({2, 3, 10, 8}), k = r.tensor<double>({2, 3, 40, 8}),
                               v = r.tensor<double>({2, 3, 40, 4});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K), causal(align::bottom_right))) * V;
  const auto got = eval_with_lse(e);
  const auto want = reference(e);
  REQUIRE(max_abs_diff(got.lse, want.lse) < 1e-12);
  REQUIRE(max_abs_diff(got.output, want.output) < 1e-12);
}

TEST_CASE("merging attention over two key shards equals attention over all keys") {
  testing::rng r(2);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 33, 16}), k = r.tensor<float>({2, 100, 16}),
                              v = r.tensor<float>({2, 100, 8});
  auto full = [&](auto kk, auto vv) {
    auto Q = ref(q), K = ref(kk), V = ref(vv);
    return eval_with_lse(softmax(Q * trans(K) / 4.0f) * V);
  };
  const auto all = full(k, v);
  const xt::xtensor<float, 3> k1 = xt::view(k, xt::all(), xt::range(0, 37)),
                              k2 = xt::view(k, xt::all(), xt::range(37, 100));
  const xt::xtensor<float, 3> v1 = xt::view(v, xt::all(), xt::range(0, 37)),
                              v2 = xt::view(v, xt::all(), xt::range(37, 100));
  const auto merged = merge(full(k1, v1), full(k2, v2));
  REQUIRE(max_abs_diff(merged.output, all.output) < 2e-6);
  REQUIRE(max_abs_diff(merged.lse, all.lse) < 2e-6);
}

TEST_CASE("merge with an empty shard (all keys masked) keeps the other; packed heads keep their row order") {
  testing::rng r(3);
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 5, 8}), k = r.tensor<float>({1, 6, 8}),
                              v = r.tensor<float>({1, 6, 4});
  auto Q = heads(q, 2), K = heads(k, 2), V = heads(v, 2);
  const xt::xtensor<int, 1> none = {0}, all = {6};
  const auto a = eval_with_lse(softmax(mask(Q * trans(K), lengths(all, masked_rows::zero))) * V);
  const auto b = eval_with_lse(softmax(mask(Q * trans(K), lengths(none, masked_rows::zero))) * V);
  REQUIRE(b.lse(0, 0, 0) == -std::numeric_limits<float>::infinity());
  REQUIRE(a.lse.shape() == std::array<std::size_t, 3>{1, 5, 2});
  const auto m = merge(a, b);
  REQUIRE(max_abs_diff(m.output, a.output) < 1e-6);
  REQUIRE(max_abs_diff(merge(b, b).output, b.output) == 0);
  REQUIRE_THROWS_WITH(merge(a, decltype(a){}), Catch::Contains("merge(a, b)"));
}
