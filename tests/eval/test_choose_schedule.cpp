// Tile sizes left at 0 are chosen from the head sizes and the L2 cache (block_k) and from the
// number of tasks per thread (block_q); the user's own values are kept; the output of a chosen
// schedule equals that of the same schedule written out, bitwise.
#include "support/random.hpp"

#include <xattn/eval/choose_schedule.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <cstring>

using namespace xattn;

namespace {
problem shape(std::size_t b, std::size_t h, std::size_t sq, std::size_t skv, std::size_t d, std::size_t dv) {
  problem pr;
  pr.batch = b, pr.q_heads = h, pr.kv_heads = h, pr.q_len = sq, pr.kv_len = skv, pr.q_dim = d, pr.k_dim = d,
  pr.v_dim = dv;
  return pr;
}
}  // namespace

TEST_CASE("choose_schedule: block_k is the largest of 512, 256, 128, 64 whose key and value block fits L2") {
  const std::size_t l2 = l2_cache_bytes();
  for (std::size_t d : {16, 64, 128, 256, 512, 1024})
    for (std::size_t bytes : {4, 8}) {
      const schedule s = choose_schedule({}, shape(1, 8, 4096, 4096, d, d), d, bytes, 1);
      INFO("D " << d << ", " << bytes << "-byte elements, L2 " << l2);
      REQUIRE((s.block_k == 512 || s.block_k == 256 || s.block_k == 128 || s.block_k == 64));
      REQUIRE((s.block_k == 64 || s.block_k * 2 * d * bytes <= l2));
      REQUIRE((s.block_k == 512 || 2 * s.block_k * 2 * d * bytes > l2));
    }
  if (l2 == std::size_t(1) << 20) {  // the development machine's numbers (docs/performance.md)
    REQUIRE(choose_schedule({}, shape(1, 8, 2048, 2048, 128, 128), 128, 4, 1).block_k == 512);
    REQUIRE(choose_schedule({}, shape(1, 8, 2048, 2048, 512, 512), 512, 4, 1).block_k == 256);
    REQUIRE(choose_schedule({}, shape(1, 8, 2048, 2048, 1024, 1024), 1024, 4, 1).block_k == 128);
  }
}

TEST_CASE("choose_schedule: block_q shrinks in 6-row steps until every thread has 4 tasks") {
  REQUIRE(choose_schedule({}, shape(1, 8, 2048, 2048, 64, 64), 64, 4, 2).block_q == 60);
  // one head of 256 queries on 2 threads: 60 rows give 5 tasks, 36 rows the 8 wanted
  REQUIRE(choose_schedule({}, shape(1, 1, 256, 256, 64, 64), 64, 4, 2).block_q == 36);
  REQUIRE(choose_schedule({}, shape(1, 1, 256, 256, 64, 64), 64, 4, 1).block_q == 60);
  REQUIRE(choose_schedule({}, shape(1, 1, 10, 256, 64, 64), 64, 4, 2).block_q == 6);  // cannot reach 8: stops at 6
}

TEST_CASE("choose_schedule: the user's values are kept, clamped to the problem") {
  const schedule s = choose_schedule({24, 100, 2}, shape(1, 2, 50, 80, 64, 64), 64, 4, 2);
  REQUIRE(s.block_q == 24);
  REQUIRE(s.block_k == 80);
  REQUIRE(s.threads == 2);
  REQUIRE(choose_schedule({1000, 0, 0}, shape(1, 2, 50, 80, 64, 64), 64, 4, 2).block_q == 50);
}

TEST_CASE("a chosen schedule gives the bits of the same schedule written out") {
  testing::rng r(5);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 300, 64}), k = r.tensor<float>({1, 2, 1500, 64}),
                              v = r.tensor<float>({1, 2, 1500, 64});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) / 8.0, causal(align::bottom_right))) * V;
  const std::size_t bk = choose_schedule({}, shape(1, 2, 300, 1500, 64, 64), 64, 4, 1).block_k;
  const xt::xtensor<float, 4> chosen = eval(e), written = eval(e, {60, bk, 1});
  REQUIRE(std::memcmp(chosen.data(), written.data(), chosen.size() * sizeof(float)) == 0);
  REQUIRE(testing::max_abs_diff(chosen, reference(e).output) < 2e-6);
}
