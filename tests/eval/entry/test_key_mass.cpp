// eval_with_key_mass: the attention each key received, against the double reference's weights
// summed over the queries and the query heads of each key head -- prefill and decoding splits,
// grouped heads, masks with fills and exclusions, sinks, a scoring policy, cache pages, each form.
#include "support/random.hpp"

#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

using namespace xattn;

namespace {

/// The reference's weights (B, Hq, Sq, Skv) summed into (B, Hkv, Skv).
template <class E>
xt::xtensor<double, 3> reference_mass(const E& e, std::size_t kv_heads) {
  const xt::xtensor<double, 4> w = reference(e).weights;
  const std::size_t B = w.shape()[0], Hq = w.shape()[1], Sq = w.shape()[2], Skv = w.shape()[3];
  xt::xtensor<double, 3> m = xt::zeros<double>({B, kv_heads, Skv});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < Hq; ++h)
      for (std::size_t i = 0; i < Sq; ++i)
        for (std::size_t j = 0; j < Skv; ++j) m(b, h / (Hq / kv_heads), j) += w(b, h, i, j);
  return m;
}

/// max |got - want| over (B, Hkv, Skv) elements, got read with strides of its form (row-major
/// (B, Hkv, Skv) unless packed: (B, Skv, Hkv)).
template <class M>
double mass_diff(const M& got, const xt::xtensor<double, 3>& want, bool packed = false) {
  const std::size_t B = want.shape()[0], H = want.shape()[1], S = want.shape()[2];
  REQUIRE(got.size() == want.size());
  double d = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t j = 0; j < S; ++j) {
        const std::size_t at = packed ? (b * S + j) * H + h : (b * H + h) * S + j;
        d = std::max(d, std::abs(double(got.data()[at]) - want(b, h, j)));
      }
  return d;
}

}  // namespace

TEST_CASE("key mass: prefill over query blocks, masks that fill and exclude, one and two threads") {
  testing::rng r(1);
  const xt::xtensor<double, 4> q = r.tensor<double>({2, 3, 70, 8}), k = r.tensor<double>({2, 3, 90, 8}),
                               v = r.tensor<double>({2, 3, 90, 5});
  const xt::xtensor<int, 1> lens = {90, 41};
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(mask(Q * trans(K) / 2.0, causal(align::bottom_right)), lengths(lens))) * V;
  const auto want = reference_mass(e, 3);
  for (const schedule s : {schedule{}, schedule{12, 16, 1}, schedule{6, 8, 2}}) {
    INFO("block_q " << s.block_q << ", block_k " << s.block_k << ", threads " << s.threads);
    const auto got = eval_with_key_mass(e, s);
    REQUIRE(got.key_mass.shape() == std::array<std::size_t, 3>{2, 3, 90});
    CHECK(mass_diff(got.key_mass, want) < 1e-12);
    CHECK(xt::amax(xt::abs(got.output - eval(e, s)))() == 0);  // the tap leaves the output as it was
  }
  // batch 1's keys past its length received nothing
  const auto got = eval_with_key_mass(e);
  for (std::size_t h = 0; h < 3; ++h)
    for (std::size_t j = 41; j < 90; ++j) CHECK(got.key_mass(1, h, j) == 0);
}

TEST_CASE("key mass: grouped-query decoding split over key chunks, ragged lengths") {
  testing::rng r(2);
  const std::size_t B = 2, Hq = 8, Hkv = 2, Skv = 3000, D = 64;
  const xt::xtensor<float, 4> k = r.tensor<float>({B, Hkv, Skv, D}), v = r.tensor<float>({B, Hkv, Skv, D});
  const xt::xtensor<int, 1> lens = {3000, 1234};
  for (const std::size_t n : {std::size_t(1), std::size_t(4)}) {
    INFO(n << " queries per sequence");
    const xt::xtensor<float, 4> q = r.tensor<float>({B, Hq, n, D}, -3, 3);
    auto Q = ref(q), K = ref(k), V = ref(v);
    const auto e =
        softmax(mask(mask(Q * trans(K) * 0.125f, causal(align::bottom_right)), lengths(lens, masked_rows::zero))) * V;
    const auto want = reference_mass(e, Hkv);
    for (const schedule s : {schedule{}, schedule{0, 0, 1}, schedule{0, 0, 2}}) {
      INFO("threads " << s.threads);
      const auto got = eval_with_key_mass(e, s);
      CHECK(mass_diff(got.key_mass, want) < 2e-6);
      CHECK(xt::amax(xt::abs(got.output - eval(e, s)))() == 0);
      // every row's weights sum to 1: each key head received group x n
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < Hkv; ++h) {
          double sum = 0;
          for (std::size_t j = 0; j < Skv; ++j) sum += got.key_mass(b, h, j);
          CHECK(sum == Approx(double(Hq / Hkv * n)).epsilon(1e-5));
        }
    }
  }
}

