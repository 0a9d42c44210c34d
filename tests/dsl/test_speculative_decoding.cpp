// Speculative decoding (dsl/speculative_decoding.hpp): a draft tree verified in one pass with
// tree_mask over a kv_cache, the rejected tokens rolled back with truncate, gives greedy decoding's
// tokens, and each token comes from the target's attention over exactly its own history.
#include "speculative_decoding.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>

TEMPLATE_TEST_CASE("speculative decoding: a draft tree verified with tree_mask gives greedy decoding's tokens",
                   "[dsl][cache]", float, xattn::bfloat16) {
  const auto target = dsl::decoding::make_toy_model(/*vocab*/ 32, /*q_heads*/ 4, /*kv_heads*/ 2, /*head_dim*/ 16, 7);
  const std::vector<std::vector<int>> prompts{{1, 2, 3, 4, 5},
                                              {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  const std::size_t steps = 40;
  const auto greedy = dsl::decoding::generate_without_cache<TestType>(target, prompts, 1, steps);
  // a close draft accepts long paths, a poor one short paths; both trees hold 22 tokens (8 to 32)
  const float noise = GENERATE(1.0f, 2.0f);
  const auto draft = dsl::speculative::make_draft(target, noise, 11);
  const auto run = dsl::speculative::generate<TestType>(target, draft, prompts, steps, {3, 2, 1, 1});
  INFO("draft noise " << noise << ": " << run.verifications << " verifications, " << run.accepted
                      << " tokens accepted");
  CHECK(run.tree_tokens == 22);
  CHECK(run.tokens == greedy.tokens);
  // each generated token's attention output is the target's over its history alone: a mask that let
  // a tree token see its siblings keeps these tokens (argmax is robust) but moves the outputs by 0.5
  const auto tabled = dsl::speculative::with_tables(target);
  double worst = 0;
  for (std::size_t b = 0; b < prompts.size(); ++b)
    for (std::size_t i = 0; i < steps; ++i) {
      const std::vector<int> history(run.tokens[b].begin(),
                                     run.tokens[b].begin() + std::ptrdiff_t(prompts[b].size() + i));
      const auto want = dsl::speculative::attend_last<TestType>(tabled, history);
      for (std::size_t c = 0; c < want.size(); ++c)
        worst = std::max(worst, double(std::abs(want[c] - run.outputs[b][i][c])));
    }
  // bfloat16 pages verified with several queries take vdpbf16ps, which rounds the probabilities to
  // bf16 (docs/numerics.md: 2^-9 of max|V| per probability); one query per step (greedy) does not
  CHECK(worst < (std::is_same_v<TestType, float> ? 1e-5 : 1e-2));
  // fewer target passes than tokens: the drafts were verified, not decoded one by one
  CHECK(run.verifications < steps);
  CHECK(run.accepted > 0);
}
