// tree_mask(parents): a draft tree's queries see the prefix, their ancestors and themselves. Against
// a dense boolean mask built here by walking each token's parent chain (per-batch and shared trees,
// composed with causal and a window), over a cache's sequences of different lengths against each
// sequence alone, its block classification against brute force, and its errors.
#include "support/classify.hpp"
#include "support/random.hpp"

#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xview.hpp>

#include <vector>

using namespace xattn;
using testing::max_abs_diff;

namespace {

/// (B, 1, n, prefix + n): true where tree token i of batch row b sees key j.
xt::xtensor<bool, 4> walked(const std::vector<std::vector<int>>& parents, std::size_t prefix) {
  const std::size_t B = parents.size(), n = parents[0].size();
  xt::xtensor<bool, 4> m = xt::zeros<bool>({B, std::size_t(1), n, prefix + n});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < prefix; ++j) m(b, 0, i, j) = true;
      for (int t = int(i); t >= 0; t = parents[b][std::size_t(t)]) m(b, 0, i, prefix + std::size_t(t)) = true;
    }
  return m;
}

// Two trees of 9 tokens in breadth-first order: a root with three children, and a chain with a fork.
const std::vector<int> wide = {-1, 0, 0, 0, 1, 1, 2, 4, 4}, deep = {-1, 0, 1, 2, 2, 3, 4, 6, -1};

}  // namespace

TEST_CASE("tree_mask: each draft token sees the prefix, its ancestors and itself") {
  testing::rng r(3);
  const std::size_t prefix = 23, n = 9;
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 3, n, 16}), k = r.tensor<float>({2, 3, prefix + n, 16}),
                              v = r.tensor<float>({2, 3, prefix + n, 8});
  auto Q = ref(q), K = ref(k), V = ref(v);
  xt::xtensor<int, 2> per_batch = xt::zeros<int>({std::size_t(2), n});
  for (std::size_t t = 0; t < n; ++t) per_batch(0, t) = wide[t], per_batch(1, t) = deep[t];
  const auto dense = walked({wide, deep}, prefix);
  const auto want = eval(softmax(mask(Q * trans(K) / 4.0f, bool_mask(dense))) * V);
  for (const schedule s : {schedule{4, 8, 1}, schedule{2, 16, 2}, schedule{}}) {
    INFO("block_q " << s.block_q << ", block_k " << s.block_k);
    CHECK(max_abs_diff(eval(softmax(mask(Q * trans(K) / 4.0f, tree_mask(per_batch))) * V, s), want) < 2e-6);
  }
  // a tree shared by the batch
  const xt::xtensor<long, 1> shared = xt::adapt(std::vector<long>(deep.begin(), deep.end()));
  const auto dense_shared = walked({deep, deep}, prefix);
  CHECK(max_abs_diff(eval(softmax(mask(Q * trans(K), tree_mask(shared))) * V),
                     eval(softmax(mask(Q * trans(K), bool_mask(dense_shared))) * V)) < 2e-6);
  // composed: bottom-right causal changes nothing (ancestors come first), a window cuts the prefix
  CHECK(max_abs_diff(eval(softmax(mask(mask(Q * trans(K), tree_mask(shared)), causal(align::bottom_right))) * V),
                     eval(softmax(mask(Q * trans(K), bool_mask(dense_shared))) * V)) < 2e-6);
  xt::xtensor<bool, 4> windowed = dense_shared;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < prefix + n; ++j)  // window(5, 0, bottom_right): keys prefix + i - 5 ... prefix + i
        if (std::int64_t(j) < std::int64_t(prefix + i) - 5) windowed(b, 0, i, j) = false;
  CHECK(max_abs_diff(eval(softmax(mask(mask(Q * trans(K), tree_mask(shared)), window(5, 0, align::bottom_right))) * V),
                     eval(softmax(mask(Q * trans(K), bool_mask(windowed))) * V)) < 2e-6);
  // the backward (training a drafter through the verification pass): the dense mask's gradients
  const auto e = softmax(mask(Q * trans(K) / 4.0f, tree_mask(per_batch))) * V;
  const auto d = softmax(mask(Q * trans(K) / 4.0f, bool_mask(dense))) * V;
  const xt::xtensor<float, 4> dout = r.tensor<float>({2, 3, n, 8});
  const auto g = grad(e, eval_with_lse(e), dout), gd = grad(d, eval_with_lse(d), dout);
  CHECK(max_abs_diff(g.dq, gd.dq) < 1e-5);
  CHECK(max_abs_diff(g.dk, gd.dk) < 1e-5);
  CHECK(max_abs_diff(g.dv, gd.dv) < 1e-5);
}

