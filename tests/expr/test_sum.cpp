// Sums of score products, Q1 * trans(K1) + Q2 * trans(K2) (dot_sum): the fused forward and backward
// against the double reference, with a second term whose one key head every query head shares
// (multi-head latent attention), rope on the second term, scales inside the terms, GQA, masks,
// packed heads, decoding with the values the first term's keys, and bad input.
#include "support/against_reference.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <cmath>

using namespace xattn;
using testing::check_against_reference;
using testing::max_abs_diff;

TEST_CASE("sums: two products, the second with one shared key head and rope, forward and backward") {
  testing::rng r(31);
  const std::size_t B = 2, Hq = 4, Hkv = 4, Sq = 37, Skv = 41, D1 = 12, D2 = 8, Dv = 10;
  const xt::xtensor<double, 4> q1 = r.tensor<double>({B, Hq, Sq, D1}), k1 = r.tensor<double>({B, Hkv, Skv, D1}),
                               q2 = r.tensor<double>({B, Hq, Sq, D2}), k2 = r.tensor<double>({B, 1, Skv, D2}),
                               v = r.tensor<double>({B, Hkv, Skv, Dv}), d_out = r.tensor<double>({B, Hq, Sq, Dv});
  xt::xtensor<std::int64_t, 1> qpos = xt::arange<std::int64_t>(4, 4 + std::int64_t(Sq)),
                               kpos = xt::arange<std::int64_t>(0, std::int64_t(Skv));
  const schedule small{12, 16, 2};
  const auto Q1 = ref(q1), K1 = ref(k1), Q2 = ref(q2), K2 = ref(k2), V = ref(v);

  SECTION("double: plain, rotated second term, scales inside the terms, masks") {
    const auto s = Q1 * trans(K1) + rope(Q2, qpos) * trans(rope(K2, kpos));
    const auto [g, rg] = check_against_reference(softmax(mask(s / std::sqrt(20.0), causal(align::bottom_right))) * V,
                                                 d_out, 1e-12, small);
    CHECK(max_abs_diff(g.dq2, rg.dq2) < 1e-12);
    CHECK(max_abs_diff(g.dk2, rg.dk2) < 1e-12);
    REQUIRE(g.dk2.shape()[1] == 1);
    const auto s2 = Q1 * trans(K1) / 3.0 + 0.5 * (Q2 * trans(K2));
    const auto [h, rh] = check_against_reference(softmax(mask(s2, window(5, 2))) * V, d_out, 1e-12, small);
    CHECK(max_abs_diff(h.dq2, rh.dq2) < 1e-12);
    CHECK(max_abs_diff(h.dk2, rh.dk2) < 1e-12);
  }
  SECTION("the second term counts: without it the result differs") {
    const xt::xtensor<double, 4> one = eval(softmax(Q1 * trans(K1)) * V),
                                 two = eval(softmax(Q1 * trans(K1) + Q2 * trans(K2)) * V);
    CHECK(max_abs_diff(one, two) > 1e-3);
    CHECK(max_abs_diff(two, reference(softmax(Q1 * trans(K1) + Q2 * trans(K2)) * V).output) < 1e-12);
  }
  SECTION("float, grouped first term") {
    const xt::xtensor<float, 4> a = xt::cast<float>(q1), c = xt::cast<float>(q2), kk2 = xt::cast<float>(k2),
                                df = xt::cast<float>(d_out);
    const xt::xtensor<float, 4> kk1 = r.tensor<float>({B, 2, Skv, D1}), vv = r.tensor<float>({B, 2, Skv, Dv});
    const auto e =
        softmax(mask((ref(a) * trans(ref(kk1)) + rope(ref(c), qpos) * trans(rope(ref(kk2), kpos))) * 0.3f, causal())) *
        ref(vv);
    const auto [g, rg] = check_against_reference(e, df, 3e-5, small);
    CHECK(max_abs_diff(g.dq2, rg.dq2) < 3e-5);
    CHECK(max_abs_diff(g.dk2, rg.dk2) < 3e-5);
    CHECK(explain(e, small).path == "dot_sum");
  }
}

