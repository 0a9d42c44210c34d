// Decoding shapes: keys read in place and long key ranges split into chunks merged by
// log-sum-exp; the result must equal the reference and be bitwise the same for 1 and 2 threads.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using testing::max_abs_diff;

TEST_CASE("decode with split keys equals the reference under masks, GQA and dropout") {
  testing::rng r(1);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 4, 1, 32}), k = r.tensor<float>({2, 2, 5000, 32}),
                              v = r.tensor<float>({2, 2, 5000, 16});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<int, 1> lens = {4097, 1500};
  auto check = [&](const auto& e) {
    const auto plan2 = explain(e, {60, 256, 2}).schedule.forward;
    REQUIRE(plan2.threads == 2);  // the comparison below really runs two threads
    REQUIRE(plan2.key_chunks > 1);
    REQUIRE(plan2.keys == key_reads::in_place);
    const auto want = reference(e).output;
    const xt::xtensor<float, 4> one = eval(e, {60, 256, 1}), two = eval(e, {60, 256, 2});
    REQUIRE((one == two));  // the split does not depend on the thread count
    REQUIRE(max_abs_diff(one, want) < 2e-6);
    const auto with_lse = eval_with_lse(e, {60, 256, 2});
    REQUIRE(max_abs_diff(with_lse.lse, reference(e).lse) < 1e-4);
  };
  check(softmax(Q * trans(K) / std::sqrt(32.0f)) * V);
  check(softmax(mask(Q * trans(K) / std::sqrt(32.0f), lengths(lens))) * V);                     // filled keys
  check(softmax(mask(Q * trans(K) / std::sqrt(32.0f), lengths(lens, masked_rows::zero))) * V);  // excluded keys
  check(dropout(softmax(mask(Q * trans(K), causal(align::bottom_right))), 0.2f, 7) * V);
  const xt::xtensor<int, 1> none = {0, 0};  // every chunk empty: zero rows
  const xt::xtensor<float, 4> z = eval(softmax(mask(Q * trans(K), lengths(none, masked_rows::zero))) * V);
  REQUIRE(max_abs_diff(z, xt::zeros<float>(z.shape())) == 0);
}

namespace {

// Float error grows with the scores' size (ALiBi makes them hundreds here): see docs/numerics.md.
double max_finite_score(const reference_result& r) {
  double m = 0;
  for (double x : r.scores)
    if (std::isfinite(x) && x > -1e5) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace

TEST_CASE("grouped-query decoding: the group's heads as the rows of one task, per-row heads and queries") {
  testing::rng r(3);
  // 8 query heads over 2 kv heads (groups of 4) and 3 queries: 12 rows per task
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 8, 3, 32}), k = r.tensor<float>({2, 2, 2500, 32}),
                              v = r.tensor<float>({2, 2, 2500, 16});
  // the same keys and values repeated for every query head: no groups, one task per head
  xt::xtensor<float, 4> k8 = xt::xtensor<float, 4>::from_shape({2, 8, 2500, 32}),
                        v8 = xt::xtensor<float, 4>::from_shape({2, 8, 2500, 16});
  for (std::size_t h = 0; h < 8; ++h) {
    xt::view(k8, xt::all(), h) = xt::view(k, xt::all(), h / 4);
    xt::view(v8, xt::all(), h) = xt::view(v, xt::all(), h / 4);
  }
  auto Q = ref(q), K = ref(k), V = ref(v), K8 = ref(k8), V8 = ref(v8);
  const xt::xtensor<int, 2> lens = {{2500, 17, 1900}, {0, 2400, 1300}};  // per query: a row that sees nothing
  auto check = [&](auto build) {
    const auto e = build(K, V);
    const auto plan = explain(e, {0, 0, 2}).schedule.forward;
    REQUIRE(plan.group_rows == 4);
    REQUIRE(plan.tasks == 2 * 2 * plan.key_chunks);
    REQUIRE(explain(build(K8, V8), {0, 0, 2}).schedule.forward.group_rows == 0);
    const auto want = reference(e);
    const xt::xtensor<float, 4> one = eval(e, {0, 0, 1}), two = eval(e, {0, 0, 2});
    REQUIRE((one == two));
    REQUIRE((one == eval(build(K8, V8), {0, 0, 1})));  // the same sums in the same order, row by row
    REQUIRE(max_abs_diff(one, want.output) < 2e-6 * (1 + max_finite_score(want)));
    REQUIRE(max_abs_diff(eval_with_lse(e, {0, 0, 2}).lse, want.lse) < 1e-4 * (1 + max_finite_score(want)));
  };
  // ALiBi and dropout depend on the head, lengths and causal on the query row
  check([&](auto K_, auto V_) {
    return softmax(mask(alibi(Q * trans(K_) / std::sqrt(32.0f), alibi_op::standard_slopes(8)), lengths(lens))) * V_;
  });
  check([&](auto K_, auto V_) {
    return dropout(softmax(mask(Q * trans(K_), causal(align::bottom_right))), 0.3f, 11) * V_;
  });
  check([&](auto K_, auto V_) { return softmax(mask(Q * trans(K_), window(40, 0, align::bottom_right))) * V_; });
}

TEST_CASE("decode: keys given as a strided view are still read correctly") {
  testing::rng r(2);
  const xt::xtensor<double, 4> q = r.tensor<double>({1, 3, 2, 8}), kk = r.tensor<double>({1, 3, 3000, 16}),
                               v = r.tensor<double>({1, 3, 3000, 5});
  auto ks = xt::view(kk, xt::all(), xt::all(), xt::all(), xt::range(0, 16, 2));  // d-stride 2: packed path
  auto Q = ref(q), V = ref(v);
  auto K = ref(ks);
  const auto e = softmax(Q * trans(K)) * V;
  REQUIRE(max_abs_diff(eval(e), reference(e).output) < 1e-12);
}
