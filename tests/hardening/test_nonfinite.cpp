// Catalogue E33-E38: non-finite inputs. What holds on every path: a non-finite value only
// changes the rows whose scores it enters -- other rows are bitwise what they are without it.
// What the affected rows become differs between the paths (see docs/errors.md); the tests tagged
// [!mayfail] state the intended semantics (NaN propagates, as in the reference).
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

// Bug: float's polynomial exp (include/xattn/kernel/exp.hpp) maps NaN to 0, so a NaN score gets
// weight 0 and the key is silently ignored; double (xsimd::exp) and the reference give NaN.
// 9374fbc added `select(x != x, x, r)`, but xsimd 8.1 compares ordered: x != x is false for NaN
// lanes (AVX2 and AVX-512); xsimd::isnan(x) is true.
TEMPLATE_TEST_CASE("E35 rows that attend to a NaN key come out NaN", "[errors][nonfinite][bug][!mayfail]", float, double) {
  const auto [clean, dirty] = causal_pair<TestType>([](auto&, auto& k, auto&) { k(0, 23, 5) = TestType(nan_v); }, 16);
  std::size_t finite = 0;
  for (std::size_t i = 23; i < 40; ++i) finite += !row_has_nan(dirty, i);
  INFO(finite << " of the 17 rows that see key 23 are finite; row 23 out(0) = " << dirty(0, 23, 0));
  REQUIRE(finite == 0);
}

// Bug: masked keys get probability exactly 0, but P·V still multiplies 0 by V's row: a NaN or inf
// in V at a key hidden from row i turns row i into NaN whenever that key shares a key block with
// keys row i does see (schedule dependent). The reference skips zero weights.
TEMPLATE_TEST_CASE("E36 NaN or inf in V at a masked key leaks into rows that do not see it", "[errors][nonfinite][bug][!mayfail]",
                   float, double) {
  for (const double bad : {nan_v, std::numeric_limits<double>::infinity()}) {
    const auto [clean, dirty] = causal_pair<TestType>([bad](auto&, auto&, auto& v) { v(0, 39, 2) = TestType(bad); }, 64);
    std::size_t leaked = 0;
    for (std::size_t i = 0; i < 39; ++i) leaked += !same_row(clean, dirty, i);
    INFO("V(39) = " << bad << ": " << leaked << " of the 39 rows that do not see key 39 changed; out(0, 0, 2) = " << dirty(0, 0, 2));
    CHECK(leaked == 0);
  }
}

TEST_CASE("E37 -inf in a float mask excludes keys exactly like a bool mask; an all -inf row gives zeros", "[errors][nonfinite]") {
  testing::rng r(37);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 2, 6, 8}), k = r.tensor<float>({2, 2, 9, 8}), v = r.tensor<float>({2, 2, 9, 3});
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

TEMPLATE_TEST_CASE("E38 a NaN bias entry, or a score overflowing to inf, changes only its own row", "[errors][nonfinite]", float, double) {
  testing::rng r(38);
  xt::xtensor<TestType, 3> q = r.tensor<TestType>({1, 5, 4}), k = r.tensor<TestType>({1, 7, 4}), v = r.tensor<TestType>({1, 7, 3});
  xt::xtensor<TestType, 2> b = xt::zeros<TestType>({5, 7});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<TestType, 3> clean = eval(softmax(Q * trans(K) + bias(b)) * V);
  b(1, 3) = TestType(nan_v);
  for (std::size_t d = 0; d < 4; ++d) q(0, 3, d) = TestType(3e38);  // q·k overflows float's range
  const xt::xtensor<TestType, 3> dirty = eval(softmax(Q * trans(K) + bias(b)) * V);
  for (std::size_t i : {0u, 2u, 4u}) REQUIRE(same_row(clean, dirty, i));
}
