// Mask policies: block classification must agree with the element predicate on every block, and
// the built-ins' classification is exact -- a classify() that never skips (always partial) fails.
#include "support/classify.hpp"
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

using namespace xattn;

namespace {

template <class M>
void check_classify(const M& unbound, const problem& pr) {
  const auto m = bound(unbound, pr);
  if constexpr (has_row_span<std::decay_t<decltype(m)>>)  // the span is exactly the visible set
    for (std::size_t b = 0; b < pr.batch; ++b)
      for (std::size_t i = 0; i < pr.q_len; ++i) {
        const auto [first, last] = m.row_span(b, 0, i);
        for (std::size_t j = 0; j < pr.kv_len; ++j)
          REQUIRE(m.visible(b, 0, i, j) == (std::int64_t(j) >= first && std::int64_t(j) < last));
      }
  for (std::size_t b = 0; b < pr.batch; ++b)
    for (std::size_t bi : {1u, 3u, 8u})
      for (std::size_t bj : {1u, 4u, 16u})
        for (std::size_t i0 = 0; i0 < pr.q_len; i0 += bi)
          for (std::size_t j0 = 0; j0 < pr.kv_len; j0 += bj) {
            const std::size_t i1 = std::min(pr.q_len, i0 + bi), j1 = std::min(pr.kv_len, j0 + bj);
            const block truth = testing::classify_by_pairs(m, b, i0, i1, j0, j1);
            INFO("batch " << b << ", rows [" << i0 << ", " << i1 << "), keys [" << j0 << ", " << j1 << ")");
            REQUIRE(m.classify(b, 0, i0, i1, j0, j1) == truth);
          }
}

problem shape(std::size_t sq, std::size_t skv, std::size_t batch = 2) {
  problem pr;
  pr.batch = batch;
  pr.q_len = sq;
  pr.kv_len = skv;
  return pr;
}

}  // namespace

TEST_CASE("causal: top-left, bottom-right and per-batch offsets") {
  for (auto [sq, skv] : {std::pair{5u, 9u}, {9u, 5u}, {17u, 17u}}) {
    check_classify(causal(), shape(sq, skv));
    check_classify(causal(align::bottom_right), shape(sq, skv));
    check_classify(causal_offsets(std::vector<int>{-3, 2}), shape(sq, skv));
  }
  const auto tl = bound(causal(), shape(2, 4));
  REQUIRE(tl.visible(0, 0, 1, 1));
  REQUIRE_FALSE(tl.visible(0, 0, 1, 2));
  const auto br = bound(causal(align::bottom_right), shape(2, 4));
  REQUIRE(br.visible(0, 0, 0, 2));
  REQUIRE_FALSE(br.visible(0, 0, 0, 3));
}

TEST_CASE("lengths: 1-D and 2-D, classification") {
  check_classify(lengths(xt::xtensor<int, 1>{3, 11}), shape(6, 11));
  check_classify(lengths(xt::xtensor<long, 2>{{0, 1, 2, 3, 4, 5}, {11, 7, 0, 2, 9, 11}}), shape(6, 11));
  const auto m = bound(lengths(xt::xtensor<int, 1>{3, 0}), shape(1, 5));
  REQUIRE(m.visible(0, 0, 0, 2));
  REQUIRE_FALSE(m.visible(0, 0, 0, 3));
  REQUIRE(m.fill() == -1e6);
  REQUIRE(std::isinf(lengths(xt::xtensor<int, 1>{1}, masked_rows::zero).fill()));
}

TEST_CASE("window: classification and bounds") {
  for (auto [l, r] : {std::pair{2, 0}, {0, 3}, {4, 4}}) {
    check_classify(window(l, r), shape(13, 20));
    check_classify(window(l, r, align::bottom_right), shape(13, 20));
  }
  const auto w = bound(window(2, 1), shape(10, 10));
  REQUIRE(w.visible(0, 0, 5, 3));
  REQUIRE(w.visible(0, 0, 5, 6));
  REQUIRE_FALSE(w.visible(0, 0, 5, 2));
  REQUIRE_FALSE(w.visible(0, 0, 5, 7));
}

