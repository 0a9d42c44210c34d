// Catalogue E33-E38: non-finite inputs. What holds on every path: a non-finite value only
// changes the rows whose scores it enters -- other rows are bitwise what they are without it.
// The affected rows become NaN on every path, as in the reference (see docs/errors.md).
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>

using namespace xattn;

namespace {

template <class T>
bool row_has_nan(const xt::xtensor<T, 3>& out, std::size_t i) {
  for (std::size_t d = 0; d < out.shape()[2]; ++d)
    if (std::isnan(out(0, i, d))) return true;
  return false;
}

template <class T>
bool same_row(const xt::xtensor<T, 3>& a, const xt::xtensor<T, 3>& b, std::size_t i) {
  for (std::size_t d = 0; d < a.shape()[2]; ++d)
    if (a(0, i, d) != b(0, i, d)) return false;
  return true;
}

/// (clean, poisoned) outputs of causal attention over 40 keys, with `poison` applied to copies.
template <class T, class Poison>
auto causal_pair(Poison poison, std::size_t block_k) {
  testing::rng r(33);
  xt::xtensor<T, 3> q = r.tensor<T>({1, 40, 8}), k = r.tensor<T>({1, 40, 8}), v = r.tensor<T>({1, 40, 16});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<T, 3> clean = eval(softmax(mask(Q * trans(K), causal())) * V, {8, block_k, 1});
  poison(q, k, v);
  const xt::xtensor<T, 3> dirty = eval(softmax(mask(Q * trans(K), causal())) * V, {8, block_k, 1});
  return std::pair{clean, dirty};
}

constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEMPLATE_TEST_CASE("E33 NaN in one query changes only that query's row", "[errors][nonfinite]", float, double) {
  const auto [clean, dirty] = causal_pair<TestType>([](auto& q, auto&, auto&) { q(0, 17, 3) = TestType(nan_v); }, 16);
  for (std::size_t i = 0; i < 40; ++i)
    if (i != 17) REQUIRE(same_row(clean, dirty, i));
}

TEMPLATE_TEST_CASE("E34 NaN in one key changes only the rows that attend to it", "[errors][nonfinite]", float, double) {
  for (std::size_t bk : {1u, 16u, 64u}) {
    const auto [clean, dirty] = causal_pair<TestType>([](auto&, auto& k, auto&) { k(0, 23, 5) = TestType(nan_v); }, bk);
    for (std::size_t i = 0; i < 23; ++i) REQUIRE(same_row(clean, dirty, i));  // causal: rows < 23 never see key 23
  }
}

// float's polynomial exp (include/xattn/kernel/exp.hpp) keeps NaN lanes NaN (xsimd::isnan: 8.1
// compares ordered, so x != x would be false), as double's xsimd::exp and the reference do.
TEMPLATE_TEST_CASE("E35 rows that attend to a NaN key come out NaN", "[errors][nonfinite]", float, double) {
  const auto [clean, dirty] = causal_pair<TestType>([](auto&, auto& k, auto&) { k(0, 23, 5) = TestType(nan_v); }, 16);
  std::size_t finite = 0;
  for (std::size_t i = 23; i < 40; ++i) finite += !row_has_nan(dirty, i);
  INFO(finite << " of the 17 rows that see key 23 are finite; row 23 out(0) = " << dirty(0, 23, 0));
  REQUIRE(finite == 0);
}

// Masked keys get weight exactly 0, and a key of weight 0 never multiplies its V row (0 * NaN would
// be NaN): the P·V kernel recomputes a row whose block sum is not finite without those keys.
TEMPLATE_TEST_CASE("E36 NaN or inf in V at a masked key leaves the rows that do not see it unchanged",
                   "[errors][nonfinite]", float, double) {
  for (const double bad : {nan_v, std::numeric_limits<double>::infinity()})
    for (std::size_t bk : {1u, 16u, 64u}) {
      const auto [clean, dirty] =
          causal_pair<TestType>([bad](auto&, auto&, auto& v) { v(0, 30, 2) = TestType(bad); }, bk);
      for (std::size_t i = 0; i < 30; ++i) REQUIRE(same_row(clean, dirty, i));
      for (std::size_t i = 30; i < 40; ++i) {  // rows that see key 30: that column is non-finite, the others not
        INFO("V(30) = " << bad << ", block_k " << bk << ", row " << i);
        REQUIRE(std::isnan(dirty(0, i, 2)) == std::isnan(bad));
        REQUIRE(std::isfinite(dirty(0, i, 0)));
      }
    }
}

TEMPLATE_TEST_CASE("E36b the reference agrees: a NaN score makes its row NaN, a NaN value only the rows weighing it",
                   "[errors][nonfinite]", float, double) {
  testing::rng r(36);
  xt::xtensor<TestType, 3> q = r.tensor<TestType>({1, 8, 4}), k = r.tensor<TestType>({1, 8, 4}),
                           v = r.tensor<TestType>({1, 8, 3});
  k(0, 6, 1) = TestType(nan_v);  // rows 6 and 7 see key 6: NaN scores, whole rows NaN
  v(0, 3, 0) = TestType(nan_v);  // rows 3..7 weigh key 3: column 0 NaN
  q(0, 1, 2) = TestType(nan_v);  // every score of row 1 NaN: NaN row, not "no visible key"
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto expr = softmax(mask(Q * trans(K), causal())) * V;
  const auto want = reference(expr).output;
  const xt::xtensor<TestType, 3> got = eval(expr);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t d = 0; d < 3; ++d) {
      INFO("row " << i << " column " << d);
      REQUIRE(std::isnan(want(0, 0, i, d)) == (i == 1 || i >= 6 || (i >= 3 && d == 0)));
      REQUIRE(std::isnan(double(got(0, i, d))) == std::isnan(want(0, 0, i, d)));
    }
}

