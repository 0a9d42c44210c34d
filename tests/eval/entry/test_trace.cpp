// explain says what runs: built with XATTN_TRACE_TILE_OPS, the kernel and the score paths record
// every tile operation they execute, and a run's record must be exactly the operations explain
// named -- forward and backward, on the bf16 path, decoding, tensor scores, a combine policy and
// masked and unmasked backward passes. (This executable alone is built in the recording mode.)
#include "explain_examples.hpp"
#include "support/random.hpp"

#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace xattn;
using kernel::operation;
using kernel::tile_op;

static_assert(kernel::tracing, "tests/eval/entry/test_trace.cpp must be built with XATTN_TRACE_TILE_OPS");

namespace {

std::vector<tile_op> sorted(std::vector<tile_op> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::string names(const std::vector<tile_op>& ops) {
  std::string s;
  for (tile_op op : ops) s += kernel::name_of(op) + " ";
  return s;
}

/// What ran == what explain named, and every name is in explain's text.
void same(const std::vector<tile_op>& ran, const std::vector<tile_op>& explained, const std::string& text) {
  INFO("ran: " << names(sorted(ran)) << "\nexplained: " << names(sorted(explained)) << "\n" << text);
  REQUIRE(sorted(ran) == sorted(explained));
  for (tile_op op : ran) REQUIRE(text.find(kernel::name_of(op)) != std::string::npos);
}

/// Each thread ran its operations in an order the nest allows: after op a, op b comes later in
/// the nest, or a loop around a goes back to b. (Steps that run only sometimes, hidden blocks,
/// a head's first block, may be left out; nothing runs out of its loop or before what precedes it.)
void in_nest_order(const std::vector<std::vector<tile_op>>& runs, const std::vector<stage>& nest,
                   const std::string& text) {
  std::vector<tile_op> flat;                               // the nest's operations, line by line
  std::vector<std::pair<std::size_t, std::size_t>> loops;  // each loop's operations [first, end)
  std::vector<std::pair<int, std::size_t>> open;           // (depth, loop) of the loops around
  const auto close = [&](int depth) {
    for (; !open.empty() && open.back().first >= depth; open.pop_back()) loops[open.back().second].second = flat.size();
  };
  for (const stage& l : nest) {
    close(l.depth);
    if (l.loop) {
      open.emplace_back(l.depth, loops.size());
      loops.emplace_back(flat.size(), flat.size());
    }
    flat.insert(flat.end(), l.ops.begin(), l.ops.end());
  }
  close(0);
  const auto follows = [&](tile_op a, tile_op b) {
    for (std::size_t pa = 0; pa < flat.size(); ++pa)
      for (std::size_t pb = 0; pa < flat.size() && flat[pa] == a && pb < flat.size(); ++pb) {
        if (flat[pb] != b) continue;
        if (pb > pa) return true;
        for (const auto& [first, end] : loops)
          if (first <= pb && pa < end) return true;
      }
    return false;
  };
  for (const auto& run : runs)
    for (std::size_t i = 1; i < run.size(); ++i) {
      INFO("a thread ran " << kernel::name_of(run[i - 1]) << " then " << kernel::name_of(run[i]) << " (step " << i
                           << " of " << names(run) << ")\n"
                           << text);
      REQUIRE(follows(run[i - 1], run[i]));
    }
}

template <class E>
explanation check_forward(const E& e, const schedule& s = {}) {
  const explanation x = explain(e, s);
  kernel::trace::clear();
  (void)eval(e, s);
  same(kernel::trace::recorded(), x.forward_ops, x.text);
  in_nest_order(kernel::trace::sequences(), x.forward_stages, x.text);
  return x;
}

template <class E>
explanation check_backward(const E& e, const schedule& s = {}) {
  const explanation x = explain(e, s, xattn::with_backward);
  const auto f = eval_with_lse(e, s);
  testing::rng r(99);
  const auto d_out = r.tensor<float>(std::vector<std::size_t>(f.output.shape().begin(), f.output.shape().end()));
  kernel::trace::clear();
  (void)grad(e, f, d_out, s);
  same(kernel::trace::recorded(), x.backward_ops, x.text);
  in_nest_order(kernel::trace::sequences(), x.backward_stages, x.text);
  return x;
}

bool has(const std::vector<tile_op>& ops, tile_op op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); }

/// explain's text for the docs' machine is what docs/design.md quotes (tests/data/explain/NAME.txt,
/// which check_snippets holds the docs to). The backward's blocks follow the P·V microkernel's strip
/// width, so a build of another SIMD width compares the forward alone.
void as_quoted(const explanation& x, const std::string& name) {
  const std::string path = std::string(XATTN_EXPLAIN_DIR) + "/" + name + ".txt";
  if (std::getenv("XATTN_UPDATE_EXPLAIN") && kernel::strip_width<float> == 64) std::ofstream(path) << x.text;
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream file;
  file << in.rdbuf();
  std::string want = file.str(), got = x.text;
  if (kernel::strip_width<float> != 64) {
    want = want.substr(0, want.find("\nbackward\n"));
    got = got.substr(0, got.find("\nbackward\n"));
  }
  INFO("explain printed (" << path << "):\n" << x.text);
  REQUIRE(got == want);
}

}  // namespace

