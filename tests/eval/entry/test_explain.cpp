// explain(e, schedule) prints the plan and the resolved loop nest; what it says is what eval does:
// the score path, log2 e folding, the threads (a count the user sets is used), the split.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <span>

using namespace xattn;
using Catch::Contains;

namespace {
struct raw_cosine {  // operator() only, std::sqrt qualified: not recorded whole, so pair by pair, which explain must
                     // say
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d], qq += q[d] * q[d], kk += k[d] * k[d];
    return qq * kk == 0 ? T(0) : qk / std::sqrt(qq * kk);
  }
};
struct recordable_cosine {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;
    T qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d], qq += q[d] * q[d], kk += k[d] * k[d];
    return qq * kk == 0 ? T(0) : qk / sqrt(qq * kk);
  }
};
}  // namespace

TEST_CASE("explain: the score path, the scale and log2 e, the masks, the loop nest") {
  testing::rng r(1);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 8, 2048, 64}), k = q, v = q;
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto dense = explain(softmax(mask(Q * trans(K) / 8.0f, causal())) * V, {.threads = 2});
  INFO(dense);
  REQUIRE(dense.path == "dot_identity");
  REQUIRE(dense.folds_log2e);
  REQUIRE(dense.schedule.forward.threads == 2);
  REQUIRE(dense.schedule.forward.keys == key_reads::panels);
  REQUIRE(dense.schedule.forward.block_k == 512);
  REQUIRE_THAT(dense.text,
               Contains("score path  dot_identity") && Contains("causal_mask (excludes; classify skips blocks") &&
                   Contains("folded into the queries") && Contains("pack into panels of 512 keys (pack_kt[float])") &&
                   Contains("= 280 tasks on 2 threads") && Contains("P·V 60 x 512 x 64: ") &&
                   Contains("pv_tile_strips[float]"));
  const xt::xtensor<float, 1> t = xt::zeros<float>({8});
  const auto with_sinks = explain(softmax(mask(Q * trans(K) / 8.0f, window(64, 0, sink_tokens(4))), sinks(t)) * V);
  INFO(with_sinks);
  REQUIRE_THAT(with_sinks.text, Contains("sinks       one logit per query head") &&
                                    Contains("streaming_window_mask (excludes; classify skips blocks"));
  REQUIRE_THAT(dense.text, !Contains("sinks"));
  const xt::xtensor<int, 1> lens = {100};
  const auto filled = explain(softmax(mask(score(raw_cosine{}, Q, K), lengths(lens))) * V);
  INFO(filled);
  REQUIRE(filled.path == "recorded");
  REQUIRE(!filled.folds_log2e);  // the -1e6 fill needs natural units
  REQUIRE_THAT(filled.text, Contains("raw_cosine") && Contains("not separated (a value left the recorded code") &&
                                Contains("operator()(q, k) per pair") && Contains("lengths_mask (fills -1e+06"));
  // written with sqrt unqualified it separates: normalised rows, one product, nothing per pair
  const auto separated = explain(softmax(mask(score(recordable_cosine{}, Q, K), lengths(lens))) * V);
  REQUIRE_THAT(separated.text, Contains("64 features per row by the score microkernel") &&
                                   Contains("per pair nothing (the score is the product), 2 row guards"));
  const auto with_projections = explain(softmax(mask(score(cosine{}, Q, K), lengths(lens))) * V);
  REQUIRE(with_projections.path == "dot_features");  // the same score with projections: the SIMD path
}

TEST_CASE("explain: a thread count the user sets is honoured, even for tiny work; automatic counts say why") {
  testing::rng r(2);
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 8, 4});
  auto Q = ref(q);
  const auto e = softmax(Q * trans(Q)) * Q;
  REQUIRE(explain(e, {.threads = 2}).schedule.forward.threads == 2);
  REQUIRE(explain(e, {.threads = 2}).schedule.forward.threads_reason == "as requested");
  const auto automatic = explain(e);
  REQUIRE(automatic.schedule.forward.threads == 1);
  REQUIRE_THAT(automatic.text, Contains("threads 1 (auto: the work is below serial_below_flop"));
}

TEST_CASE("explain: decoding reads keys in place and merges key chunks; weights take two passes") {
  testing::rng r(3);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 32, 1, 128}), k = r.tensor<float>({1, 32, 4096, 128});
  auto Q = ref(q), K = ref(k);
  const auto d = explain(softmax(Q * trans(K)) * K);
  INFO(d);
  REQUIRE(d.schedule.forward.keys == key_reads::in_place);
  REQUIRE(d.schedule.forward.key_chunks == 4);
  REQUIRE_THAT(d.text, Contains("qk_direct[float] on keys in place") && Contains("merge 4 chunks by log-sum-exp"));
  const auto w = explain(softmax(Q * trans(K)));
  REQUIRE_THAT(w.text, Contains("pass 1: max and sum") && Contains("pass 2: weights"));
  REQUIRE(w.schedule.forward.key_chunks == 1);
}

TEST_CASE("explain: what another machine would run, whichever this one is") {
  testing::rng r(4);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 8, 2048, 128});
  auto Q = ref(q);
  const auto e = softmax(Q * trans(Q)) * Q;
  const machine large{.l2_bytes = std::size_t(2) << 20, .max_threads = 2, .openmp = true},
      small{.l2_bytes = std::size_t(256) << 10, .max_threads = 8, .openmp = true};
  const auto on_large = explain(e, {}, large), on_small = explain(e, {}, small, with_backward);
  // one key block's keys and values, block_k · (128 + 128) floats, fit the L2: 512 in 2 MiB, 256 in 256 KiB
  REQUIRE(on_large.schedule.forward.block_k == 512);
  REQUIRE(on_small.schedule.forward.block_k == 256);
  REQUIRE(on_large.schedule.forward.threads == 2);
  REQUIRE(on_small.schedule.forward.threads == 8);
  REQUIRE_THAT(on_small.text, Contains("threads 8 (auto") && Contains("backward"));
  REQUIRE(explain(e, {}).schedule.forward.block_k == explain(e, {}, machine::here()).schedule.forward.block_k);
}