TEST_CASE("key mass: a draft tree verified against a cache, ragged sequences, every page type") {
  testing::rng r(3);
  const std::size_t Hkv = 2, Hq = 6, D = 32, n = 5;
  kv_cache<float> cache({.kv_heads = Hkv, .head_dim = D, .page_size = 16, .max_tokens = 4096});
  const auto a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, r.tensor<float>({Hkv, 1500, D}), r.tensor<float>({Hkv, 1500, D}));
  cache.append(b, r.tensor<float>({Hkv, 333, D}), r.tensor<float>({Hkv, 333, D}));
  const xt::xtensor<int, 1> parents = {-1, 0, 0, 1, 2};
  const xt::xtensor<float, 4> q = r.tensor<float>({2, Hq, n, D}, -2, 2);
  const auto e = softmax(mask(ref(q) * trans(cache.keys({a, b})) / std::sqrt(float(D)), tree_mask(parents))) *
                 cache.values({a, b});
  const auto got = eval_with_key_mass(e);
  REQUIRE(got.key_mass.shape() == std::array<std::size_t, 3>{2, Hkv, 1500});
  CHECK(mass_diff(got.key_mass, reference_mass(e, Hkv)) < 2e-6);
  for (std::size_t h = 0; h < Hkv; ++h)
    for (std::size_t j = 333; j < 1500; ++j) CHECK(got.key_mass(1, h, j) == 0);  // past sequence b's length
}

TEST_CASE("key mass: d2l's masked softmax, a fully masked row spread uniformly; (B, S, D) operands") {
  testing::rng r(4);
  const xt::xtensor<double, 3> q = r.tensor<double>({2, 3, 4}), k = r.tensor<double>({2, 10, 4}),
                               v = r.tensor<double>({2, 10, 6});
  const xt::xtensor<int, 1> valid_lens = {0, 6};  // batch 0: every score filled with -1e6
  const auto e = softmax(mask(ref(q) * trans(ref(k)), lengths(valid_lens))) * ref(v);
  const auto got = eval_with_key_mass(e);
  REQUIRE(got.key_mass.shape() == std::array<std::size_t, 2>{2, 10});
  CHECK(mass_diff(got.key_mass, reference_mass(e, 1)) < 1e-12);
  for (std::size_t j = 0; j < 10; ++j) CHECK(got.key_mass(0, j) == Approx(3.0 / 10));  // three uniform rows
}

TEST_CASE("key mass: packed heads, a sink and the additive scoring policy") {
  testing::rng r(5);
  const std::size_t H = 2;
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 7, H * 6}), k = r.tensor<float>({2, 50, H * 6}),
                              v = r.tensor<float>({2, 50, H * 4});
  auto Q = heads(q, H), K = heads(k, H), V = heads(v, H);
  const xt::xtensor<float, 1> sink_logits = {0.5f, 2.0f};
  const auto e = softmax(mask(Q * trans(K), causal(align::bottom_right)), sinks(sink_logits)) * V;
  const auto got = eval_with_key_mass(e);
  REQUIRE(got.key_mass.shape() == std::array<std::size_t, 3>{2, 50, H});
  CHECK(mass_diff(got.key_mass, reference_mass(e, H), true) < 2e-6);

  const xt::xtensor<float, 4> q4 = r.tensor<float>({1, 2, 9, 5}), k4 = r.tensor<float>({1, 2, 40, 3}),
                              v4 = r.tensor<float>({1, 2, 40, 4});
  const additive policy{r.tensor<float>({8, 5}), r.tensor<float>({8, 3}), r.tensor<float>({8})};
  const auto ea = softmax(score(policy, ref(q4), ref(k4))) * ref(v4);
  CHECK(mass_diff(eval_with_key_mass(ea).key_mass, reference_mass(ea, 2)) < 2e-6);
}
