// Top-k sparse attention from a kv_cache (dsl/sparse_attention.hpp): the indexer keeps the k best
// visible tokens by its cheap score, and the output is softmax attention over exactly those tokens,
// recomputed here in double from the cache's stored rows; with k past every length it is dense
// causal attention.
#include "sparse_attention.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

namespace {

template <class T>
void check_sparse(double tol) {
  using namespace xattn;
  testing::rng r(7);
  const std::size_t Hkv = 2, Hq = 4, group = Hq / Hkv, D = 32, Sq = 2, dims = 8;
  kv_cache<T> cache({.kv_heads = Hkv, .head_dim = D, .page_size = 16, .max_tokens = 2048});
  const std::vector<sequence_id> batch{cache.add_sequence(), cache.add_sequence()};
  const std::vector<std::size_t> lens{700, 300};
  for (std::size_t b = 0; b < 2; ++b)
    cache.append(batch[b], r.tensor<float>({Hkv, lens[b], D}), r.tensor<float>({Hkv, lens[b], D}));
  const xt::xtensor<float, 4> q = r.tensor<float>({2, Hq, Sq, D}, -2, 2);

  for (const std::size_t k : {std::size_t(64), std::size_t(320)}) {  // 320: more than sequence 1 has
    INFO("k " << k);
    const auto [out, idx] = dsl::sparse::attend_top_k(cache, batch, q, k, dims);
    for (std::size_t b = 0; b < 2; ++b) {
      const xt::xtensor<float, 3> keys = cache.stored_keys(batch[b]), values = cache.stored_values(batch[b]);
      for (std::size_t h = 0; h < Hkv; ++h)
        for (std::size_t i = 0; i < Sq; ++i) {
          const std::size_t visible = lens[b] - Sq + i + 1, kept = std::min(k, visible);
          std::vector<double> score(visible, 0.0);  // the index score, from its definition
          for (std::size_t j = 0; j < visible; ++j)
            for (std::size_t d = 0; d < dims; ++d) {
              double qi = 0;
              for (std::size_t g = 0; g < group; ++g) qi += q(b, h * group + g, i, d) / double(group);
              score[j] += qi * keys(h, j, d);
            }
          std::vector<bool> picked(visible, false);
          for (std::size_t t = 0; t < k; ++t) {
            const int j = idx(b, h, i, t);
            if (t >= kept) {
              REQUIRE(j == -1);
              continue;
            }
            REQUIRE(j >= 0);
            REQUIRE(std::size_t(j) < visible);
            REQUIRE(!picked[std::size_t(j)]);
            picked[std::size_t(j)] = true;
            if (t > 0) REQUIRE(idx(b, h, i, t - 1) < j);
          }
          double lowest_picked = 1e300, highest_left = -1e300;
          for (std::size_t j = 0; j < visible; ++j)
            if (picked[j])
              lowest_picked = std::min(lowest_picked, score[j]);
            else
              highest_left = std::max(highest_left, score[j]);
          CHECK(lowest_picked >= highest_left - 1e-5);
          // each query head's output: softmax over the picked tokens only
          for (std::size_t g = 0; g < group; ++g) {
            const std::size_t hq = h * group + g;
            std::vector<double> w;
            double m = -1e300, sum = 0;
            for (std::size_t t = 0; t < kept; ++t) {
              double s = 0;
              for (std::size_t d = 0; d < D; ++d) s += q(b, hq, i, d) * keys(h, std::size_t(idx(b, h, i, t)), d);
              w.push_back(s / std::sqrt(double(D)));
              m = std::max(m, w.back());
            }
            for (double& x : w) sum += x = std::exp(x - m);
            for (std::size_t d = 0; d < D; ++d) {
              double o = 0;
              for (std::size_t t = 0; t < kept; ++t) o += w[t] / sum * values(h, std::size_t(idx(b, h, i, t)), d);
              CHECK(std::abs(out(b, hq, i, d) - o) < tol);
            }
          }
        }
    }
  }
  // every token selected: dense causal attention
  const auto [all, idx] = dsl::sparse::attend_top_k(cache, batch, q, 700, dims);
  CHECK(dsl::sparse::relative_error(all, dsl::sparse::attend_all(cache, batch, q)) < tol);
}

}  // namespace

TEST_CASE("sparse attention: the indexer's top-k tokens, attended where they lie in the pages", "[dsl][cache]") {
  check_sparse<float>(2e-6);
  check_sparse<xattn::bfloat16>(1e-2);  // queries rounded to bfloat16 for vdpbf16ps
}
