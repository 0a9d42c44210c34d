// Runs every example docs/guide.md quotes from dsl/guide_examples.hpp and checks it against a
// closed form written out here, independently of the library.
#include "guide_examples.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace xattn;
using testing::max_abs_diff;

namespace {

constexpr double ninf = -std::numeric_limits<double>::infinity();

/// softmax over s (entries -inf excluded; an all -inf row gives zeros), then the weighted sum of rows of v.
std::vector<double> attend(const std::vector<double>& s, const std::vector<std::vector<double>>& v) {
  double m = ninf;
  for (double x : s) m = std::max(m, x);
  std::vector<double> out(v.empty() ? 0 : v[0].size(), 0.0);
  if (m == ninf) return out;
  double l = 0;
  for (double x : s) l += std::exp(x - m);
  for (std::size_t j = 0; j < s.size(); ++j)
    for (std::size_t d = 0; d < out.size(); ++d) out[d] += std::exp(s[j] - m) / l * v[j][d];
  return out;
}

/// The terminals of the sixteen_bit snippet, declared as it declares them, in a function that is
/// not a template: float q and bfloat16 caches are three different types, and one declaration
/// `auto Q = ref(q), K = ref(k_cache), ...` does not compile here ("inconsistent deduction for
/// 'auto'"; GCC does not check it inside a template, where the snippet lives).
xt::xtensor<float, 4> sixteen_bit_terminals(const xt::xtensor<float, 4>& q, const xt::xtensor<bfloat16, 4>& k_cache,
                                            const xt::xtensor<bfloat16, 4>& v_cache) {
  auto Q = ref(q);                          // float queries
  auto K = ref(k_cache), V = ref(v_cache);  // read in place, 2 bytes per element
  return eval(softmax(Q * trans(K) / 8.0f) * V);
}

}  // namespace

TEST_CASE("guide: three terminal layouts, GQA 8 query heads over 2 kv heads") {
  testing::rng r(1);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 8, 16, 4});
  const xt::xtensor<float, 3> k = r.tensor<float>({2, 16, 8});
  const auto vv = r.tensor<float>({2 * 16 * 2 * 4});
  const std::vector<float> v(vv.begin(), vv.end());
  const auto out = dsl::guide::three_layouts(q, k, v);
  REQUIRE(out.shape() == std::array<std::size_t, 4>{2, 8, 16, 4});
  double err = 0;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 8; ++h)
      for (std::size_t i = 0; i < 16; ++i) {
        const std::size_t hk = h / 4;
        std::vector<double> s(16);
        std::vector<std::vector<double>> vals(16, std::vector<double>(4));
        for (std::size_t j = 0; j < 16; ++j) {
          s[j] = 0;
          for (std::size_t d = 0; d < 4; ++d) s[j] += double(q(b, h, i, d)) * k(b, j, hk * 4 + d) / 2;
          for (std::size_t d = 0; d < 4; ++d) vals[j][d] = v[b * 128 + j * 8 + hk * 4 + d];  // (B, S, H, D) memory
        }
        const auto want = attend(s, vals);
        for (std::size_t d = 0; d < 4; ++d) err = std::max(err, std::abs(want[d] - out(b, h, i, d)));
      }
  REQUIRE(err < 1e-6);
}

TEST_CASE("guide: the words of one expression -- softcap, bias, lengths, causal, dropout") {
  testing::rng r(2);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 9, 16}, -3, 3), k = r.tensor<float>({2, 9, 16}, -3, 3),
                              v = r.tensor<float>({2, 9, 3});
  const xt::xtensor<int, 1> lens = {9, 4};
  const xt::xtensor<float, 2> rel = r.tensor<float>({9, 9});
  const std::uint64_t seed = 77;
  const xt::xtensor<float, 3> out = dsl::guide::many_words(q, k, v, lens, rel, seed);
  double err = 0;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 9; ++i) {
      std::vector<double> s(9);
      std::vector<std::vector<double>> vals(9, std::vector<double>(3));
      for (std::size_t j = 0; j < 9; ++j) {
        double x = 0;
        for (std::size_t d = 0; d < 16; ++d) x += double(q(b, i, d)) * k(b, j, d);
        x = 30 * std::tanh(x / std::sqrt(16.0) / 30) + rel(i, j);
        s[j] = j > i ? ninf : int(j) >= lens(b) ? -1e6 : x;  // causal excludes; lengths fills -1e6
      }
      // dropout after normalisation: w -> w / 0.9 when kept
      double m = ninf, l = 0;
      for (double x : s) m = std::max(m, x);
      for (double x : s) l += std::exp(x - m);
      for (std::size_t d = 0; d < 3; ++d) {
        double o = 0;
        for (std::size_t j = 0; j < 9; ++j)
          if (random::keep({0.1f, seed}, std::uint32_t(b), 0, std::uint32_t(i), std::uint32_t(j)))
            o += std::exp(s[j] - m) / l / (1 - double(0.1f)) * v(b, j, d);
        err = std::max(err, std::abs(o - out(b, i, d)));
      }
    }
  REQUIRE(err < 2e-5);
}

