// bfloat16 and float16 operands: the API as written, 16-bit output, mixed operand types,
// decoding from a 16-bit KV cache, partial results and merge, and edge values; everything against
// the double reference evaluated on the same 16-bit inputs (so only the float accumulation differs).
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>

using namespace xattn;
using testing::max_abs_diff;

namespace {

template <class E>
xt::xtensor<E, 4> random16(testing::rng& r, std::array<std::size_t, 4> shape, double amp = 1) {
  xt::xtensor<E, 4> t = xt::xtensor<E, 4>::from_shape(shape);
  for (auto& x : t) x = E(r.uniform(-amp, amp));
  return t;
}

// Float accumulation of terms that are exact in both: the float-operand bound of the differential
// test (8 · n · 2^-24 · (1 + max|s|) · max|V|), with n = D and |s| <= D/8 · amp_q here.
double float_tolerance(double d, double max_s) { return 8 * std::max(d, 16.0) * 0x1p-24 * (1 + max_s); }

// Plus, for bfloat16 values multiplied by vdpbf16ps (not when decoding), the probabilities' rounding
// to bf16: each weight moves by at most 2^-9 of itself, so the output by 2^-9 · max|V| (= 1 here).
template <class V>
double p_rounding() {
  return takes_value_pairs_v<float, V> ? 0x1p-9 : 0;
}

}  // namespace

TEMPLATE_TEST_CASE("16-bit Q, K, V: float output by default, 16-bit on request (the issue's API)", "", bfloat16,
                   float16) {
  testing::rng r(11);
  xt::xtensor<TestType, 4> q = random16<TestType>(r, {2, 4, 37, 64}), k = random16<TestType>(r, {2, 4, 300, 64}),
                           v = random16<TestType>(r, {2, 4, 300, 64});
  auto Q = ref(q), K = ref(k), V = ref(v);
  xt::xtensor<float, 4> out = eval(softmax(Q * trans(K) / 8.0f) * V);
  auto out16 = eval<TestType>(softmax(Q * trans(K) / 8.0f) * V);
  STATIC_REQUIRE(std::is_same_v<decltype(out16), xt::xtensor<TestType, 4>>);
  const auto want = reference(softmax(Q * trans(K) / 8.0f) * V).output;
  REQUIRE(max_abs_diff(out, want) < float_tolerance(64, 8) + p_rounding<TestType>());
  for (std::size_t i = 0; i < out.size(); ++i)  // the 16-bit output is the float one, rounded once
    REQUIRE(out16.data()[i].bits() == TestType(out.data()[i]).bits());
  const xt::xtensor<float, 4> two = eval(softmax(Q * trans(K) / 8.0f) * V, {32, 64, 2});
  REQUIRE((two == eval(softmax(Q * trans(K) / 8.0f) * V, {32, 64, 1})));  // deterministic across threads
}

TEST_CASE("mixed operands: float queries over a bfloat16 or float16 KV cache, double where asked") {
  testing::rng r(12);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 8, 5, 32});
  const auto kb = random16<bfloat16>(r, {1, 2, 700, 32});
  const auto vh = random16<float16>(r, {1, 2, 700, 24});
  auto Q = ref(q);
  auto K = ref(kb);
  auto V = ref(vh);
  const xt::xtensor<int, 1> lens = {650};
  const auto e = softmax(mask(Q * trans(K) / std::sqrt(32.0f), lengths(lens))) * V;  // GQA: 4 query heads per KV head
  const auto out = eval(e, {4, 128, 2});
  STATIC_REQUIRE(std::is_same_v<decltype(out), const xt::xtensor<float, 4>>);
  REQUIRE(max_abs_diff(out, reference(e).output) < float_tolerance(32, 6));
  const xt::xtensor<double, 4> qd = q;  // a double operand makes the whole pass double
  auto Qd = ref(qd);
  const auto ed = softmax(Qd * trans(K)) * V;
  const auto outd = eval(ed);
  STATIC_REQUIRE(std::is_same_v<decltype(outd), const xt::xtensor<double, 4>>);
  REQUIRE(max_abs_diff(outd, reference(ed).output) < 1e-12);
}

