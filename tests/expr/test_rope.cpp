// rope(Q, positions[, options]) in Q * trans(K): the fused forward and backward (dot_rotary) against
// the double reference, which rotates each row with the same float angles and takes the gradients
// back through the transpose (checked against PyTorch autograd in test_goldens.cpp); styles,
// partial rotary, frequency tables, per-batch positions, offsets, GQA, packed heads, decoding, and
// bad positions and options.
#include "support/against_reference.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>

using namespace xattn;
using testing::check_against_reference;
using testing::max_abs_diff;

TEST_CASE("rope: the path rotates queries and keys as the reference does, forward and backward") {
  testing::rng r(21);
  const std::size_t B = 2, Hq = 4, Hkv = 2, S = 45, D = 16;
  const xt::xtensor<double, 4> q = r.tensor<double>({B, Hq, S, D}), k = r.tensor<double>({B, Hkv, S, D}),
                               v = r.tensor<double>({B, Hkv, S, D}), d_out = r.tensor<double>({B, Hq, S, D});
  xt::xtensor<std::int64_t, 1> pos = xt::xtensor<std::int64_t, 1>::from_shape({S});
  xt::xtensor<std::int64_t, 2> pos2 = xt::xtensor<std::int64_t, 2>::from_shape({B, S});
  for (std::size_t i = 0; i < S; ++i)
    pos(i) = std::int64_t(3 * i + 1), pos2(0, i) = std::int64_t(i), pos2(1, i) = std::int64_t(1000 + 7 * i);
  const xt::xtensor<float, 1> freqs = {1.0f, 0.3f, 0.01f, 1e-4f};
  const schedule small{12, 16, 2};
  const auto Q = ref(q), K = ref(k), V = ref(v);
  SECTION("double: styles, partial rotary, tables, per-batch positions, offsets") {
    check_against_reference(softmax(mask(rope(Q, pos) * trans(rope(K, pos)) / 4.0, causal())) * V, d_out, 1e-12, small);
    check_against_reference(
        softmax(rope(Q, pos2, {.base = 500.0f, .dims = 8, .style = rope_style::interleaved}) *
                trans(rope(K, pos2, {.base = 500.0f, .dims = 8, .style = rope_style::interleaved}))) *
            V,
        d_out, 1e-12, small);
    check_against_reference(
        softmax(rope(Q, pos, {.dims = 8, .inv_freq = freqs}) * trans(rope(K, 5, {.dims = 8, .inv_freq = freqs}))) * V,
        d_out, 1e-12, small);
    check_against_reference(softmax(mask(rope(Q, 100) * trans(K), window(6, 0))) * V, d_out, 1e-12, small);
  }
  SECTION("float") {
    const xt::xtensor<float, 4> qf = xt::cast<float>(q), kf = xt::cast<float>(k), vf = xt::cast<float>(v),
                                df = xt::cast<float>(d_out);
    check_against_reference(softmax(mask(rope(ref(qf), pos) * trans(rope(ref(kf), pos)) / 4.0f, causal())) * ref(vf),
                            df, 2e-5, small);
  }
  SECTION("a rotation changes the scores: without rope the result differs") {
    const xt::xtensor<double, 4> plain = eval(softmax(Q * trans(K)) * V),
                                 rotated = eval(softmax(rope(Q, pos) * trans(rope(K, pos))) * V);
    CHECK(max_abs_diff(plain, rotated) > 1e-3);
    // the same positions shifted by a constant leave Q·Kᵀ as it is (the relative-position property)
    xt::xtensor<std::int64_t, 1> shifted = pos + 12345;
    const xt::xtensor<double, 4> moved = eval(softmax(rope(Q, shifted) * trans(rope(K, shifted))) * V);
    CHECK(max_abs_diff(moved, rotated) < 1e-4);  // float angles: exact only up to their rounding
  }
}