TEST_CASE("trace: the forward runs what explain names") {
  testing::rng r(1);
  SECTION("bfloat16 operands: pairs on vdpbf16ps where the build has it, widened otherwise") {
    xt::xtensor<bfloat16, 4> q = xt::xtensor<bfloat16, 4>::from_shape({1, 4, 200, 64}), k = q, v = q;
    for (auto* t : {&q, &k, &v})
      for (auto& x : *t) x = bfloat16(float(r.uniform(-1, 1)));
    auto Q = ref(q), K = ref(k), V = ref(v);
    const auto x = check_forward(softmax(mask(Q * trans(K) / 8.0f, causal())) * V);
    REQUIRE(x.path == (kernel::has_dpbf16 ? "dot_bf16" : "dot_identity"));
  }
  SECTION("decoding: keys and values read in place, key chunks merged") {
    const auto q = r.tensor<float>({1, 8, 1, 64}), k = r.tensor<float>({1, 8, 4096, 64});
    const auto x = check_forward(softmax(ref(q) * trans(ref(k)) / 8.0f) * ref(k), {.threads = 2});
    REQUIRE(x.schedule.forward.key_chunks > 1);
    REQUIRE(x.schedule.forward.values == value_reads::in_place);
    REQUIRE(has(x.forward_ops, {operation::qk_direct, "float"}));
    REQUIRE(has(x.forward_ops, {operation::pv_tile, "float"}));
    REQUIRE(x.text.find("qk_direct[float] on keys in place") != std::string::npos);
  }
  SECTION("decoding from 16-bit and fp8 cache pages: each format's rows in the products") {
    const auto q = r.tensor<float>({2, 4, 1, 64});
    const auto run = [&](auto element, std::string_view format) {
      kv_cache<decltype(element)> cache({.kv_heads = 2, .head_dim = 64, .page_size = 16, .max_tokens = 1024});
      const auto a = cache.add_sequence(), b = cache.add_sequence();
      cache.append(a, r.tensor<float>({2, 200, 64}), r.tensor<float>({2, 200, 64}));
      cache.append(b, r.tensor<float>({2, 33, 64}), r.tensor<float>({2, 33, 64}));
      const std::vector<sequence_id> batch{a, b};
      const auto x = check_forward(softmax(ref(q) * trans(cache.keys(batch)) / 8.0f) * cache.values(batch));
      REQUIRE(has(x.forward_ops, {operation::qk_direct, format}));
      REQUIRE(has(x.forward_ops, {operation::pv_tile, format}));
    };
    run(bfloat16{}, "bfloat16");
    run(float16{}, "float16");
    run(float8_e4m3{}, "f8_e4m3");
  }
  SECTION("decoding from int8 (q8_0) cache pages: integer products, values dequantized as loaded") {
    kv_cache<std::int8_t> cache({.kv_heads = 2, .head_dim = 64, .page_size = 16, .max_tokens = 4096});
    const auto a = cache.add_sequence(), b = cache.add_sequence();
    cache.append(a, r.tensor<float>({2, 300, 64}), r.tensor<float>({2, 300, 64}));
    cache.append(b, r.tensor<float>({2, 45, 64}), r.tensor<float>({2, 45, 64}));
    const std::vector<sequence_id> batch{a, b};
    const auto q = r.tensor<float>({2, 8, 1, 64});
    const auto x = check_forward(softmax(ref(q) * trans(cache.keys(batch)) / 8.0f) * cache.values(batch));
    const auto& ops = x.forward_ops;
    REQUIRE(std::count(ops.begin(), ops.end(), tile_op{operation::qk_direct, "q8_0"}) == 1);
    REQUIRE(std::count(ops.begin(), ops.end(), tile_op{operation::pv_tile, "q8_0"}) == 1);
    REQUIRE(x.text.find("qk_direct[q8_0] on keys in place") != std::string::npos);
  }
  SECTION("scores given as a tensor, lengths mask") {
    const auto s = r.tensor<float>({2, 100, 300}), v = r.tensor<float>({2, 300, 32});
    const xt::xtensor<int, 1> lens = {250, 17};
    const auto x = check_forward(softmax(mask(ref(s), lengths(lens))) * ref(v));
    REQUIRE(x.path == "tensor");
  }
  SECTION("a combine policy: projections, then combine per pair") {
    const auto q = r.tensor<float>({2, 100, 24}), k = r.tensor<float>({2, 120, 16}), v = r.tensor<float>({2, 120, 32});
    const additive a{r.tensor<float>({8, 24}), r.tensor<float>({8, 16}), r.tensor<float>({8})};
    const auto x = check_forward(softmax(score(a, ref(q), ref(k))) * ref(v));
    REQUIRE(x.path == "pair_features");
  }
  SECTION("the weights, materialised") {
    const auto q = r.tensor<float>({1, 2, 100, 32});
    check_forward(softmax(mask(ref(q) * trans(ref(q)), causal())));
  }
}