TEMPLATE_TEST_CASE("decoding reads a 16-bit KV cache in place, split into chunks", "", bfloat16, float16) {
  testing::rng r(13);
  const auto k = random16<TestType>(r, {2, 2, 5000, 64}), v = random16<TestType>(r, {2, 2, 5000, 64});
  auto K = ref(k), V = ref(v);
  const xt::xtensor<int, 1> lens = {4097, 1200};
  // a group of 4 query heads by 1 query (bf16 keys widened) and by 3 (12 rows: bf16 on vdpbf16ps)
  for (std::size_t sq : {1, 3}) {
    const auto q = random16<TestType>(r, {2, 8, sq, 64});
    auto Q = ref(q);
    const auto e = softmax(mask(Q * trans(K) / 8.0f, lengths(lens))) * V;
    const auto plan = explain(e, {0, 0, 2}).schedule.forward;
    REQUIRE(plan.keys == key_reads::in_place);
    REQUIRE(plan.block_q == 4 * sq);
    REQUIRE(plan.key_chunks > 1);
    const xt::xtensor<float, 4> one = eval(e, {0, 0, 1}), two = eval(e, {0, 0, 2});
    REQUIRE((one == two));
    REQUIRE(max_abs_diff(one, reference(e).output) < float_tolerance(64, 8));
  }
}

TEMPLATE_TEST_CASE("16-bit operands through every path: policies, masks, modifiers, layouts, lse and merge", "",
                   bfloat16, float16) {
  testing::rng r(14);
  const auto q = random16<TestType>(r, {1, 2, 33, 16}), k = random16<TestType>(r, {1, 2, 90, 16}),
             v = random16<TestType>(r, {1, 2, 90, 8});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const double tol = float_tolerance(40, 4) + p_rounding<TestType>();  // n = max(D, hidden size) = 40 for additive
  auto check = [&](const auto& e) { REQUIRE(max_abs_diff(eval(e, {8, 32, 2}), reference(e).output) < tol); };
  check(softmax(score(additive{r.tensor<float>({40, 16}), r.tensor<float>({40, 16}), r.tensor<float>({40})}, Q, K)) *
        V);
  check(softmax(score(bilinear{r.tensor<double>({16, 16}, -0.3, 0.3)}, Q, K)) * V);
  check(softmax(score(gaussian{3.0}, Q, K)) * V);
  check(softmax(score(cosine{0.5}, Q, K)) * V);
  check(softmax(mask(alibi(softcap(Q * trans(K), 2.0), alibi_op::standard_slopes(2)), causal())) * V);
  check(softmax(mask(Q * trans(K), window(5, 3))) * V);
  // packed heads over (B, S, H*D) 16-bit rows
  const xt::xtensor<TestType, 3> qp = xt::reshape_view(xt::transpose(q, {0, 2, 1, 3}), {1, 33, 32});
  auto e = softmax(mask(heads(qp, 2) * trans(heads(qp, 2)), causal())) * heads(qp, 2);
  const xt::xtensor<float, 3> packed = eval(e, {8, 32, 2});  // (B, S, H*Dv)
  REQUIRE(max_abs_diff(xt::transpose(xt::reshape_view(packed, {1, 33, 2, 16}), {0, 2, 1, 3}), reference(e).output) <
          tol);
  // two halves of the keys, merged by log-sum-exp, equal the whole
  auto K1 = ref(xt::xtensor<TestType, 4>(xt::view(k, xt::all(), xt::all(), xt::range(0, 45))));
  auto K2 = ref(xt::xtensor<TestType, 4>(xt::view(k, xt::all(), xt::all(), xt::range(45, 90))));
  auto V1 = ref(xt::xtensor<TestType, 4>(xt::view(v, xt::all(), xt::all(), xt::range(0, 45))));
  auto V2 = ref(xt::xtensor<TestType, 4>(xt::view(v, xt::all(), xt::all(), xt::range(45, 90))));
  const auto whole = eval_with_lse(softmax(Q * trans(K)) * V);
  const auto merged = merge(eval_with_lse(softmax(Q * trans(K1)) * V1), eval_with_lse(softmax(Q * trans(K2)) * V2));
  // each rounds its probabilities relative to its own running maxima
  REQUIRE(max_abs_diff(merged.output, whole.output) < 1e-6 + 2 * p_rounding<TestType>());
  REQUIRE(max_abs_diff(merged.lse, whole.lse) < 1e-5);
}

