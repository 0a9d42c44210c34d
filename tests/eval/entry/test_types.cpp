// Operand and accumulator types apart: Q, K and V may hold different element types (the kernel
// accumulates in double if any is double, else float), the output type is eval<T>'s choice, and
// eval_into writes into raw memory through any strides that keep elements apart.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <vector>

using namespace xattn;
using testing::max_abs_diff;

TEST_CASE("mixed operand types accumulate in the wider type and match the reference") {
  testing::rng r(1);
  const xt::xtensor<float, 4> qf = r.tensor<float>({2, 4, 13, 8}), kf = r.tensor<float>({2, 2, 40, 8}),
                              vf = r.tensor<float>({2, 2, 40, 5});
  const xt::xtensor<double, 4> kd = kf, vd = vf;  // the same values, held as double
  auto Q = ref(qf), Kf = ref(kf), Vf = ref(vf);
  auto Kd = ref(kd), Vd = ref(vd);
  const xt::xtensor<int, 1> lens = {40, 7};
  const auto mixed = softmax(mask(Q * trans(Kd) / 3.0, lengths(lens))) * Vf;  // float Q, double K, float V
  const auto out = eval(mixed, {4, 16, 2});
  STATIC_REQUIRE(std::is_same_v<decltype(out), const xt::xtensor<double, 4>>);  // accumulated and returned in double
  REQUIRE(max_abs_diff(out, reference(mixed).output) < 1e-12);
  // a float output on request, from the same double accumulation
  const auto out32 = eval<float>(mixed, {4, 16, 2});
  STATIC_REQUIRE(std::is_same_v<decltype(out32), const xt::xtensor<float, 4>>);
  REQUIRE(max_abs_diff(out32, out) < 1e-7);
  // V double with float Q and K: also double; and every path converts its operands
  const auto e2 =
      softmax(mask(score(additive{r.tensor<double>({6, 8}), r.tensor<double>({6, 8}), r.tensor<double>({6})}, Q, Kf),
                   causal())) *
      Vd;
  REQUIRE(max_abs_diff(eval(e2, {4, 16, 1}), reference(e2).output) < 1e-12);
  const auto e3 = softmax(score(cosine{0.3}, Q, Kd)) * Vf;  // dot_features, decoding-sized? no: 13 rows
  REQUIRE(max_abs_diff(eval(e3), reference(e3).output) < 1e-12);
  // float everything, double output: float accumulation, converted at the end
  const auto e4 = softmax(Q * trans(Kf)) * Vf;
  REQUIRE(max_abs_diff(eval<double>(e4), eval(e4)) == 0);
}

TEST_CASE("mixed types when decoding: double keys read in place by float queries") {
  testing::rng r(2);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 4, 1, 32});
  const xt::xtensor<double, 4> k = r.tensor<double>({1, 4, 3000, 32}), v = r.tensor<double>({1, 4, 3000, 16});
  auto Q = ref(q);
  auto K = ref(k), V = ref(v);
  const auto e = softmax(Q * trans(K) / 6.0) * V;
  const auto x = explain(e);
  REQUIRE(x.schedule.forward.keys == key_reads::in_place);
  REQUIRE(x.schedule.forward.key_chunks > 1);
  REQUIRE(max_abs_diff(eval(e), reference(e).output) < 1e-12);
}

TEST_CASE("eval_into a raw buffer: any unique strides, packed heads included") {
  testing::rng r(3);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 3, 7, 4}), k = r.tensor<float>({2, 3, 9, 4}),
                              v = r.tensor<float>({2, 3, 9, 5});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(Q * trans(K)) * V;
  const xt::xtensor<float, 4> want = eval(e);
  // (B, Sq, H, Dv) memory, as packed heads: strides {Sq*H*Dv, Dv, H*Dv, 1}
  std::vector<double> packed(2 * 7 * 3 * 5, -1.0);
  eval_into(e, packed.data(), {2, 3, 7, 5}, {7 * 3 * 5, 5, 3 * 5, 1});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 3; ++h)
      for (std::size_t i = 0; i < 7; ++i)
        for (std::size_t d = 0; d < 5; ++d) REQUIRE(packed[((b * 7 + i) * 3 + h) * 5 + d] == double(want(b, h, i, d)));
  // a strided column of a wider buffer: the padding is left alone
  std::vector<float> wide(2 * 3 * 7 * 8, 42.0f);
  eval_into(e, wide.data(), {2, 3, 7, 5}, {3 * 7 * 8, 7 * 8, 8, 1});
  REQUIRE(wide[5] == 42.0f);
  REQUIRE(wide[3 * 7 * 8 + 8 + 2] == want(1, 0, 1, 2));
}

TEST_CASE("eval_into a raw buffer: wrong shapes, overlapping strides and aliasing are refused") {
  testing::rng r(4);
  xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 3, 4}), v = r.tensor<float>({1, 2, 3, 4});
  auto Q = ref(q), V = ref(v);
  const auto e = softmax(Q * trans(Q)) * V;
  std::vector<float> out(24);
  REQUIRE_THROWS_WITH(eval_into(e, out.data(), {1, 2, 3, 5}, {24, 12, 4, 1}),
                      Catch::Contains("shape (1,2,3,5) but the result is (B, Hq, Sq, Dv) (1,2,3,4)"));
  REQUIRE_THROWS_WITH(eval_into(e, out.data(), {1, 2, 3, 4}, {24, 4, 4, 1}),
                      Catch::Contains("strides (24,4,4,1) give two elements of shape (1,2,3,4) the same address"));
  REQUIRE_THROWS_WITH(eval_into(e, v.data(), {1, 2, 3, 4}, {24, 12, 4, 1}), Catch::Contains("overlaps an operand"));
  REQUIRE_NOTHROW(eval_into(e, out.data(), {1, 2, 3, 4}, {24, 12, 4, 1}));
}
