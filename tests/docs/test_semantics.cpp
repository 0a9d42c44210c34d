// Every convention docs/semantics.md states, checked on the examples it quotes from
// dsl/semantics_examples.hpp (and a few more), against closed forms.
#include "catalogue/prefix_lm_mask.hpp"
#include "semantics_examples.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>

using namespace xattn;
using testing::max_abs_diff;

namespace {
constexpr float finf = std::numeric_limits<float>::infinity();
}

TEST_CASE("semantics: a row with no visible key -- d2l's uniform weights vs zero output") {
  testing::rng r(1);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 3, 4}), k = r.tensor<float>({2, 6, 4}),
                              v = r.tensor<float>({2, 6, 2});
  const xt::xtensor<int, 1> lens = {0, 3};
  const auto [d2l_like, onnx_like] = dsl::semantics::masked_rows_both(q, k, v, lens);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t d = 0; d < 2; ++d) {
      double mean = 0;
      for (std::size_t j = 0; j < 6; ++j) mean += v(0, j, d) / 6.0;
      REQUIRE(d2l_like(0, i, d) == Approx(mean).margin(1e-6));                // uniform over all keys
      REQUIRE(onnx_like(0, i, d) == 0.0f);                                    // exactly zero
      REQUIRE(d2l_like(1, i, d) == Approx(onnx_like(1, i, d)).margin(1e-6));  // rows with keys agree
    }
}

TEST_CASE("semantics: causal alignment top-left, bottom-right, per-batch offsets") {
  const xt::xtensor<double, 3> q = xt::zeros<double>({2, 3, 1}), k = xt::zeros<double>({2, 5, 1});
  const auto [tl, br, pb] = dsl::semantics::causal_alignments(q, k, {-1, 1});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        REQUIRE(tl(b, i, j) == Approx(j <= i ? 1.0 / double(i + 1) : 0.0));
        REQUIRE(br(b, i, j) == Approx(j <= i + 2 ? 1.0 / double(i + 3) : 0.0));  // Skv - Sq = 2
        const int o = b == 0 ? -1 : 1, n = std::max(0, int(i) + o + 1);          // keys 0 .. i + o
        REQUIRE(pb(b, i, j) == Approx(int(j) < n ? 1.0 / n : 0.0));              // no key: a zero row
      }
}

TEST_CASE("semantics: d2l's 2-D valid lengths i + 1 are the top-left causal mask") {
  testing::rng r(2);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 6, 4}), k = r.tensor<float>({2, 6, 4});
  auto Q = ref(q), K = ref(k);
  REQUIRE(max_abs_diff(dsl::semantics::d2l_causal(q, k), eval(softmax(mask(Q * trans(K), causal())))) < 1e-7);
}

TEST_CASE("semantics: bool masks attend where true; float masks are added") {
  testing::rng r(3);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 4, 3}), k = r.tensor<float>({2, 5, 3});
  xt::xtensor<bool, 2> keep = xt::xtensor<bool, 2>::from_shape({4, 5});
  for (auto& x : keep) x = r.coin(0.6);
  keep(2, 0) = true;
  xt::xtensor<float, 2> add = xt::where(keep, 0.0f, -finf);
  const auto [by_bool, by_float] = dsl::semantics::mask_values(q, k, keep, add);
  REQUIRE(max_abs_diff(by_bool, by_float) < 1e-7);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 5; ++j)
      if (!keep(i, j)) REQUIRE(by_bool(1, i, j) == 0.0f);
  // a finite float mask re-weights: adding log 2 to one key doubles its odds
  xt::xtensor<float, 2> tilt = xt::zeros<float>({4, 5});
  tilt(1, 3) = std::log(2.0f);
  const auto [plain, tilted] = dsl::semantics::mask_values(q, k, xt::xtensor<bool, 2>(xt::ones<bool>({4, 5})), tilt);
  REQUIRE(tilted(0, 1, 3) / tilted(0, 1, 2) == Approx(2 * plain(0, 1, 3) / plain(0, 1, 2)).epsilon(1e-5));
}

TEST_CASE("semantics: no scale unless written; 1/sqrt(d) by hand or by scaled_dot") {
  testing::rng r(4);
  const xt::xtensor<double, 3> q = r.tensor<double>({1, 2, 9}), k = r.tensor<double>({1, 3, 9});
  const auto [unscaled, by_hand, by_policy] = dsl::semantics::scales(q, k);
  double dot = 0;
  for (std::size_t d = 0; d < 9; ++d) dot += q(0, 1, d) * k(0, 2, d);
  REQUIRE(unscaled(0, 1, 2) == Approx(dot));
  REQUIRE(by_hand(0, 1, 2) == Approx(dot / 3));
  REQUIRE(max_abs_diff(by_hand, by_policy) < 1e-12);
}