TEST_CASE("trace: the backward runs what explain names") {
  testing::rng r(2);
  const auto q = r.tensor<float>({1, 2, 300, 64}), k = r.tensor<float>({1, 2, 300, 64}),
             v = r.tensor<float>({1, 2, 300, 64});
  auto Q = ref(q), K = ref(k), V = ref(v);
  SECTION("no mask: every tile plain, P and dS from the products' epilogues") {
    const auto x = check_backward(softmax(Q * trans(K) / 8.0f) * V);
    REQUIRE(x.schedule.backward.fused_epilogues);
  }
  SECTION("causal: plain tiles below the diagonal, the general steps on it") {
    check_backward(softmax(mask(Q * trans(K) / 8.0f, causal())) * V);
  }
  SECTION("a modifier: no epilogues") {
    const auto x = check_backward(softmax(softcap(Q * trans(K) / 8.0f, 20.0)) * V);
    REQUIRE(!x.schedule.backward.fused_epilogues);
  }
  SECTION("a separable policy: features, products, terms, projections back") {
    const auto x = check_backward(softmax(score(gaussian{4.0}, Q, K)) * V);
    REQUIRE(x.path == "dot_features");
  }
  SECTION("a combine policy, pair by pair") {
    const auto q3 = r.tensor<float>({2, 60, 24}), k3 = r.tensor<float>({2, 70, 16}), v3 = r.tensor<float>({2, 70, 32});
    const additive a{r.tensor<float>({8, 24}), r.tensor<float>({8, 16}), r.tensor<float>({8})};
    const xt::xtensor<int, 1> lens = {50, 70};
    check_backward(softmax(mask(score(a, ref(q3), ref(k3)), lengths(lens, masked_rows::zero))) * ref(v3));
  }
  SECTION("scores given as a tensor") {
    const auto s = r.tensor<float>({2, 100, 300}), v3 = r.tensor<float>({2, 300, 32});
    check_backward(softmax(ref(s)) * ref(v3));
  }
  SECTION("bfloat16 operands: all five products on vdpbf16ps where the build has it") {
    const xt::xtensor<bfloat16, 4> q16 = xt::cast<bfloat16>(q), k16 = xt::cast<bfloat16>(k),
                                   v16 = xt::cast<bfloat16>(v);
    auto Q16 = ref(q16), K16 = ref(k16), V16 = ref(v16);
    const auto x = check_backward(softmax(mask(Q16 * trans(K16) / 8.0f, causal())) * V16);
    REQUIRE(has(x.backward_ops, {operation::pv_tile_strips, kernel::bf16_pairs}) == kernel::has_dpbf16);
    // bfloat16 values alone: dP and dV on vdpbf16ps, S, dQ and dK in float
    const auto y = check_backward(softmax(Q * trans(K) / 8.0f) * V16);
    REQUIRE(has(y.backward_ops, {operation::qk_tile, kernel::bf16_pairs}) == kernel::has_dpbf16);
  }
}