TEST_CASE("window with sink tokens: classification, hide_row and the StreamingLLM rule") {
  for (auto [l, r] : {std::pair{2, 0}, {0, 3}, {4, 4}})
    for (int n : {0, 1, 3, 7, 25}) {
      check_classify(window(l, r, sink_tokens(n)), shape(13, 20));
      check_classify(window(l, r, sink_tokens(n), align::bottom_right), shape(13, 20));
      check_classify(window(l, r, sink_tokens(n), align::bottom_right), shape(20, 13));
    }
  const auto w = bound(window(2, 0, sink_tokens(2)), shape(10, 10));
  REQUIRE(w.visible(0, 0, 6, 0));  // a sink token, far outside the window
  REQUIRE(w.visible(0, 0, 6, 1));
  REQUIRE_FALSE(w.visible(0, 0, 6, 2));
  REQUIRE(w.visible(0, 0, 6, 4));        // the window
  REQUIRE_FALSE(w.visible(0, 0, 0, 1));  // the right bound holds for sink tokens too
  // hide_row fills exactly the hidden keys of every row and key offset
  const auto m = bound(window(3, 1, sink_tokens(4)), shape(30, 30));
  for (std::size_t i = 0; i < 30; ++i)
    for (std::size_t j0 : {0u, 3u, 9u, 17u}) {
      std::vector<double> s(13, 1.0);
      m.hide_row(s.data(), s.size(), 0, 0, i, j0, -5.0);
      for (std::size_t c = 0; c < s.size(); ++c) REQUIRE((s[c] == 1.0) == m.visible(0, 0, i, j0 + c));
    }
  REQUIRE_THROWS_WITH(bound(window(2, 0, sink_tokens(-1)), shape(4, 4)), Catch::Contains("n must be >= 0, got -1"));
}

TEST_CASE("keep: a bool tensor broadcast against the scores") {
  xt::xtensor<bool, 2> k = {{true, false, true}};  // (1, Skv) -> every query of every batch and head
  problem pr = shape(4, 3);
  pr.q_heads = pr.kv_heads = 2;
  const auto m = bound(bool_mask(k), pr);
  REQUIRE(m.visible(1, 1, 3, 0));
  REQUIRE_FALSE(m.visible(1, 1, 3, 1));
  xt::xtensor<bool, 2> bad = {{true, false}};
  REQUIRE_THROWS_WITH(bound(bool_mask(bad), pr),
                      Catch::Contains("bool_mask(mask)") && Catch::Contains("(1,2)") && Catch::Contains("(2,2,4,3)"));
}

TEST_CASE("predicate: any callable") {
  const auto m =
      predicate([](std::size_t, std::size_t h, std::size_t i, std::size_t j) { return (i + j + h) % 2 == 0; });
  REQUIRE(m.visible(0, 0, 1, 1));
  REQUIRE_FALSE(m.visible(0, 1, 1, 1));
}

namespace {
/// The exact table of predicate f in blocks of bq x bk: what create_block_mask computes.
template <class F>
xt::xtensor<int, 4> table_of(const F& f, std::size_t batch, std::size_t sq, std::size_t skv, std::size_t bq,
                             std::size_t bk) {
  xt::xtensor<int, 4> t = xt::zeros<int>({batch, std::size_t(1), (sq + bq - 1) / bq, (skv + bk - 1) / bk});
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t x = 0; x < t.shape()[2]; ++x)
      for (std::size_t y = 0; y < t.shape()[3]; ++y) {
        std::size_t shown = 0, all = 0;
        for (std::size_t i = x * bq; i < std::min(sq, (x + 1) * bq); ++i)
          for (std::size_t j = y * bk; j < std::min(skv, (y + 1) * bk); ++j) shown += f(b, 0, i, j), ++all;
        t(b, 0, x, y) = shown == 0 ? 0 : shown == all ? 2 : 1;
      }
  return t;
}
}  // namespace