TEST_CASE("semantics: softcap before the mask -- masked keys stay out (ONNX's poison test)") {
  testing::rng r(5);
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 4, 8}, -4, 4), k = r.tensor<float>({1, 4, 8}, -4, 4);
  xt::xtensor<float, 3> v = r.tensor<float>({1, 4, 1});
  v(0, 3, 0) = 1000;  // only query 3 may see key 3
  const auto out = dsl::semantics::softcap_then_mask(q, k, v, 2.0);
  for (std::size_t i = 0; i < 3; ++i) REQUIRE(std::abs(out(0, i, 0)) < 1);
  double s[4], m = -1e300, l = 0, o = 0;
  for (std::size_t j = 0; j < 4; ++j) {
    s[j] = 0;
    for (std::size_t d = 0; d < 8; ++d) s[j] += double(q(0, 2, d)) * k(0, j, d);
    s[j] = j <= 2 ? 2 * std::tanh(s[j] / 2) : -1e300;
    m = std::max(m, s[j]);
  }
  for (std::size_t j = 0; j < 3; ++j) l += std::exp(s[j] - m);
  for (std::size_t j = 0; j < 3; ++j) o += std::exp(s[j] - m) / l * v(0, j, 0);
  REQUIRE(out(0, 2, 0) == Approx(o).margin(1e-6));
}

TEST_CASE("semantics: combined masks -- excluding wins, else the fill") {
  testing::rng r(6);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 4, 3}), k = r.tensor<float>({2, 4, 3});
  const xt::xtensor<int, 1> lens = {0, 2};
  const auto [scores, weights] = dsl::semantics::combined_masks(q, k, lens);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 4; ++j) {
        if (j > i)
          REQUIRE(scores(b, i, j) == -finf);
        else if (int(j) >= lens(b))
          REQUIRE(scores(b, i, j) == -1e6f);
      }
  // batch 0: every key filled, later keys excluded: uniform over keys 0..i
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) REQUIRE(weights(0, i, j) == Approx(j <= i ? 1.0 / double(i + 1) : 0.0));
}

TEST_CASE("semantics: of two filling masks the outermost fill wins") {
  testing::rng r(7);
  const xt::xtensor<double, 3> q = r.tensor<double>({1, 6, 2}), k = r.tensor<double>({1, 6, 2});
  auto Q = ref(q), K = ref(k);
  const dsl::prefix_lm_mask plm{{2}, -5.0};  // hides j >= 2 with j > i, fill -5
  const xt::xtensor<int, 1> lens = {4};      // hides j >= 4, fill -1e6
  const auto inner_plm = eval(mask(mask(Q * trans(K), plm), lengths(lens)));
  const auto inner_len = eval(mask(mask(Q * trans(K), lengths(lens)), plm));
  REQUIRE(inner_plm(0, 0, 5) == -1e6);  // hidden by both: the outer (lengths) fill
  REQUIRE(inner_len(0, 0, 5) == -5.0);  // hidden by both: the outer (prefix) fill
  REQUIRE(inner_plm(0, 0, 3) == -5.0);  // hidden by the prefix mask only
  REQUIRE(inner_len(0, 5, 4) == -1e6);  // hidden by lengths only
  // the fused pass (range fills: both masks have row_span) agrees with the reference, both orders
  const xt::xtensor<double, 3> v = r.tensor<double>({1, 6, 2});
  auto V = ref(v);
  const auto a = softmax(mask(mask(Q * trans(K), plm), lengths(lens))) * V;
  const auto b = softmax(mask(mask(Q * trans(K), lengths(lens)), plm)) * V;
  REQUIRE(max_abs_diff(eval(a, {2, 4, 1}), xt::view(reference(a).output, xt::all(), 0)) < 1e-12);
  REQUIRE(max_abs_diff(eval(b, {2, 4, 1}), xt::view(reference(b).output, xt::all(), 0)) < 1e-12);
}