TEST_CASE("rope: decoding (one query at the end of a long cache) and packed heads") {
  testing::rng r(22);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 8, 1, 32}), k = r.tensor<float>({1, 2, 3000, 32}),
                              v = r.tensor<float>({1, 2, 3000, 16});
  const auto e = softmax(rope(ref(q), 2999) * trans(rope(ref(k), 0)) / std::sqrt(32.0f)) * ref(v);
  const auto x = explain(e, {60, 256, 2});
  REQUIRE(x.path == "dot_rotary");
  REQUIRE(x.schedule.forward.key_chunks > 1);
  CHECK(max_abs_diff(eval(e, {60, 256, 2}), reference(e).output) < 2e-6);
  const xt::xtensor<bfloat16, 4> kb = xt::cast<bfloat16>(k), vb = xt::cast<bfloat16>(v);  // a 16-bit cache
  const auto eb = softmax(rope(ref(q), 2999) * trans(rope(ref(kb), 0)) / std::sqrt(32.0f)) * ref(vb);
  CHECK(max_abs_diff(eval(eb, {60, 256, 2}), reference(eb).output) < 2e-6);

  const xt::xtensor<float, 3> qp = r.tensor<float>({2, 19, 4 * 8}), kp = r.tensor<float>({2, 19, 4 * 8}),
                              dp = r.tensor<float>({2, 19, 4 * 8});
  xt::xtensor<int, 1> pos = xt::arange<int>(19);
  const auto ep = softmax(mask(rope(heads(qp, 4), pos) * trans(rope(heads(kp, 4), pos)), causal())) * heads(kp, 4);
  const auto f = eval_with_lse(ep, {12, 16, 1});
  const auto g = grad(ep, f, dp, {12, 16, 1});
  xt::xtensor<double, 4> d4 = xt::transpose(xt::reshape_view(xt::cast<double>(dp), {2, 19, 4, 8}), {0, 2, 1, 3});
  const auto rg = reference_grad(make_plan(ep), d4);
  xt::xtensor<double, 4> dq4 = xt::transpose(xt::reshape_view(xt::cast<double>(g.dq), {2, 19, 4, 8}), {0, 2, 1, 3});
  CHECK(max_abs_diff(dq4, rg.dq) < 2e-5);
}

TEST_CASE("rope: bad positions and options name the argument and the shapes") {
  const xt::xtensor<float, 4> q = xt::zeros<float>({2, 2, 5, 8});
  auto Q = ref(q);
  const xt::xtensor<int, 1> five = xt::arange<int>(5), four = xt::arange<int>(4);
  const xt::xtensor<int, 1> negative = {0, 1, -2, 3, 4};
  const xt::xtensor<float, 1> three = {1, 2, 3};
  CHECK_THROWS_WITH(eval(softmax(rope(Q, four) * trans(Q)) * Q),
                    Catch::Contains("rope(Q, positions): positions has shape (4) but Q has 5 positions in a batch of "
                                    "2: positions must be (5) or (2,5)"));
  CHECK_THROWS_WITH(eval(softmax(Q * trans(rope(Q, negative))) * Q), Catch::Contains("position -2 is negative"));
  CHECK_THROWS_WITH(eval(softmax(rope(Q, five, {.dims = 3}) * trans(Q)) * Q),
                    Catch::Contains("dims must be even and at most the 8 features of Q, got 3"));
  CHECK_THROWS_WITH(eval(softmax(rope(Q, five, {.dims = 10}) * trans(Q)) * Q), Catch::Contains("got 10"));
  CHECK_THROWS_WITH(eval(softmax(rope(Q, five, {.inv_freq = three}) * trans(Q)) * Q),
                    Catch::Contains("inv_freq has 3 entries but 8 rotated features need 4"));
  CHECK_THROWS_WITH(eval(softmax(rope(Q, -1) * trans(Q)) * Q), Catch::Contains("the offset must be >= 0, got -1"));
}
