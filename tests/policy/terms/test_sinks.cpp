// softmax(masked, sinks(t)): the fused forward and backward against the double reference (its
// sink gradient checked by finite differences here), the sink counted once under a decoding split
// and in every layout, rows without a visible key, bfloat16 operands, and bad sink tensors.
#include "support/against_reference.hpp"
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

/// max over h of |a[h] - b[h]| for two (Hq) vectors of any element types.
template <class A, class B>
double worst(const A& a, const B& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t h = 0; h < a.size(); ++h) m = std::max(m, std::abs(double(a[h]) - double(b[h])));
  return m;
}

/// Output, lse, and every gradient (dsinks included) of e against the double reference.
template <class E, class D>
void check_against_reference(const E& e, const D& d_out, double tol, const schedule& sch = {}) {
  const auto [g, rg] = testing::check_against_reference(e, d_out, tol, sch);
  CHECK(worst(g.dsinks, rg.dsinks) < tol * 10);
}

}  // namespace

TEST_CASE("sinks: the weights are e^s / (e^t + sum e^s), by hand on one row") {
  // one query, two keys of scores 0 and ln 2, sink ln 3: weights 1/6 and 2/6, the sink 3/6
  const xt::xtensor<double, 4> q = {{{{1.0}}}}, k = {{{{0.0}, {std::log(2.0)}}}}, v = {{{{6.0}, {12.0}}}};
  const xt::xtensor<double, 1> t = {std::log(3.0)};
  const auto e = softmax(ref(q) * trans(ref(k)), sinks(t)) * ref(v);
  const auto f = eval_with_lse(e);
  CHECK(f.output(0, 0, 0, 0) == Approx(6.0 / 6 + 12.0 * 2 / 6).epsilon(1e-14));
  CHECK(f.lse(0, 0, 0) == Approx(std::log(6.0)).epsilon(1e-14));
  const xt::xtensor<double, 4> w = eval(softmax(ref(q) * trans(ref(k)), sinks(t)));
  CHECK(w(0, 0, 0, 0) == Approx(1.0 / 6).epsilon(1e-14));
  CHECK(w(0, 0, 0, 1) == Approx(2.0 / 6).epsilon(1e-14));
  // dt = -p_sink · Δ with Δ = dO · O: here -(1/2) · 5 for dO = 1
  const xt::xtensor<double, 4> d_out = {{{{1.0}}}};
  CHECK(grad(e, f, d_out).dsinks(0) == Approx(-0.5 * 5.0).epsilon(1e-13));
}