TEST_CASE("semantics: query head h reads kv head h / (Hq / Hkv)") {
  testing::rng r(8);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 8, 5, 4}), k = r.tensor<float>({1, 2, 7, 4}),
                              v = r.tensor<float>({1, 2, 7, 3});
  const auto out = dsl::semantics::grouped(q, k, v);
  for (std::size_t h = 0; h < 8; ++h) {
    const xt::xtensor<float, 3> qh = xt::view(q, xt::all(), h), kh = xt::view(k, xt::all(), h / 4),
                                vh = xt::view(v, xt::all(), h / 4);
    auto Q = ref(qh), K = ref(kh), V = ref(vh);
    // one head alone decodes (keys read in place), the group packs its keys: rounding differs
    REQUIRE(max_abs_diff(eval(softmax(Q * trans(K)) * V), xt::view(out, xt::all(), h)) < 1e-6);
  }
}

TEST_CASE("semantics: packed documents attend only within themselves") {
  testing::rng r(21);
  const xt::xtensor<double, 3> q = r.tensor<double>({1, 12, 4}), k = r.tensor<double>({1, 12, 4}),
                               v = r.tensor<double>({1, 12, 3});
  const auto [alone, causal_each] = dsl::semantics::packed_documents(q, k, v);
  // each document evaluated by itself, as three separate attentions
  const std::size_t cu[] = {0, 3, 8, 12};
  for (std::size_t d = 0; d < 3; ++d) {
    auto rows = [&](const auto& x) { return xt::view(x, xt::all(), xt::range(cu[d], cu[d + 1])); };
    const xt::xtensor<double, 3> qd = rows(q), kd = rows(k), vd = rows(v);
    auto Q = ref(qd), K = ref(kd), V = ref(vd);
    REQUIRE(max_abs_diff(rows(alone), eval(softmax(Q * trans(K)) * V)) < 1e-14);
    REQUIRE(max_abs_diff(rows(causal_each), eval(softmax(mask(Q * trans(K), causal())) * V)) < 1e-14);
  }
}

TEST_CASE("semantics: dropout on the normalised weights, keyed by (seed, b, h, i, j)") {
  testing::rng r(9);
  const xt::xtensor<double, 3> q = r.tensor<double>({2, 6, 4}), k = r.tensor<double>({2, 6, 4}),
                               v = r.tensor<double>({2, 6, 2});
  const auto out = dsl::semantics::with_dropout(q, k, v, 5);
  auto Q = ref(q), K = ref(k);
  const auto w = eval(softmax(mask(Q * trans(K), causal())));  // undropped weights
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 6; ++i)
      for (std::size_t d = 0; d < 2; ++d) {
        double o = 0;
        for (std::size_t j = 0; j < 6; ++j)
          if (random::keep({0.1f, 5}, std::uint32_t(b), 0, std::uint32_t(i), std::uint32_t(j)))
            o += w(b, i, j) / (1 - double(0.1f)) * v(b, j, d);
        REQUIRE(out(b, i, d) == Approx(o).margin(1e-12));
      }
}

TEST_CASE("semantics: results are bitwise the same for any thread count and block_q at a fixed block_k") {
  testing::rng r(10);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 3, 77, 16}), k = r.tensor<float>({2, 3, 200, 16}),
                              v = r.tensor<float>({2, 3, 200, 24});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) / 4.0f, causal(align::bottom_right))) * V;
  const xt::xtensor<float, 4> base = eval(e, {64, 128, 1});
  REQUIRE((eval(e, {64, 128, 2}) == base));
  REQUIRE((eval(e, {7, 128, 2}) == base));
  REQUIRE((eval(e, {200, 128, 1}) == base));
  REQUIRE(max_abs_diff(eval(e, {64, 32, 2}), base) < 1e-6);  // another block_k: another summation order
}

TEST_CASE("semantics: the log-sum-exp of a row with no visible key is -inf, its output 0") {
  testing::rng r(11);
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 4, 3}), k = r.tensor<float>({1, 2, 3}),
                              v = r.tensor<float>({1, 2, 2});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto p = eval_with_lse(softmax(mask(Q * trans(K), causal_offsets(std::vector<int>{-2}))) * V);
  REQUIRE(p.lse(0, 0) == -finf);
  REQUIRE(p.lse(0, 1) == -finf);
  REQUIRE(p.output(0, 1, 0) == 0.0f);
  REQUIRE(std::isfinite(p.lse(0, 2)));
}