TEST_CASE("block_mask: a table of blocks and the predicate of its partial ones") {
  const auto f = [](std::size_t b, std::size_t, std::size_t i, std::size_t j) {
    return j <= i && i - j <= 5 + 3 * b;  // a causal band, wider in batch 1
  };
  for (auto [bq, bk] : {std::pair{4u, 4u}, {3u, 5u}, {8u, 2u}}) {
    const auto t = table_of(f, 2, 13, 17, bq, bk);
    INFO("blocks " << bq << " x " << bk);
    const auto m = bound(block_mask(t, bq, bk, f), shape(13, 17));
    // inside a partial table block the table cannot know more; elsewhere it is exact
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i0 = 0; i0 < 13; ++i0)
        for (std::size_t i1 = i0 + 1; i1 <= 13; i1 += 3)
          for (std::size_t j0 = 0; j0 < 17; ++j0)
            for (std::size_t j1 = j0 + 1; j1 <= 17; j1 += 2) {
              const block got = m.classify(b, 0, i0, i1, j0, j1),
                          truth = testing::classify_by_pairs(m, b, i0, i1, j0, j1);
              INFO("batch " << b << ", rows [" << i0 << ", " << i1 << "), keys [" << j0 << ", " << j1 << ")");
              REQUIRE((got == truth || got == block::partial));
              const bool aligned =
                  i0 % bq == 0 && (i1 % bq == 0 || i1 == 13) && j0 % bk == 0 && (j1 % bk == 0 || j1 == 17);
              if (aligned) REQUIRE(got == truth);
            }
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < 13; ++i) {
        const auto [first, last] = m.row_span(b, 0, i);  // a bound on the row's visible keys
        for (std::size_t j = 0; j < 17; ++j)
          if (f(b, 0, i, j)) REQUIRE((std::int64_t(j) >= first && std::int64_t(j) < last));
      }
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < 13; ++i)
        for (std::size_t j0 : {0u, 3u, 9u}) {
          std::vector<double> s(8, 1.0);
          m.hide_row(s.data(), s.size(), b, 0, i, j0, -5.0);
          for (std::size_t c = 0; c < s.size(); ++c) REQUIRE((s[c] == 1.0) == f(b, 0, i, j0 + c));
        }
  }
  // rows whose visible keys are one run: the spans decide, the predicate is never asked
  {
    const auto band = [](std::size_t, std::size_t, std::size_t i, std::size_t j) { return j <= i && i - j <= 4; };
    auto m = block_mask(table_of(band, 1, 13, 17, 4, 4), 4, [](std::size_t, std::size_t, std::size_t, std::size_t) {
      FAIL("asked");
      return false;
    });
    auto rows = std::make_shared<std::vector<std::pair<std::int64_t, std::int64_t>>>();
    for (std::int64_t i = 0; i < 13; ++i) rows->emplace_back(std::max<std::int64_t>(0, i - 4), i + 1);
    m.row_spans = rows;
    m.rows_are_spans = true;
    const auto bm = bound(m, shape(13, 17, 1));
    for (std::size_t i = 0; i < 13; ++i) {
      for (std::size_t j = 0; j < 17; ++j) REQUIRE(bm.visible(0, 0, i, j) == band(0, 0, i, j));
      std::vector<double> s(11, 1.0);
      bm.hide_row(s.data(), s.size(), 0, 0, i, 3, -5.0);
      for (std::size_t c = 0; c < s.size(); ++c) REQUIRE((s[c] == 1.0) == band(0, 0, i, 3 + c));
    }
  }
  // a table that calls a partial block full shows pairs the predicate hides
  auto wrong = table_of(f, 2, 13, 17, 4, 4);
  wrong(0, 0, 1, 1) = 2;
  REQUIRE(bound(block_mask(wrong, 4, f), shape(13, 17)).visible(0, 0, 4, 7));
  REQUIRE_FALSE(f(0, 0, 4, 7));
  // the table must cover the scores; partial blocks need a predicate
  REQUIRE_THROWS_WITH(bound(block_mask(table_of(f, 2, 13, 17, 4, 4), 4, f), shape(17, 17)),
                      Catch::Contains("kinds has shape (2,1,4,5)") && Catch::Contains("need (2 or 1, 1 or 1, 5, 5)"));
  REQUIRE_THROWS_WITH(bound(block_mask(table_of(f, 2, 13, 17, 4, 4), 4), shape(13, 17)),
                      Catch::Contains("partial blocks (1) but no predicate"));
  xt::xtensor<int, 4> three = xt::zeros<int>({1, 1, 1, 1});
  three(0, 0, 0, 0) = 3;
  REQUIRE_THROWS_WITH(block_mask(three, 4), Catch::Contains("kinds(0, 0, 0, 0) is 3"));
}

TEST_CASE("maybe_mask: an absent mask hides nothing, a given one is the mask") {
  const problem pr = shape(13, 20);
  for (const auto& [l, r] : {std::pair{3, 0}, std::pair{0, 5}}) {
    check_classify(maybe_mask<window_mask>{window(l, r)}, pr);
    const auto given = bound(maybe_mask<window_mask>{window(l, r)}, pr);
    const auto plain = bound(window(l, r), pr);
    for (std::size_t i = 0; i < 13; ++i) {
      REQUIRE(given.row_span(0, 0, i) == plain.row_span(0, 0, i));
      for (std::size_t j = 0; j < 20; ++j) REQUIRE(given.visible(0, 0, i, j) == plain.visible(0, 0, i, j));
    }
  }
  const auto absent = bound(maybe_mask<window_mask>{}, pr);
  check_classify(maybe_mask<window_mask>{}, pr);
  REQUIRE(absent.classify(1, 0, 0, 13, 0, 20) == block::visible);
  REQUIRE(absent.row_span(1, 0, 4) == std::pair<std::int64_t, std::int64_t>{0, 20});
  // in an expression: the given masks, composed as the kernel composes any, against the reference
  testing::rng g(11);
  const xt::xtensor<double, 4> q = g.tensor<double>({2, 2, 13, 8}), k = g.tensor<double>({2, 2, 20, 8}),
                               v = g.tensor<double>({2, 2, 20, 5});
  const xt::xtensor<int, 1> lens = {7, 20};
  const auto s = ref(q) * trans(ref(k));
  const auto masks = [&](auto e) {
    return mask(mask(mask(e, maybe_mask<window_mask>{}), maybe_mask<lengths_mask>{lengths(lens)}),
                maybe_mask<window_mask>{window(4, 0)});
  };
  const auto want = reference(softmax(mask(mask(s, lengths(lens)), window(4, 0))) * ref(v)).output;
  for (const schedule sch : {schedule{4, 16, 1}, schedule{}}) {
    INFO("block_q " << sch.block_q);
    REQUIRE(testing::max_abs_diff(eval(softmax(masks(s)) * ref(v), sch), want) < 1e-13);
  }
}