TEST_CASE("sinks: fused forward and backward equal the reference under masks, GQA, float and double") {
  testing::rng r(11);
  const std::size_t B = 2, Hq = 4, Hkv = 2, Sq = 37, Skv = 53, D = 16, Dv = 24;
  const xt::xtensor<double, 4> q = r.tensor<double>({B, Hq, Sq, D}), k = r.tensor<double>({B, Hkv, Skv, D}),
                               v = r.tensor<double>({B, Hkv, Skv, Dv}), d_out = r.tensor<double>({B, Hq, Sq, Dv});
  xt::xtensor<double, 1> t = {0.5, -1.0, 0.0, 2.0};
  const xt::xtensor<float, 4> qf = xt::cast<float>(q), kf = xt::cast<float>(k), vf = xt::cast<float>(v),
                              df = xt::cast<float>(d_out);
  const xt::xtensor<float, 1> tf = xt::cast<float>(t);
  const xt::xtensor<int, 1> lens = {0, 40};  // batch 0: no visible key, every row all sink
  const schedule small{12, 16, 2};           // several blocks, two threads
  SECTION("double") {
    auto Q = ref(q), K = ref(k), V = ref(v);
    check_against_reference(softmax(Q * trans(K) / 4.0, sinks(t)) * V, d_out, 1e-12, small);
    check_against_reference(softmax(mask(Q * trans(K) / 4.0, causal()), sinks(t)) * V, d_out, 1e-12, small);
    check_against_reference(softmax(mask(Q * trans(K), lengths(lens, masked_rows::zero)), sinks(t)) * V, d_out, 1e-12,
                            small);
    check_against_reference(softmax(mask(Q * trans(K), lengths(lens)), sinks(t)) * V, d_out, 1e-12, small);
    check_against_reference(softmax(mask(softcap(Q * trans(K), 3.0), window(5, 2, sink_tokens(3))), sinks(t)) * V,
                            d_out, 1e-12, small);
  }
  SECTION("float") {
    auto Q = ref(qf), K = ref(kf), V = ref(vf);
    // float: sums of ~50 terms of size O(1) (dropout scales by 4/3), rounded at 6e-8 each
    check_against_reference(softmax(mask(Q * trans(K) / 4.0f, causal(align::bottom_right)), sinks(tf)) * V, df, 1e-5,
                            small);
    check_against_reference(dropout(softmax(mask(Q * trans(K), window(7, 0)), sinks(tf)), 0.25f, 3) * V, df, 1e-5,
                            small);
  }
  SECTION("a row with no visible key outputs 0 and its lse is the sink's logit") {
    const auto f =
        eval_with_lse(softmax(mask(ref(q) * trans(ref(k)), lengths(lens, masked_rows::zero)), sinks(t)) * ref(v));
    for (std::size_t h = 0; h < Hq; ++h) {
      CHECK(f.lse(0, h, 5) == t(h));
      CHECK(xt::amax(xt::abs(xt::view(f.output, 0, h)))() == 0);
    }
  }
  SECTION("a -inf sink is no sink") {
    xt::xtensor<double, 1> none = xt::xtensor<double, 1>::from_shape({Hq});
    none.fill(-std::numeric_limits<double>::infinity());
    const auto e = softmax(mask(ref(q) * trans(ref(k)), causal()), sinks(none)) * ref(v);
    const xt::xtensor<double, 4> plain = eval(softmax(mask(ref(q) * trans(ref(k)), causal())) * ref(v));
    CHECK(max_abs_diff(eval(e), plain) < 1e-14);
    const auto g = grad(e, eval_with_lse(e), d_out);
    CHECK(xt::amax(xt::abs(g.dsinks))() == 0);
  }
  SECTION("the sink tensor is read when evaluated, not when the expression is built") {
    const auto e = softmax(ref(q) * trans(ref(k)), sinks(t)) * ref(v);
    const xt::xtensor<double, 4> before = eval(e);
    t(1) += 1;
    CHECK(max_abs_diff(eval(e), reference(e).output) < 1e-12);
    CHECK(max_abs_diff(eval(e), before) > 1e-3);
  }
}

TEST_CASE("sinks: the reference's sink gradient matches finite differences") {
  testing::rng r(12);
  const xt::xtensor<double, 4> q = r.tensor<double>({1, 3, 5, 4}), k = r.tensor<double>({1, 3, 7, 4}),
                               v = r.tensor<double>({1, 3, 7, 3}), d_out = r.tensor<double>({1, 3, 5, 3});
  xt::xtensor<double, 1> t = {0.3, -0.7, 1.1};
  const auto e = softmax(mask(ref(q) * trans(ref(k)), causal()), sinks(t)) * ref(v);
  const auto g = reference_grad(make_plan(e), d_out);
  for (std::size_t h = 0; h < 3; ++h) {
    const double h_step = 1e-6, keep = t(h);
    t(h) = keep + h_step;
    const double up = xt::sum(reference(e).output * d_out)();
    t(h) = keep - h_step;
    const double down = xt::sum(reference(e).output * d_out)();
    t(h) = keep;
    CHECK(g.dsinks[h] == Approx((up - down) / (2 * h_step)).margin(1e-8));
  }
}

