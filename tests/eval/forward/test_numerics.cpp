// Fully masked rows under both semantics, huge logits, and no NaN from any mask.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using testing::max_abs_diff;

namespace {

bool all_finite(const auto& x) {
  for (auto v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

TEST_CASE("fully masked rows: d2l's -1e6 fill gives the mean of V, masked_rows::zero gives 0") {
  testing::rng r(1);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 3, 4}), k = r.tensor<float>({2, 70, 4}),
                              v = r.tensor<float>({2, 70, 5});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<int, 2> lens = {{0, 3, 70}, {0, 0, 1}};
  for (std::size_t bk : {16u, 128u}) {
    const xt::xtensor<float, 3> uni = eval(softmax(mask(Q * trans(K), lengths(lens))) * V, {2, bk, 1});
    const xt::xtensor<float, 3> zero =
        eval(softmax(mask(Q * trans(K), lengths(lens, masked_rows::zero))) * V, {2, bk, 1});
    REQUIRE(all_finite(uni));
    REQUIRE(all_finite(zero));
    for (std::size_t d = 0; d < 5; ++d) {
      double mean = 0;
      for (std::size_t j = 0; j < 70; ++j) mean += v(0, j, d) / 70.0;
      REQUIRE(uni(0, 0, d) == Approx(mean).margin(1e-5));
      REQUIRE(zero(0, 0, d) == 0.0f);
      REQUIRE(zero(1, 0, d) == 0.0f);
      REQUIRE(zero(1, 1, d) == 0.0f);
      REQUIRE(zero(1, 2, d) == Approx(v(1, 0, d)).margin(1e-6));
    }
    // weights: uniform row vs zero row
    const auto wu = eval(softmax(mask(Q * trans(K), lengths(lens))));
    const auto wz = eval(softmax(mask(Q * trans(K), lengths(lens, masked_rows::zero))));
    REQUIRE(wu(0, 0, 69) == Approx(1.0 / 70));
    REQUIRE(wz(0, 0, 69) == 0.0f);
  }
}

TEST_CASE("fully masked rows from causal offsets, windows and bool masks are zero, never NaN") {
  testing::rng r(2);
  const xt::xtensor<double, 4> q = r.tensor<double>({1, 2, 6, 3}), k = r.tensor<double>({1, 2, 4, 3}),
                               v = r.tensor<double>({1, 2, 4, 2});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<double, 4> a =
      eval(softmax(mask(Q * trans(K), causal(align::bottom_right))) * V);  // rows 0, 1 see nothing
  const xt::xtensor<bool, 2> none = xt::zeros<bool>({6, 4});
  const xt::xtensor<double, 4> b = eval(softmax(mask(Q * trans(K), bool_mask(none))) * V);
  REQUIRE(all_finite(a));
  REQUIRE(all_finite(b));
  REQUIRE(testing::max_abs_diff(xt::view(a, 0, xt::all(), xt::range(0, 2)), xt::zeros<double>({2, 2, 2})) == 0);
  REQUIRE(testing::max_abs_diff(b, xt::zeros<double>({1, 2, 6, 2})) == 0);
  REQUIRE(max_abs_diff(reference(softmax(mask(Q * trans(K), causal(align::bottom_right))) * V).output, a) < 1e-12);
}

TEST_CASE("logits of +-1e4 and -inf biases do not overflow") {
  testing::rng r(3);
  for (double big : {1e4, -1e4, 1e30}) {
    const xt::xtensor<float, 3> q = r.tensor<float>({1, 5, 8}) * float(big), k = r.tensor<float>({1, 40, 8}),
                                v = r.tensor<float>({1, 40, 3});
    auto Q = ref(q), K = ref(k), V = ref(v);
    const auto e = softmax(mask(Q * trans(K), causal())) * V;
    const xt::xtensor<float, 3> out = eval(e, {2, 16, 1});
    REQUIRE(all_finite(out));
    if (std::abs(big) < 1e5) REQUIRE(max_abs_diff(xt::view(reference(e).output, xt::all(), 0), out) < 1e-3);
  }
  // a float mask holding -inf on a whole row, plus softcap before it
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 3, 4}), k = r.tensor<float>({1, 6, 4}),
                              v = r.tensor<float>({1, 6, 2});
  xt::xtensor<float, 2> m = xt::zeros<float>({3, 6});
  xt::view(m, 1, xt::all()) = -std::numeric_limits<float>::infinity();
  m(2, 0) = -std::numeric_limits<float>::infinity();
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(softcap(Q * trans(K), 0.5) + bias(m)) * V;
  const xt::xtensor<float, 3> out = eval(e);
  REQUIRE(all_finite(out));
  REQUIRE(out(0, 1, 0) == 0.0f);
  REQUIRE(max_abs_diff(xt::view(reference(e).output, xt::all(), 0), out) < 1e-6);
}