// The explanations docs/design.md prints, on the shapes it prints them for.
TEST_CASE("trace: the explanations quoted in docs/design.md") {
  using namespace xattn::examples;
  testing::rng r(3);
  SECTION("causal self-attention, forward and backward") {
    const xt::xtensor<float, 4> q = r.tensor<float>({1, 8, 2048, 64}), k = r.tensor<float>({1, 8, 2048, 64}),
                                v = r.tensor<float>({1, 8, 2048, 64});
    check_forward(causal_attention(q, k, v), two_threads);
    const auto x = check_backward(causal_attention(q, k, v), two_threads);
    REQUIRE(x.path == "dot_identity");
    as_quoted(explain(causal_attention(q, k, v), two_threads, docs_machine, with_backward), "causal");
  }
  SECTION("d2l's additive attention with valid lengths") {
    const xt::xtensor<float, 3> q = r.tensor<float>({2, 256, 64}), k = r.tensor<float>({2, 256, 32}),
                                v = r.tensor<float>({2, 256, 64});
    const additive a{r.tensor<float>({64, 64}), r.tensor<float>({64, 32}), r.tensor<float>({64})};
    const xt::xtensor<int, 1> lens = {200, 256};
    REQUIRE(check_forward(additive_attention(a, q, k, v, lens), two_threads).path == "pair_features");
    as_quoted(explain(additive_attention(a, q, k, v, lens), two_threads, docs_machine), "additive");
  }
  SECTION("a decoding step against a bfloat16 KV cache") {
    const xt::xtensor<float, 4> q = r.tensor<float>({1, 32, 1, 128});
    xt::xtensor<bfloat16, 4> k = xt::xtensor<bfloat16, 4>::from_shape({1, 8, 4096, 128}), v = k;
    for (auto* t : {&k, &v})
      for (auto& x : *t) x = bfloat16(float(r.uniform(-1, 1)));
    const auto x = check_forward(decode_step(q, k, v), two_threads);
    REQUIRE(x.schedule.forward.group_rows == 4);
    REQUIRE(x.schedule.forward.values == value_reads::in_place);
    as_quoted(explain(decode_step(q, k, v), two_threads, docs_machine), "decode");
  }
  SECTION("an encoder batch of short sequences") {
    const xt::xtensor<float, 4> q = r.tensor<float>({16, 8, 128, 64}), k = r.tensor<float>({16, 8, 128, 64}),
                                v = r.tensor<float>({16, 8, 128, 64});
    const auto x = check_forward(encoder_attention(q, k, v), two_threads);
    REQUIRE(x.schedule.forward.keys == key_reads::per_head);
    as_quoted(explain(encoder_attention(q, k, v), two_threads, docs_machine), "encoder");
  }
  SECTION("bfloat16 decoding: widened keys for a few query rows, vdpbf16ps for more") {
    xt::xtensor<bfloat16, 4> k = xt::xtensor<bfloat16, 4>::from_shape({1, 2, 1024, 64}), v = k;
    for (auto* t : {&k, &v})
      for (auto& x : *t) x = bfloat16(float(r.uniform(-1, 1)));
    const auto ops_for = [&](std::size_t sq) {
      xt::xtensor<bfloat16, 4> q = xt::xtensor<bfloat16, 4>::from_shape({1, 2, sq, 64});
      for (auto& x : q) x = bfloat16(float(r.uniform(-1, 1)));
      const auto x = check_forward(softmax(ref(q) * trans(ref(k)) * 0.125f) * ref(v), two_threads);
      REQUIRE(x.schedule.forward.keys == key_reads::in_place);
      return x.forward_ops;
    };
    const tile_op widened{operation::qk_direct, "bfloat16"}, pairs{operation::qk_direct, kernel::bf16_pairs};
    REQUIRE(has(ops_for(1), widened));
    REQUIRE(has(ops_for(4), widened));
    REQUIRE(has(ops_for(8), kernel::has_dpbf16 ? pairs : widened));
  }
}
