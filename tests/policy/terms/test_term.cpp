// Softmax terms written as a user would, outside the library (support/user_terms.hpp): "softmax off
// by one" (a logit 0 in every row, nothing to learn) and one learnable logit per (batch row, head). Each takes every
// path a term can take (masks, GQA, a decoding split, float and double, the backward, explain) through the softmax_term
// protocol alone; checked by hand, against the double reference and by finite differences.
#include "support/against_reference.hpp"
#include "support/random.hpp"
#include "support/user_terms.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

using namespace xattn;
using testing::max_abs_diff;

using testing::batch_head_logits;
using testing::off_by_one;

static_assert(softmax_term<off_by_one> && softmax_term<batch_head_logits>);
static_assert(!softmax_term<xt::xtensor<double, 1>>);

TEST_CASE("softmax term: off by one, by hand on one row") {
  // one query, two keys of scores 0 and ln 2, the term's logit 0: weights 1/4 and 2/4
  const xt::xtensor<double, 4> q = {{{{1.0}}}}, k = {{{{0.0}, {std::log(2.0)}}}}, v = {{{{6.0}, {12.0}}}};
  const auto e = softmax(ref(q) * trans(ref(k)), off_by_one{}) * ref(v);
  const auto f = eval_with_lse(e);
  CHECK(f.output(0, 0, 0, 0) == Approx(6.0 / 4 + 12.0 * 2 / 4).epsilon(1e-14));
  CHECK(f.lse(0, 0, 0) == Approx(std::log(4.0)).epsilon(1e-14));
  const xt::xtensor<double, 4> d_out = {{{{1.0}}}};
  const auto g = grad(e, f, d_out);
  CHECK(g.dsinks.size() == 0);  // nothing to learn
  // dS_j = p_j (dP_j - Δ), Δ = dO · O = 7.5; dk_1 = dS_1 · q = (2/4)(12 - 7.5)
  CHECK(g.dk(0, 0, 1, 0) == Approx(0.5 * 4.5).epsilon(1e-13));
  const auto x = explain(e);
  CHECK_THAT(x.text, Catch::Contains("off by one  a logit 0 in every row's normaliser"));
}

TEST_CASE("softmax term: a user's learnable term equals the reference, its gradient finite differences") {
  testing::rng r(21);
  const std::size_t B = 2, Hq = 4, Hkv = 2, Sq = 29, Skv = 41, D = 16, Dv = 8;
  const xt::xtensor<double, 4> q = r.tensor<double>({B, Hq, Sq, D}), k = r.tensor<double>({B, Hkv, Skv, D}),
                               v = r.tensor<double>({B, Hkv, Skv, Dv}), d_out = r.tensor<double>({B, Hq, Sq, Dv});
  xt::xtensor<double, 2> t = r.tensor<double>({B, Hq});
  t(1, 2) = -std::numeric_limits<double>::infinity();  // no term in that batch row and head
  const schedule small{12, 16, 2};
  auto Q = ref(q), K = ref(k), V = ref(v);
  const batch_head_logits term{&t};
  SECTION("double, under masks") {
    testing::check_against_reference(softmax(Q * trans(K) / 4.0, term) * V, d_out, 1e-12, small);
    testing::check_against_reference(softmax(mask(Q * trans(K) / 4.0, causal()), off_by_one{}) * V, d_out, 1e-12,
                                     small);
    const auto e = softmax(mask(softcap(Q * trans(K), 3.0), window(5, 2)), term) * V;
    const auto [g, rg] = testing::check_against_reference(e, d_out, 1e-12, small);
    REQUIRE(g.dsinks.size() == B * Hq);
    CHECK(g.dsinks(1 * Hq + 2) == 0);
    // finite differences of L = Σ dO ∘ O at each logit, through the fused forward
    for (std::size_t n = 0; n < B * Hq; ++n) {
      if (n == 1 * Hq + 2) continue;
      const double keep = t.data()[n], h = 1e-6;
      t.data()[n] = keep + h;
      const double up = xt::sum(eval(e, small) * d_out)();
      t.data()[n] = keep - h;
      const double down = xt::sum(eval(e, small) * d_out)();
      t.data()[n] = keep;
      CHECK(g.dsinks(n) == Approx((up - down) / (2 * h)).margin(1e-8));
      CHECK(rg.dsinks[n] == Approx(g.dsinks(n)).margin(1e-12));
    }
  }
  SECTION("float, with the term's logits large enough to weigh") {
    const xt::xtensor<float, 4> qf = xt::cast<float>(q), kf = xt::cast<float>(k), vf = xt::cast<float>(v),
                                df = xt::cast<float>(d_out);
    t += 2.0;
    testing::check_against_reference(softmax(mask(ref(qf) * trans(ref(kf)) / 4.0f, causal()), term) * ref(vf), df, 1e-5,
                                     small);
  }
}

TEST_CASE("softmax term: a decoding split adds each row's term once") {
  testing::rng r(22);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 8, 1, 32}), k = r.tensor<float>({2, 2, 5000, 32}),
                              v = r.tensor<float>({2, 2, 5000, 16});
  xt::xtensor<double, 2> t = r.tensor<double>({2, 8}) * 2.0 + 4.0;  // logits that weigh: the scores are O(1)
  const auto e = softmax(ref(q) * trans(ref(k)) / std::sqrt(32.0f), batch_head_logits{&t}) * ref(v);
  const auto x = explain(e, {60, 256, 2}).schedule.forward;
  REQUIRE(x.key_chunks > 1);
  const auto f = eval_with_lse(e, {60, 256, 2});
  CHECK(max_abs_diff(f.output, reference(e).output) < 2e-6);
  CHECK(max_abs_diff(f.lse, reference(e).lse) < 1e-5);
}

TEST_CASE("softmax term: the term's own check runs before anything is computed") {
  const xt::xtensor<float, 4> q = xt::zeros<float>({1, 4, 3, 8}), k = xt::zeros<float>({1, 4, 5, 8});
  const xt::xtensor<double, 2> t = xt::zeros<double>({1, 3});
  CHECK_THROWS_WITH(eval(softmax(ref(q) * trans(ref(k)), batch_head_logits{&t}) * ref(k)),
                    Catch::Contains("batch_head_logits: t must be (batch, query heads)"));
}