TEST_CASE("semantics: a mask's finite fill replaces the score, even a -inf from a bias (as d2l's masked_softmax)") {
  const xt::xtensor<float, 3> q = xt::zeros<float>({1, 1, 2}), k = xt::zeros<float>({1, 4, 2});
  const xt::xtensor<float, 3> v = {{{1}, {2}, {3}, {4}}};
  const xt::xtensor<float, 1> b = {-finf, -finf, -finf, -finf};
  const xt::xtensor<int, 1> none = {0};
  auto Q = ref(q), K = ref(k), V = ref(v);
  REQUIRE(eval(softmax(Q * trans(K) + bias(b)) * V)(0, 0, 0) == 0.0f);                              // excluded
  REQUIRE(eval(softmax(mask(Q * trans(K) + bias(b), lengths(none))) * V)(0, 0, 0) == Approx(2.5));  // filled: uniform
  REQUIRE(eval(softmax(mask(Q * trans(K) + bias(b), lengths(none, masked_rows::zero))) * V)(0, 0, 0) == 0.0f);
}

TEST_CASE("semantics: a sink is one more key of score t[h] and value 0; sink tokens are keys kept in the window") {
  testing::rng r(12);
  const std::size_t H = 2, S = 9, D = 3;
  const xt::xtensor<double, 4> q = r.tensor<double>({1, H, S, D}), k = r.tensor<double>({1, H, S, D}),
                               v = r.tensor<double>({1, H, S, D});
  const xt::xtensor<double, 1> sink = {0.7, -0.4};
  const auto [learned, streaming] = dsl::semantics::with_sinks(q, k, v, sink);
  // the closed form: a key S appended with zero features and value, its score set to sink[h] by a bias
  const std::array<std::size_t, 4> appended_shape{1, H, S + 1, D};
  xt::xtensor<double, 4> k1 = xt::zeros<double>(appended_shape), v1 = xt::zeros<double>(appended_shape);
  xt::view(k1, xt::all(), xt::all(), xt::range(0, S)) = k;
  xt::view(v1, xt::all(), xt::all(), xt::range(0, S)) = v;
  xt::xtensor<double, 4> b = xt::zeros<double>(std::array<std::size_t, 4>{1, H, S, S + 1});
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t i = 0; i < S; ++i)
      for (std::size_t j = 0; j <= S; ++j)
        b(0, h, i, j) = j == S ? sink(h) : (j <= i && j + 3 >= i ? 0.0 : -std::numeric_limits<double>::infinity());
  const xt::xtensor<double, 4> appended = eval(softmax(ref(q) * trans(ref(k1)) + bias(b)) * ref(v1));
  REQUIRE(max_abs_diff(learned, appended) < 1e-14);
  // sink tokens: the same window with keys 0 and 1 visible wherever j <= i
  const xt::xtensor<double, 4> kept = eval(
      softmax(mask(ref(q) * trans(ref(k)),
                   predicate([](auto, auto, auto i, auto j) { return (j <= i && j + 3 >= i) || (j < 2 && j <= i); }))) *
      ref(v));
  REQUIRE(max_abs_diff(streaming, kept) < 1e-14);
}

TEST_CASE("semantics: a sum of score products is one product over the concatenated features") {
  testing::rng r(47);
  const std::size_t H = 3, S = 9, D1 = 5, D2 = 4;
  const xt::xtensor<double, 4> q1 = r.tensor<double>({1, H, S, D1}), k1 = r.tensor<double>({1, H, S, D1}),
                               q2 = r.tensor<double>({1, H, S, D2}), k2 = r.tensor<double>({1, 1, S, D2}),
                               v = r.tensor<double>({1, H, S, 6});
  const xt::xtensor<int, 1> pos = xt::arange<int>(int(S));
  const auto mla = dsl::semantics::sum_of_products(q1, k1, q2, k2, v, pos);
  // the closed form: the second term's rows rotated by the reference's rotation, concatenated to the
  // first's (k2's one head repeated for every head), then plain attention over D1 + D2 features
  const auto rotated = [&](const xt::xtensor<double, 4>& x, std::size_t heads) {
    xt::xtensor<double, 4> out = xt::zeros<double>({std::size_t(1), heads, S, D2});
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < S; ++i) {
        const auto row = detail::operand_row<double>(rope(ref(x), pos), 0, h % x.shape()[1], i);
        for (std::size_t d = 0; d < D2; ++d) out(0, h, i, d) = row[d];
      }
    return out;
  };
  const xt::xtensor<double, 4> q = xt::concatenate(xt::xtuple(q1, rotated(q2, H)), 3),
                               k = xt::concatenate(xt::xtuple(k1, rotated(k2, H)), 3);
  const xt::xtensor<double, 4> want = eval(softmax(mask(ref(q) * trans(ref(k)) / 3.0, causal())) * ref(v));
  REQUIRE(max_abs_diff(mla, want) < 1e-14);
}
