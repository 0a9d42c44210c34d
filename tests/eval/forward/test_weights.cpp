// eval(softmax(...)) and eval(scores) run the fused kernel: a first pass for each row's max and sum,
// a second writing normalised tiles (the weights), or one pass writing the masked scores. Checked
// against the double reference on every score path, mask kind, modifier, dropout, GQA and layout,
// and bitwise across thread counts and block_q.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstring>
#include <limits>

using namespace xattn;
using testing::max_abs_diff;

namespace {

/// The reference tensor in the layout eval returns (rank 3: head 0 dropped).
template <class R>
xt::xarray<double> like(const xt::xtensor<double, 4>& ref4, const R& got) {
  if (got.dimension() == 3) return xt::view(ref4, xt::all(), 0);
  return ref4;
}

/// |a - b| over elements where both are finite; infinities must sit at the same places.
template <class A>
double finite_diff(const A& a, const xt::xarray<double>& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() > 0);
  double m = 0;
  for (std::size_t n = 0; n < a.size(); ++n) {
    const double x = double(a.flat(n)), y = b.flat(n);
    if (std::isinf(x) || std::isinf(y)) {
      REQUIRE(x == y);
      continue;
    }
    m = std::max(m, std::abs(x - y));
  }
  return m;
}

template <class E>
void check_weights(const E& e, double tol, const schedule& sch = {4, 8, 1}) {
  const auto want = reference(e);
  const auto w = eval(e, sch);
  INFO(explain(e, sch));
  REQUIRE(max_abs_diff(w, like(want.weights, w)) < tol);
  // the same bits for any thread count and block_q
  const auto w2 = eval(e, {sch.block_q == 4 ? 7u : 4u, sch.block_k, 2});
  REQUIRE(std::memcmp(w.data(), w2.data(), w.size() * sizeof(w.data()[0])) == 0);
}

template <class E>
void check_scores(const E& e, double tol) {
  const auto want = reference(e);
  const auto s = eval(e, {5, 8, 2});
  REQUIRE(finite_diff(s, like(want.scores, s)) < tol);
}

}  // namespace

TEST_CASE("weights: every score path and mask kind equals the reference") {
  testing::rng r(1);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 4, 19, 8}), k = r.tensor<float>({2, 2, 37, 8});
  auto Q = ref(q), K = ref(k);
  const xt::xtensor<int, 2> lens = {{0, 3, 37, 20, 1, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9},
                                    {37, 37, 5, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}};
  xt::xtensor<bool, 4> keep = xt::ones<bool>({2, 1, 19, 37});
  for (std::size_t n = 0; n < keep.size(); n += 3) keep.flat(n) = false;
  const double tol = 2e-6;
  check_weights(softmax(Q * trans(K) / 3.0f), tol);                                   // dot_identity
  check_weights(softmax(mask(Q * trans(K), lengths(lens))), tol);                     // filled rows, uniform
  check_weights(softmax(mask(Q * trans(K), lengths(lens, masked_rows::zero))), tol);  // excluded: zero rows
  check_weights(softmax(mask(mask(Q * trans(K), causal()), window(4, 2))), tol);      // skipped blocks
  check_weights(softmax(mask(score(scaled_dot{}, Q, K), bool_mask(keep))), tol);      // dot_features
  check_weights(softmax(mask(score(cosine{0.5}, Q, K), causal(align::bottom_right))), tol);
  check_weights(softmax(softcap(score(gaussian{1.5}, Q, K), 2.0)), tol);  // modifier: natural units
  auto user = [](auto a, auto b) { return a[0] * b[1] - a[1] * b[0]; };   // pair_raw
  check_weights(
      softmax(mask(score(user, Q, K), predicate([](auto, auto, auto i, auto j) { return (i + j) % 3 != 0; }))), tol);
  check_weights(dropout(softmax(mask(Q * trans(K), lengths(lens))), 0.4f, 17), 4e-6);  // weights after dropout
}

TEST_CASE("weights: additive, rank-3 operands, packed heads, double") {
  testing::rng r(2);
  const xt::xtensor<double, 3> q = r.tensor<double>({2, 9, 5}), k = r.tensor<double>({2, 23, 3});
  const xt::xtensor<double, 2> wq = r.tensor<double>({6, 5}), wk = r.tensor<double>({6, 3});
  const xt::xtensor<double, 1> wv = r.vector<double>(6);
  auto Q = ref(q), K = ref(k);
  const xt::xtensor<int, 1> lens = {0, 11};
  check_weights(softmax(mask(score(additive{wq, wk, wv}, Q, K), lengths(lens))), 1e-13);  // pair_features
  const xt::xtensor<float, 3> qp = r.tensor<float>({2, 6, 4 * 3}), kp = r.tensor<float>({2, 30, 2 * 3});
  auto Qp = heads(qp, 4), Kp = heads(kp, 2);
  const auto w = eval(softmax(mask(Qp * trans(Kp), causal())));
  STATIC_REQUIRE(std::is_same_v<decltype(w), const xt::xtensor<float, 4>>);  // (B, H, Sq, Skv) for heads()
  REQUIRE(w.shape() == std::array<std::size_t, 4>{2, 4, 6, 30});
  check_weights(softmax(mask(Qp * trans(Kp), causal())), 2e-6);
  const xt::xtensor<float, 4> x = r.tensor<float>({1, 2, 5, 40}, -4, 4);  // scores given as a tensor
  check_weights(softmax(mask(ref(x), lengths(xt::xtensor<int, 1>{33}))), 2e-6);
}

TEST_CASE("weights: rows sum to one, fully excluded rows are zero, long rows span many blocks") {
  testing::rng r(3);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 70, 16}, -2, 2), k = r.tensor<float>({1, 2, 1500, 16}, -2, 2);
  auto Q = ref(q), K = ref(k);
  const xt::xtensor<int, 1> none = {0};
  const auto w = eval(softmax(mask(Q * trans(K) / 4.0f, causal(align::bottom_right))));
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < 70; ++i) REQUIRE(xt::sum(xt::view(w, 0, h, i))() == Approx(1).margin(1e-5));
  check_weights(softmax(mask(Q * trans(K) / 4.0f, causal(align::bottom_right))), 2e-6, {});
  const auto z = eval(softmax(mask(Q * trans(K), lengths(none, masked_rows::zero))));
  REQUIRE(xt::amax(xt::abs(z))() == 0);
}

TEST_CASE("scores: modifiers and masks applied, -inf where excluded, the fill where filled") {
  testing::rng r(4);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 2, 11, 8}), k = r.tensor<float>({2, 2, 29, 8});
  const xt::xtensor<float, 4> b = r.tensor<float>({1, 2, 11, 29});
  auto Q = ref(q), K = ref(k);
  const xt::xtensor<int, 1> lens = {7, 0};
  check_scores(Q * trans(K) / 2.0f, 1e-6);
  check_scores(mask(softcap(Q * trans(K), 3.0) + bias(b), lengths(lens)), 1e-6);
  check_scores(mask(mask(score(cosine{}, Q, K), lengths(lens)), causal()), 1e-6);  // exclusion wins over the fill
  const auto s = eval(mask(Q * trans(K), lengths(lens)));
  REQUIRE(s(0, 0, 0, 7) == -1e6f);
  REQUIRE(s(1, 1, 3, 0) == -1e6f);
  const auto c = eval(mask(Q * trans(K), causal()));
  REQUIRE(c(0, 0, 0, 1) == -std::numeric_limits<float>::infinity());
}
