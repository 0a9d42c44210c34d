// The decode loop of dsl/decode_loop.hpp (make demo): tokens generated from a kv_cache (prefill,
// forks, a ragged batch per step) are the tokens the same toy model generates from plain tensors,
// recomputed from the whole history at every step.
#include "decode_loop.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

TEMPLATE_TEST_CASE("decode loop: a kv_cache generates the tokens of recomputing every step", "[dsl][cache]", float,
                   xattn::bfloat16) {
  const auto m = dsl::decoding::make_toy_model(/*vocab*/ 32, /*q_heads*/ 4, /*kv_heads*/ 2, /*head_dim*/ 16, 7);
  const std::vector<std::vector<int>> prompts{{1, 2, 3, 4, 5},
                                              {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  const std::size_t forks = 2, steps = 24;
  const auto run = dsl::decoding::generate<TestType>(m, prompts, forks, steps);
  const auto want = dsl::decoding::generate_without_cache<TestType>(m, prompts, forks, steps);
  REQUIRE(run.tokens.size() == 4);
  CHECK(run.tokens == want.tokens);
  double worst = 0;  // the last step's attention, which argmax alone would hide
  for (std::size_t b = 0; b < 4; ++b)
    for (std::size_t i = 0; i < want.last[b].size(); ++i)
      worst = std::max(worst, double(std::abs(run.last[b][i] - want.last[b][i])));
  CHECK(worst < 1e-6);
  CHECK(run.generated == 4 * steps);
  // the continuations of a prompt part at their first token and share the prompt's full pages
  CHECK(run.tokens[0][prompts[0].size()] != run.tokens[1][prompts[0].size()]);
  CHECK(run.tokens[2][prompts[1].size()] != run.tokens[3][prompts[1].size()]);
  CHECK(run.shared == prompts[1].size() / 16);
}