TEST_CASE("sums: absorbed MLA decoding, the latent cache both the first key term and the values") {
  testing::rng r(32);
  const std::size_t Hq = 16, S = 300, L = 32, R = 8;
  const xt::xtensor<float, 4> qc = r.tensor<float>({1, Hq, 1, L}), qr = r.tensor<float>({1, Hq, 1, R}),
                              c = r.tensor<float>({1, 1, S, L}), kr = r.tensor<float>({1, 1, S, R});
  const float s = 1 / std::sqrt(float(L + R));
  const auto C = ref(c);
  const auto e = softmax(ref(qc) * trans(C) * s + ref(qr) * trans(ref(kr)) * s) * C;
  CHECK(max_abs_diff(eval(e), reference(e).output) < 2e-6);
  CHECK(max_abs_diff(eval(e, {60, 64, 2}), reference(e).output) < 2e-6);
  const xt::xtensor<bfloat16, 4> cb = xt::cast<bfloat16>(c), krb = xt::cast<bfloat16>(kr);
  const auto eb = softmax(ref(qc) * trans(ref(cb)) * s + ref(qr) * trans(ref(krb)) * s) * ref(cb);
  CHECK(max_abs_diff(eval(eb), reference(eb).output) < 2e-6);
  // every operand bfloat16: the rows stay bfloat16 for vdpbf16ps where the CPU has it, the scales
  // on the fp32 sums (the second term's s2 / s1 = 2 exact), so only rounding-free products remain
  const xt::xtensor<bfloat16, 4> qcb = xt::cast<bfloat16>(qc), qrb = xt::cast<bfloat16>(qr);
  const auto all16 = softmax(ref(qcb) * trans(ref(cb)) * s + ref(qrb) * trans(ref(krb)) * (2 * s)) * ref(cb);
  CHECK(explain(all16).path == (kernel::has_dpbf16 ? "dot_sum_bf16" : "dot_sum"));
  CHECK(max_abs_diff(eval(all16), reference(all16).output) < 2e-6);
  CHECK(max_abs_diff(eval(all16, {60, 64, 2}), reference(all16).output) < 2e-6);
  // rope on a bfloat16 term: rotated in float, rounded to bfloat16 (one rounding per feature)
  xt::xtensor<int, 1> qpos = {S - 1}, kpos = xt::arange<int>(int(S));
  const auto rot16 =
      softmax(ref(qcb) * trans(ref(cb)) * s + rope(ref(qrb), qpos) * trans(rope(ref(krb), kpos)) * s) * ref(cb);
  CHECK(max_abs_diff(eval(rot16), reference(rot16).output) < (kernel::has_dpbf16 ? 2e-2 : 2e-6));
}

TEST_CASE("sums: terms that do not fit together are named with their shapes") {
  testing::rng r(33);
  const xt::xtensor<float, 4> q1 = r.tensor<float>({2, 4, 5, 8}), k1 = r.tensor<float>({2, 4, 6, 8}),
                              v = r.tensor<float>({2, 4, 6, 8}), q2 = r.tensor<float>({2, 4, 5, 4}),
                              k2 = r.tensor<float>({2, 1, 6, 4}), k2_len = r.tensor<float>({2, 1, 7, 4}),
                              k2_heads = r.tensor<float>({2, 3, 6, 4}), k2_dim = r.tensor<float>({2, 1, 6, 5}),
                              q2_batch = r.tensor<float>({1, 4, 5, 4}), q2_rows = r.tensor<float>({2, 4, 4, 4});
  const auto bad = [&](const auto& qq, const auto& kk) {
    return softmax(ref(q1) * trans(ref(k1)) + ref(qq) * trans(ref(kk))) * ref(v);
  };
  CHECK_NOTHROW(eval(bad(q2, k2)));
  CHECK_THROWS_WITH(eval(bad(q2, k2_len)),
                    Catch::Contains("K2 has 7 keys but K1 has 6") && Catch::Contains("K2 (2,1,7,4)"));
  CHECK_THROWS_WITH(eval(bad(q2, k2_heads)), Catch::Contains("K2's 3 heads must divide K1's 4"));
  CHECK_THROWS_WITH(eval(bad(q2, k2_dim)), Catch::Contains("Q2 has 4 features but K2 has 5"));
  CHECK_THROWS_WITH(eval(bad(q2_batch, k2)), Catch::Contains("different batch sizes"));
  CHECK_THROWS_WITH(eval(bad(q2_rows, k2)), Catch::Contains("Q2 has 4 queries but Q1 has 5"));
  xt::xtensor<int, 1> wrong = xt::arange<int>(3);
  CHECK_THROWS_WITH(eval(softmax(ref(q1) * trans(ref(k1)) + rope(ref(q2), wrong) * trans(ref(k2))) * ref(v)),
                    Catch::Contains("rope(Q2, positions)"));
}