TEST_CASE("guide: the rest of the words -- scaled_dot, alibi, modify, window, bool_mask, predicate") {
  testing::rng r(3);
  const std::size_t H = 4, S = 13, D = 8;
  const xt::xtensor<double, 4> q = r.tensor<double>({1, H, S, D}), k = r.tensor<double>({1, H, S, D}),
                               v = r.tensor<double>({1, H, S, 2});
  xt::xtensor<bool, 2> keep = xt::xtensor<bool, 2>::from_shape({S, S});
  for (auto& x : keep) x = r.coin(0.8);
  const auto out = dsl::guide::more_words(q, k, v, keep);
  const auto slopes = alibi_op::standard_slopes(H);
  double err = 0;
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t i = 0; i < S; ++i) {
      std::vector<double> s(S);
      std::vector<std::vector<double>> vals(S, std::vector<double>(2));
      for (std::size_t j = 0; j < S; ++j) {
        double x = 0;
        for (std::size_t d = 0; d < D; ++d) x += q(0, h, i, d) * k(0, h, j, d);
        x = x / std::sqrt(double(D)) - slopes[h] * std::abs(double(i) - double(j)) - (i == j ? 1 : 0);
        const bool vis = j <= i && i - j <= 8 && keep(i, j) && (j == 0 || i / 4 == j / 4);
        s[j] = vis ? x : ninf;
        for (std::size_t d = 0; d < 2; ++d) vals[j][d] = v(0, h, j, d);
      }
      const auto want = attend(s, vals);
      for (std::size_t d = 0; d < 2; ++d) err = std::max(err, std::abs(want[d] - out(0, h, i, d)));
    }
  REQUIRE(err < 1e-12);
}

TEST_CASE("guide: eval forms agree with reference()") {
  testing::rng r(4);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 3, 10, 8}), k = r.tensor<float>({2, 3, 12, 8}),
                              v = r.tensor<float>({2, 3, 12, 5});
  const auto [out, w, s, ref_r] = dsl::guide::eval_forms(q, k, v);
  REQUIRE(max_abs_diff(out, ref_r.output) < 1e-6);
  REQUIRE(max_abs_diff(w, ref_r.weights) < 1e-6);  // the float kernel's weights: exp2, 1 / l and the score sums
  REQUIRE(w.shape() == std::array<std::size_t, 4>{2, 3, 10, 12});
  REQUIRE(s(1, 2, 3, 4) == -std::numeric_limits<float>::infinity());  // key 4 > query 3: excluded
  REQUIRE(s(1, 2, 3, 3) == Approx(ref_r.scores(1, 2, 3, 3)));
  REQUIRE(std::isinf(ref_r.lse(0, 0, 0)) == false);
}

TEST_CASE("guide: merging two key shards equals attention over all keys") {
  testing::rng r(5);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 7, 16}), k = r.tensor<float>({2, 50, 16}),
                              v = r.tensor<float>({2, 50, 3});
  const xt::xtensor<float, 3> k1 = xt::view(k, xt::all(), xt::range(0, 20)),
                              k2 = xt::view(k, xt::all(), xt::range(20, 50));
  const xt::xtensor<float, 3> v1 = xt::view(v, xt::all(), xt::range(0, 20)),
                              v2 = xt::view(v, xt::all(), xt::range(20, 50));
  const auto both = dsl::guide::sharded(q, k1, v1, k2, v2);
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto all = eval_with_lse(softmax(Q * trans(K) / 8.0f) * V);
  REQUIRE(both.lse.shape() == std::array<std::size_t, 2>{2, 7});
  REQUIRE(max_abs_diff(both.output, all.output) < 2e-6);
  REQUIRE(max_abs_diff(both.lse, all.lse) < 2e-6);
}

TEST_CASE("guide: eval_into writes the same result into caller storage, and checks its shape") {
  testing::rng r(8);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 5, 16}), k = r.tensor<float>({2, 20, 16}),
                              v = r.tensor<float>({2, 20, 3});
  xt::xtensor<float, 3> out = xt::zeros<float>({2, 5, 3});
  dsl::guide::into_buffer(q, k, v, out);
  auto Q = ref(q), K = ref(k), V = ref(v);
  REQUIRE((out == eval(softmax(Q * trans(K) / 8.0f) * V)));
  xt::xtensor<float, 3> wrong = xt::zeros<float>({2, 3, 5});
  REQUIRE_THROWS_WITH(dsl::guide::into_buffer(q, k, v, wrong),
                      Catch::Contains("eval_into(e, out): out has shape (2,3,5)"));
}