TEST_CASE("sinks: decoding splits the keys into chunks and adds each row's sink once") {
  testing::rng r(13);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 8, 1, 32}), k = r.tensor<float>({2, 2, 5000, 32}),
                              v = r.tensor<float>({2, 2, 5000, 16});
  const xt::xtensor<float, 1> t = r.vector<float>(8, 2, 6);  // sinks that weigh: the scores are O(1)
  const auto e = softmax(ref(q) * trans(ref(k)) / std::sqrt(32.0f), sinks(t)) * ref(v);
  const auto x = explain(e, {60, 256, 2}).schedule.forward;
  REQUIRE(x.key_chunks > 1);
  REQUIRE(x.group_rows > 0);
  const auto f = eval_with_lse(e, {60, 256, 2});
  CHECK(max_abs_diff(f.output, reference(e).output) < 2e-6);
  CHECK(max_abs_diff(f.lse, reference(e).lse) < 1e-5);
}

TEST_CASE("sinks: packed heads and bfloat16 operands") {
  testing::rng r(14);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 19, 4 * 16}), k = r.tensor<float>({2, 23, 4 * 16}),
                              v = r.tensor<float>({2, 23, 4 * 8}), d_out = r.tensor<float>({2, 19, 4 * 8});
  const xt::xtensor<float, 1> t = {1.0f, -2.0f, 0.5f, 3.0f};
  const auto e = softmax(mask(heads(q, 4) * trans(heads(k, 4)) / 4.0f, causal()), sinks(t)) * heads(v, 4);
  const auto f = eval_with_lse(e, {12, 16, 1});
  const auto want = reference(e);
  CHECK(max_abs_diff(f.lse, xt::transpose(want.lse, {0, 2, 1})) < 2e-5);
  const auto g = grad(e, f, d_out, {12, 16, 1});
  xt::xtensor<double, 4> d4 = xt::transpose(xt::reshape_view(xt::cast<double>(d_out), {2, 19, 4, 8}), {0, 2, 1, 3});
  CHECK(worst(g.dsinks, reference_grad(make_plan(e), d4).dsinks) < 2e-5);

  const xt::xtensor<bfloat16, 4> qb = xt::cast<bfloat16>(r.tensor<float>({1, 4, 40, 32})),
                                 kb = xt::cast<bfloat16>(r.tensor<float>({1, 2, 70, 32})),
                                 vb = xt::cast<bfloat16>(r.tensor<float>({1, 2, 70, 32}));
  const auto eb = softmax(mask(ref(qb) * trans(ref(kb)) / std::sqrt(32.0f), causal()), sinks(t)) * ref(vb);
  // P rounded to bfloat16 for vdpbf16ps where the CPU has it (relative 2^-9), |V| <= 1; a sink
  // counted twice or not at all would be off by more than 0.05 here
  CHECK(max_abs_diff(eval(eb), reference(eb).output) < 4e-3);
}

TEST_CASE("sinks: a sink tensor of the wrong shape or value is rejected, naming both shapes") {
  const xt::xtensor<float, 4> q = xt::zeros<float>({1, 4, 3, 8}), k = xt::zeros<float>({1, 4, 5, 8});
  const xt::xtensor<float, 1> three = {0, 0, 0};
  const xt::xtensor<float, 2> matrix = xt::zeros<float>({4, 1});
  const xt::xtensor<float, 1> nan = {0, std::nanf(""), 0, 0};
  CHECK_THROWS_WITH(eval(softmax(ref(q) * trans(ref(k)), sinks(three)) * ref(k)),
                    Catch::Contains("sinks(t)): t has shape (3) but the expression has 4 query heads"));
  CHECK_THROWS_WITH(eval(softmax(ref(q) * trans(ref(k)), sinks(matrix)) * ref(k)),
                    Catch::Contains("t has shape (4,1)"));
  CHECK_THROWS_WITH(eval(softmax(ref(q) * trans(ref(k)), sinks(nan)) * ref(k)), Catch::Contains("t[1] is nan"));
}