TEMPLATE_TEST_CASE("16-bit edge values behave as the same values in float", "", bfloat16, float16) {
  testing::rng r(15);
  for (std::size_t sq : {6, 40}) {  // decoding (values read in place), and tiles (vdpbf16ps for bf16)
    auto q = random16<TestType>(r, {1, 1, sq, 8}), k = random16<TestType>(r, {1, 1, 20, 8}),
         v = random16<TestType>(r, {1, 1, 20, 4});
    const float inf = std::numeric_limits<float>::infinity();
    v(0, 0, 3, 1) = TestType(std::numeric_limits<float>::quiet_NaN());  // NaN in V: every row that sees key 3
    v(0, 0, 19, 0) = TestType(inf);       // seen by the last row only: weight 0 must keep it from the others
    k(0, 0, 7, 0) = TestType(inf);        // an infinite key feature
    k(0, 0, 9, 2) = TestType(1e30f);      // beyond float16's range: +inf there, finite in bfloat16
    q(0, 0, 2, 5) = TestType(0x1p-130f);  // subnormal in bfloat16, zero in float16
    auto Q = ref(q), K = ref(k), V = ref(v);
    const auto e = softmax(mask(Q * trans(K), causal(align::bottom_right))) * V;
    const xt::xtensor<float, 4> got = eval(e);
    const auto want = reference(e).output;
    std::size_t nans = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double g = got.data()[i], w = want.data()[i];
      INFO("Sq " << sq << ", element " << i << ": " << g << " vs " << w);
      REQUIRE(std::isnan(g) == std::isnan(w));
      if (!std::isnan(w)) REQUIRE((std::isinf(w) ? g == w : std::abs(g - w) < 1e-5 + p_rounding<TestType>()));
      nans += std::isnan(w);
    }
    REQUIRE(nans > 0);  // the edge values did reach the output
  }
}

// With AVX512-BF16, bfloat16 Q and K take the backward's products on vdpbf16ps (test_bf16_backward);
// float16 values and the widened path are the float computation on the same values.
TEST_CASE(
    "grad of 16-bit operands: float gradients, bitwise those of float operands with the same values and forward") {
  testing::rng r(16);
  const auto q = random16<bfloat16>(r, {2, 3, 37, 16}), k = random16<bfloat16>(r, {2, 3, 50, 16});
  const auto v = random16<float16>(r, {2, 3, 50, 8});
  const xt::xtensor<float, 4> qf = xt::cast<float>(q), kf = xt::cast<float>(k), vf = xt::cast<float>(v);
  const xt::xtensor<float, 4> d_out = r.tensor<float>({2, 3, 37, 8});
  auto Q = ref(q), K = ref(k);
  auto V = ref(v);
  auto Qf = ref(qf), Kf = ref(kf), Vf = ref(vf);
  const auto e = softmax(mask(Q * trans(K) / 4.0f, causal())) * V;
  const auto ef = softmax(mask(Qf * trans(Kf) / 4.0f, causal())) * Vf;
  const auto f = eval_with_lse(e);  // the bf16 forward may round P (vdpbf16ps); the backward is fp32's
  const auto g = grad(e, f, d_out), gf = grad(ef, f, d_out);
  STATIC_REQUIRE(std::is_same_v<std::decay_t<decltype(g.dq)>, xt::xtensor<float, 4>>);
  if constexpr (!kernel::has_dpbf16) {
    REQUIRE((g.dq == gf.dq));
    REQUIRE((g.dk == gf.dk));
    REQUIRE((g.dv == gf.dv));
  }
  REQUIRE(max_abs_diff(g.dq, reference_grad(make_plan(e), xt::xtensor<double, 4>(d_out)).dq) <
          (kernel::has_dpbf16 ? 2e-3 : 1e-5));
}