TEST_CASE("E37 -inf in a float mask excludes keys exactly like a bool mask; an all -inf row gives zeros",
          "[errors][nonfinite]") {
  testing::rng r(37);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 2, 6, 8}), k = r.tensor<float>({2, 2, 9, 8}),
                              v = r.tensor<float>({2, 2, 9, 3});
  xt::xtensor<bool, 4> keep = xt::xtensor<bool, 4>::from_shape({2, 2, 6, 9});
  for (auto& x : keep) x = r.coin(0.6);
  xt::view(keep, 1, 0, 4, xt::all()) = false;  // one row with nothing visible
  xt::xtensor<float, 4> add = xt::zeros<float>({2, 2, 6, 9});
  for (std::size_t n = 0; n < add.size(); ++n)
    if (!keep.data()[n]) add.data()[n] = -std::numeric_limits<float>::infinity();
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<float, 4> by_bias = eval(softmax(Q * trans(K) + bias(add)) * V, {4, 16, 2});
  const xt::xtensor<float, 4> by_mask = eval(softmax(mask(Q * trans(K), bool_mask(keep))) * V, {4, 16, 2});
  REQUIRE(testing::max_abs_diff(by_bias, by_mask) < 1e-6);
  for (std::size_t d = 0; d < 3; ++d) REQUIRE(by_bias(1, 0, 4, d) == 0.0f);
}

TEMPLATE_TEST_CASE("E38 a NaN bias entry, or a score overflowing to inf, changes only its own row",
                   "[errors][nonfinite]", float, double) {
  testing::rng r(38);
  xt::xtensor<TestType, 3> q = r.tensor<TestType>({1, 5, 4}), k = r.tensor<TestType>({1, 7, 4}),
                           v = r.tensor<TestType>({1, 7, 3});
  xt::xtensor<TestType, 2> b = xt::zeros<TestType>({5, 7});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<TestType, 3> clean = eval(softmax(Q * trans(K) + bias(b)) * V);
  b(1, 3) = TestType(nan_v);
  for (std::size_t d = 0; d < 4; ++d) q(0, 3, d) = TestType(3e38);  // q·k overflows float's range
  const xt::xtensor<TestType, 3> dirty = eval(softmax(Q * trans(K) + bias(b)) * V);
  for (std::size_t i : {0u, 2u, 4u}) REQUIRE(same_row(clean, dirty, i));
}
