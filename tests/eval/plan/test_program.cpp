// The loop nest as data: forward_program and backward_program list the steps a run executes, the
// drivers and workers run exactly those (a step taken out is work not done), and explain prints
// one line per step.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace xattn;

namespace {

std::vector<step> kinds(const program& g) {
  std::vector<step> k;
  for (const program_step& s : g) k.push_back(s.kind);
  return k;
}

forward_schedule attention_schedule(std::size_t chunks, bool prefetch) {
  forward_schedule fs;
  fs.kind = pass_kind::attention;
  fs.key_chunks = chunks;
  fs.prefetch_next = prefetch;
  fs.keys = key_reads::panels;
  return fs;
}

/// The plan, sizes and forward schedule of an expression, as eval resolves them.
template <class E>
auto resolved(const E& e, const schedule& s) {
  const auto p = make_plan(e);
  const problem pr = resolve(p);
  const forward_schedule fs = schedule_for(p, pr, s, pass_kind::attention).forward;
  return std::tuple{p, pr, fs};
}

/// eval's output, by the steps of g, into a tensor first filled with NaN.
template <class E>
xt::xtensor<float, 4> run(const E& e, const schedule& s, const program& g) {
  const auto [p, pr, fs] = resolved(e, s);
  xt::xtensor<float, 4> out({pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
  out.fill(std::numeric_limits<float>::quiet_NaN());
  const layout<4> at = layout<4>::row_major({pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
  run_fused<float>(p, pr, fs, g, strided_view<float>{out.data(), at});
  return out;
}

bool same(const xt::xtensor<float, 4>& a, const xt::xtensor<float, 4>& b) { return a == b; }

}  // namespace

TEST_CASE("program: the forward's steps follow the schedule") {
  const program plain = forward_program(attention_schedule(1, false), false);
  CHECK(kinds(plain) == std::vector<step>{step::heading, step::prepare_keys, step::tasks, step::start_rows,
                                          step::key_blocks, step::scores, step::modify_mask, step::online_softmax,
                                          step::values, step::finalize});
  CHECK(plain.body_end(2) == plain.size());  // the tasks' loop holds every later step
  CHECK(plain.body_end(4) == 9);             // the key blocks' loop ends before finalize
  CHECK(plain[4].loop);
  CHECK(plain[4].depth == 2);

  const program split = forward_program(attention_schedule(4, true), false);
  CHECK(split[split.size() - 1].kind == step::merge_chunks);  // after the tasks, at their depth
  CHECK(split[split.size() - 1].depth == 1);
  CHECK_FALSE(split.has(step::prefetch_next));  // a split task writes scratch: nothing to prefetch

  forward_schedule streamed = attention_schedule(1, true);
  streamed.keys = key_reads::per_head;
  const program next = forward_program(streamed, false);
  CHECK(kinds(next)[2] == step::prefetch_next);  // first in a task
  CHECK_FALSE(next.has(step::prepare_keys));     // no key work, no panels before the tasks
  CHECK(forward_program(streamed, true).has(step::prepare_keys));

  forward_schedule weights = attention_schedule(1, false);
  weights.kind = pass_kind::weights;
  const program w = forward_program(weights, false);
  CHECK(kinds(w) == std::vector<step>{step::heading, step::prepare_keys, step::tasks, step::start_rows,
                                      step::key_blocks, step::scores, step::modify_mask, step::softmax_state,
                                      step::key_blocks, step::scores, step::modify_mask, step::write_weights});
  CHECK(w[4].pass == block_pass::state);
  CHECK(w[8].pass == block_pass::weights);
}

TEST_CASE("program: the backward's general tile is listed when some tile may need it") {
  backward_schedule bs;
  bs.fused_epilogues = true;
  CHECK_FALSE(backward_program(bs, false, false).has(step::general_tile));
  CHECK(backward_program(bs, false, true).has(step::general_tile));
  bs.fused_epilogues = false;  // modifiers or dropout: every tile is general
  const program g = backward_program(bs, true, false);
  CHECK_FALSE(g.has(step::plain_tile));
  CHECK(g.has(step::general_tile));
  CHECK(g.has(step::prepare_rows));
  const std::size_t tile = g.find(step::query_blocks);
  CHECK(g.body_end(tile) == g.find(step::store_block));
}

TEST_CASE("program: the workers run the steps listed, and only those") {
  testing::rng r(5);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 40, 16}), k = r.tensor<float>({1, 2, 70, 16}),
                              v = r.tensor<float>({1, 2, 70, 8});
  const auto e = softmax(mask(ref(q) * trans(ref(k)) / std::sqrt(16.0), causal(align::bottom_right))) * ref(v);
  const schedule s{.block_q = 16, .block_k = 32, .threads = 2};
  const auto [p, pr, fs] = resolved(e, s);
  const program all = forward_program(fs, false);
  const xt::xtensor<float, 4> want = eval(e, s);
  CHECK(same(run(e, s, all), want));  // the program eval runs, run by hand: the same bits

  // without P·V the accumulators stay 0: the output is 0 / l
  const xt::xtensor<float, 4> no_values = run(e, s, all.without(step::values));
  CHECK(xt::all(xt::equal(no_values, 0.0f)));
  // without finalize nothing is written
  const xt::xtensor<float, 4> unwritten = run(e, s, all.without(step::finalize));
  CHECK(xt::all(xt::isnan(unwritten)));
  // without the masks' step the partial blocks are not masked (hidden blocks are still skipped):
  // some rows change, the first block's rows see keys past their own
  const xt::xtensor<float, 4> unmasked = run(e, s, all.without(step::modify_mask));
  CHECK(xt::all(xt::isfinite(unmasked)));
  CHECK_FALSE(same(unmasked, want));

  // a decoding split merges its chunks in a step of its own
  const xt::xtensor<float, 4> q1 = r.tensor<float>({1, 1, 1, 16}), k1 = r.tensor<float>({1, 1, 4096, 16}),
                              v1 = r.tensor<float>({1, 1, 4096, 8});
  const auto d = softmax(ref(q1) * trans(ref(k1)) / 4.0) * ref(v1);
  const schedule split{.block_k = 64, .threads = 2};
  const auto [dp, dpr, dfs] = resolved(d, split);
  REQUIRE(dfs.key_chunks > 1);
  const program chunks = forward_program(dfs, false);
  REQUIRE(chunks.has(step::merge_chunks));
  CHECK(same(run(d, split, chunks), eval(d, split)));
  CHECK(xt::all(xt::isnan(run(d, split, chunks.without(step::merge_chunks)))));
}

TEST_CASE("program: explain prints a line per step, in the program's order") {
  testing::rng r(6);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 40, 16}), k = r.tensor<float>({1, 2, 70, 16}),
                              v = r.tensor<float>({1, 2, 70, 8});
  const auto e = softmax(mask(ref(q) * trans(ref(k)) / 4.0, causal(align::bottom_right))) * ref(v);
  const schedule s{.block_q = 16, .block_k = 32, .threads = 2};
  const explanation x = explain(e, s, with_backward);
  const auto [p, pr, fs] = resolved(e, s);
  const program f = forward_program(fs, false);
  REQUIRE(x.forward_stages.size() == f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    CHECK(x.forward_stages[i].depth == f[i].depth);
    CHECK(x.forward_stages[i].loop == f[i].loop);
  }
  CHECK(x.forward_stages[f.find(step::values)].text.rfind("P·V 16 x 32 x 8: ", 0) == 0);
  REQUIRE(x.backward_stages.size() == backward_program(x.schedule.backward, false, true).size());
}