TEST_CASE("tree_mask: over a cache, each sequence's tree ends at its own length") {
  testing::rng r(4);
  kv_cache<float> cache({.kv_heads = 2, .head_dim = 16, .page_size = 8, .max_tokens = 256});
  const std::size_t n = 9;
  std::vector<sequence_id> batch;
  for (std::size_t len : {40, 9, 17}) {  // prompt + draft tokens, already appended
    batch.push_back(cache.add_sequence());
    cache.append(batch.back(), r.tensor<float>({2, len, 16}), r.tensor<float>({2, len, 16}));
  }
  xt::xtensor<int, 2> parents = xt::zeros<int>({std::size_t(3), n});
  for (std::size_t t = 0; t < n; ++t) parents(0, t) = wide[t], parents(1, t) = deep[t], parents(2, t) = wide[t];
  const xt::xtensor<float, 4> q = r.tensor<float>({3, 4, n, 16});
  const auto out = eval(softmax(mask(ref(q) * trans(cache.keys(batch)), tree_mask(parents))) * cache.values(batch));
  for (std::size_t b = 0; b < 3; ++b) {
    const xt::xtensor<float, 4> qb = xt::view(q, xt::range(b, b + 1)),
                                kb = xt::expand_dims(cache.stored_keys(batch[b]), 0),
                                vb = xt::expand_dims(cache.stored_values(batch[b]), 0);
    const xt::xtensor<int, 1> pb = xt::view(parents, b);
    const auto alone = eval(softmax(mask(ref(qb) * trans(ref(kb)), tree_mask(pb))) * ref(vb));
    INFO("sequence " << b);
    CHECK(max_abs_diff(xt::xtensor<float, 4>(xt::view(out, xt::range(b, b + 1))), alone) < 2e-6);
  }
}

TEST_CASE("tree_mask: classify is exact where it decides, and bad trees are named") {
  problem pr;
  pr.batch = 2, pr.q_len = 9, pr.kv_len = 30, pr.q_dim = pr.k_dim = pr.v_dim = 4;
  xt::xtensor<int, 2> per_batch = xt::zeros<int>({std::size_t(2), std::size_t(9)});
  for (std::size_t t = 0; t < 9; ++t) per_batch(0, t) = wide[t], per_batch(1, t) = deep[t];
  const auto m = bound(tree_mask(per_batch), pr);
  std::size_t decided = 0;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i0 = 0; i0 < 9; i0 += 2)
      for (std::size_t i1 = i0 + 1; i1 <= 9; i1 += 3)
        for (std::size_t j0 = 0; j0 < 30; j0 += 3)
          for (std::size_t j1 = j0 + 1; j1 <= 30; j1 += 4) {
            const block got = m.classify(b, 0, i0, i1, j0, j1);
            INFO("b " << b << " rows [" << i0 << "," << i1 << ") keys [" << j0 << "," << j1 << ")");
            if (got != block::partial) {
              ++decided;
              REQUIRE(got == testing::classify_by_pairs(m, b, i0, i1, j0, j1));
            }
          }
  CHECK(decided > 100);
  for (std::size_t b = 0; b < 2; ++b)  // no visible key outside the span
    for (std::size_t i = 0; i < 9; ++i)
      for (std::size_t j = std::size_t(m.row_span(b, 0, i).second); j < 30; ++j) REQUIRE_FALSE(m.visible(b, 0, i, j));

  const xt::xtensor<int, 1> later = {-1, 0, 2};  // a parent that is not earlier
  pr.q_len = 3;
  CHECK_THROWS_WITH(bound(tree_mask(later), pr),
                    "xattn: tree_mask(parents): parents[2] = 2; a parent is -1 (the prefix) or an earlier token");
  const xt::xtensor<int, 2> below = {{-1, 0, 1}, {-1, -2, 0}};
  CHECK_THROWS_WITH(bound(tree_mask(below), pr), Catch::Contains("parents[1, 1] = -2"));
  const xt::xtensor<int, 1> four = {-1, 0, 0, 1};
  CHECK_THROWS_WITH(bound(tree_mask(four), pr),
                    "xattn: tree_mask(parents): parents holds 4 tokens but there are 3 queries: the queries are the "
                    "tree's tokens");
  const xt::xtensor<int, 2> three_rows = xt::zeros<int>({3, 3}) - 1;
  CHECK_THROWS_WITH(bound(tree_mask(three_rows), pr),
                    Catch::Contains("parents has shape (3,3) but must be (n) or (2, n)"));
  pr.kv_len = 2;
  const xt::xtensor<int, 1> ok = {-1, 0, 1};
  CHECK_THROWS_WITH(bound(tree_mask(ok), pr), Catch::Contains("batch row 0 has 2 keys, fewer than the tree's 3"));
}
