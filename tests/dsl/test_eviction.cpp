// Eviction within a budget (dsl/eviction.hpp): StreamingLLM and H2O compact a kv_cache with keep;
// every step's attention output is the same attention over the kept tokens recomputed from plain
// tensors, the kept tokens are the ones each policy names, and the full cache does not drift.
#include "eviction.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

TEST_CASE("eviction: StreamingLLM and H2O keep their budget, each step attending exactly the kept tokens",
          "[dsl][cache]") {
  using dsl::eviction::policy;
  const auto m = dsl::decoding::make_toy_model(/*vocab*/ 32, /*q_heads*/ 4, /*kv_heads*/ 2, /*head_dim*/ 16, 5);
  std::vector<int> tokens(160);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * i * 7 + i * 3 + 1) % 32);
  const std::size_t budget = 40, sinks = 4;
  const auto full = dsl::eviction::run(m, tokens, policy::full, budget, sinks);
  CHECK(dsl::eviction::run(m, tokens, policy::full, budget, sinks, &full).drift == 0);
  for (const policy how : {policy::streaming, policy::h2o}) {
    const bool streaming = how == policy::streaming;
    INFO((streaming ? "StreamingLLM" : "H2O"));
    const auto r = dsl::eviction::run(m, tokens, how, budget, sinks, &full);
    double worst = 0;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const auto& kept = r.kept[t];
      REQUIRE(kept.size() == std::min(t + 1, budget + 1));  // the budget, and the step's new token
      REQUIRE(kept.back() == int(t));
      REQUIRE(std::is_sorted(kept.begin(), kept.end()));
      const std::size_t recent = streaming ? budget - sinks : budget / 2;
      for (std::size_t i = 0; i <= std::min(t, recent); ++i) REQUIRE(kept[kept.size() - 1 - i] == int(t - i));
      if (streaming)
        for (std::size_t i = 0; i < std::min(t + 1, sinks); ++i) REQUIRE(kept[i] == int(i));
      const auto want = dsl::eviction::attend(m, tokens, int(t), kept);
      for (std::size_t c = 0; c < want.size(); ++c)
        worst = std::max(worst, double(std::abs(want[c] - r.outputs[t][c])));
    }
    CHECK(worst < 1e-5);
    CHECK(r.drift > 0);
    CHECK(r.drift < 1);
  }
}