TEST_CASE("guide: mixed operand types accumulate in double; eval<float> returns float") {
  testing::rng r(11);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 5, 8});
  const xt::xtensor<double, 3> kv = r.tensor<double>({2, 9, 8});
  const auto [out, out32] = dsl::guide::mixed_types(q, kv);
  auto Q = ref(q);
  auto K = ref(kv);
  const auto want = reference(softmax(Q * trans(K) / 8.0f) * K).output;
  REQUIRE(max_abs_diff(out, xt::view(want, xt::all(), 0)) < 1e-14);
  REQUIRE(max_abs_diff(out32, xt::view(want, xt::all(), 0)) < 1e-7);
}

TEST_CASE("guide: float queries over a bfloat16 KV cache; a bfloat16 result on request") {
  testing::rng r(13);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 4, 3, 64}), k = r.tensor<float>({1, 4, 50, 64}),
                              v = r.tensor<float>({1, 4, 50, 64});
  const xt::xtensor<bfloat16, 4> kc = xt::cast<bfloat16>(k), vc = xt::cast<bfloat16>(v);
  const auto [out, out16, first] = dsl::guide::sixteen_bit(q, kc, vc);
  auto Q = ref(q);
  auto K = ref(kc), V = ref(vc);
  REQUIRE(max_abs_diff(out, reference(softmax(Q * trans(K) / 8.0f) * V).output) < 1e-6);
  REQUIRE(first == float(bfloat16(out(0, 0, 0, 0))));
  REQUIRE(out16(0, 1, 2, 3).bits() == bfloat16(out(0, 1, 2, 3)).bits());
}

TEST_CASE("guide: the 16-bit snippet's terminals compile outside a template and match float within bf16 rounding") {
  testing::rng r(17);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 4, 3, 64}), k = r.tensor<float>({1, 4, 50, 64}),
                              v = r.tensor<float>({1, 4, 50, 64});
  const xt::xtensor<bfloat16, 4> kc = xt::cast<bfloat16>(k), vc = xt::cast<bfloat16>(v);
  const xt::xtensor<float, 4> out = sixteen_bit_terminals(q, kc, vc);
  auto Q = ref(q), K = ref(k), V = ref(v);  // all float: one declaration is fine
  const xt::xtensor<float, 4> want = eval(softmax(Q * trans(K) / 8.0f) * V);
  // The caches' rounding (2^-9 relative) moves each output by at most a few 2^-9 here (|V| <= 1,
  // scores below 2 in magnitude; docs/numerics.md): well inside PyTorch's bf16 tolerance of 5e-2.
  REQUIRE(max_abs_diff(out, want) < 1e-2);
  REQUIRE(max_abs_diff(out, want) > 0);  // the caches were rounded: not the float computation itself
}

TEST_CASE("guide: eval_into raw memory through strides (packed heads)") {
  testing::rng r(12);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 4, 16, 8}), k = r.tensor<float>({2, 4, 16, 8}),
                              v = r.tensor<float>({2, 4, 16, 8});
  std::vector<float> out(2 * 16 * 4 * 8);
  dsl::guide::into_raw(q, k, v, out.data());
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<float, 4> want = eval(softmax(Q * trans(K)) * V);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 4; ++h)
      for (std::size_t i = 0; i < 16; ++i)
        for (std::size_t d = 0; d < 8; ++d) REQUIRE(out[((b * 16 + i) * 4 + h) * 8 + d] == want(b, h, i, d));
}

TEST_CASE("guide: explain names the path and the threads asked for") {
  testing::rng r(13);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 64, 16});
  const std::string text = dsl::guide::explained(q, q, q);
  REQUIRE_THAT(text, Catch::Contains("score path  dot_identity") && Catch::Contains("threads 2 (as requested"));
}

TEST_CASE("guide: an explicit schedule changes rounding only") {
  testing::rng r(6);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 100, 16}), k = r.tensor<float>({2, 300, 16}),
                              v = r.tensor<float>({2, 300, 8});
  const auto out = dsl::guide::scheduled(q, k, v);
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) / 8.0f, causal())) * V;
  REQUIRE(max_abs_diff(out, eval(e)) < 1e-6);
  REQUIRE(max_abs_diff(out, xt::view(reference(e).output, xt::all(), 0)) < 1e-6);
}

TEST_CASE("guide: a moved-in mask is owned by the expression; the dangling version compiles") {
  testing::rng r(7);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 5, 4}), k = r.tensor<float>({2, 9, 4}),
                              v = r.tensor<float>({2, 9, 3});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = dsl::guide::padded_attention(Q, K, V, 2, 9, 6);  // the function's local tensor is gone here
  const xt::xtensor<int, 1> lens = {6, 6};
  REQUIRE(max_abs_diff(eval(e), eval(softmax(mask(Q * trans(K), lengths(lens, masked_rows::zero))) * V)) < 1e-7);
  // never evaluated: it would read freed memory. Naming its type instantiates (compiles) its body.
  using dangling = decltype(dsl::guide::padded_attention_dangling(Q, K, V, 2, 9, 6));
  STATIC_REQUIRE(std::is_same_v<dangling, std::decay_t<decltype(e)>>);
}
