// The user policies docs/policies.md quotes: the kernel path each capability set selects, and
// each policy in the fused pass against the reference evaluator and a closed form.
#include "catalogue/band_mask.hpp"
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/laplace_kernel.hpp"
#include "catalogue/prefix_lm_mask.hpp"
#include "catalogue/relative_bias.hpp"
#include "catalogue/vector_sum.hpp"
#include "catalogue/weighted_dot.hpp"
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using testing::max_abs_diff;

namespace {
xt::xtensor<float, 3> x = xt::ones<float>({1, 2, 2});
using term = decltype(ref(x));
template <class P>
constexpr std::string_view path() {
  return path_name_v<policy_base<P, term, term>>;
}
}  // namespace

TEST_CASE("policies: the capabilities of each documented policy select its path") {
  STATIC_REQUIRE(path<dsl::cosine_with_temperature>() == "recorded");
  STATIC_REQUIRE(path<dsl::vector_sum>() == "dot_features");
  STATIC_REQUIRE(path<dsl::laplace_kernel>() == "pair_features");
  STATIC_REQUIRE(path<dsl::weighted_dot>() == "dot_features");
  STATIC_REQUIRE(path<dot>() == "dot_identity");
  STATIC_REQUIRE(path<scaled_dot>() == "dot_features");
  STATIC_REQUIRE(path<additive>() == "pair_features");
  STATIC_REQUIRE(path<gaussian>() == "dot_features");
}

TEST_CASE("policies: laplace_kernel (combine) -- fused equals reference and the closed form") {
  testing::rng r(1);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 9, 5}), k = r.tensor<float>({2, 40, 5}),
                              v = r.tensor<float>({2, 40, 3});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(score(dsl::laplace_kernel{0.5}, Q, K)) * V;
  REQUIRE(max_abs_diff(eval(e, {4, 16, 2}), xt::view(reference(e).output, xt::all(), 0)) < 1e-6);
  const auto s = eval(score(dsl::laplace_kernel{0.5}, Q, K));
  double want = 0;
  for (std::size_t d = 0; d < 5; ++d) want -= std::abs(double(q(1, 2, d)) - k(1, 7, d)) / 0.5;
  REQUIRE(s(1, 2, 7) == Approx(want).epsilon(1e-6));
  REQUIRE_THROWS_WITH(eval(softmax(score(dsl::laplace_kernel{0.0}, Q, K)) * V),
                      Catch::Contains("bandwidth must be > 0"));
}

TEST_CASE("policies: weighted_dot (separable, learnable weights) -- fused equals reference and the closed form") {
  testing::rng r(2);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 2, 9, 4}), k = r.tensor<float>({2, 2, 40, 4}),
                              v = r.tensor<float>({2, 2, 40, 3});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const dsl::weighted_dot p{{0.5, -1.0, 2.0, 0.25}};
  const auto e = softmax(score(p, Q, K)) * V;
  REQUIRE(max_abs_diff(eval(e, {4, 16, 2}), reference(e).output) < 1e-6);
  const auto s = eval(score(p, Q, K));
  double want = 0;
  for (std::size_t d = 0; d < 4; ++d) want += p.w[d].value * q(1, 0, 2, d) * k(1, 0, 7, d) / 2;
  REQUIRE(s(1, 0, 2, 7) == Approx(want).epsilon(1e-6).margin(1e-6));
  REQUIRE_THROWS_WITH(eval(softmax(score(dsl::weighted_dot{{1.0}}, Q, K)) * V),
                      Catch::Contains("weighted_dot: 1 weights for queries of size 4 and keys of size 4"));
}

TEST_CASE("policies: prefix_lm_mask -- classify and row_span agree with visible") {
  const auto m = bound(dsl::prefix_lm_mask{{0, 3, 11}}, [] {
    problem pr;
    pr.batch = 3;
    pr.q_len = 9;
    pr.kv_len = 11;
    return pr;
  }());
  for (std::size_t b = 0; b < 3; ++b)
    for (std::size_t bi : {1u, 2u, 5u})
      for (std::size_t bj : {1u, 3u, 8u})
        for (std::size_t i0 = 0; i0 < 9; i0 += bi)
          for (std::size_t j0 = 0; j0 < 11; j0 += bj) {
            const std::size_t i1 = std::min<std::size_t>(9, i0 + bi), j1 = std::min<std::size_t>(11, j0 + bj);
            std::size_t seen = 0;
            for (std::size_t i = i0; i < i1; ++i)
              for (std::size_t j = j0; j < j1; ++j) seen += m.visible(b, 0, i, j);
            const block c = m.classify(b, 0, i0, i1, j0, j1);
            if (c == block::hidden) REQUIRE(seen == 0);
            if (c == block::visible) REQUIRE(seen == (i1 - i0) * (j1 - j0));
          }
  for (std::size_t b = 0; b < 3; ++b)  // row_span is exactly the visible set
    for (std::size_t i = 0; i < 9; ++i) {
      const auto [first, last] = m.row_span(b, 0, i);
      for (std::size_t j = 0; j < 11; ++j)
        REQUIRE(m.visible(b, 0, i, j) == (std::int64_t(j) >= first && std::int64_t(j) < last));
    }
}

TEST_CASE("policies: prefix_lm_mask in the fused pass, excluding and with d2l's fill") {
  testing::rng r(2);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 70, 8}), k = r.tensor<float>({2, 70, 8}),
                              v = r.tensor<float>({2, 70, 4});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const dsl::prefix_lm_mask m{{20, 0}};
  const auto same = predicate(
      [](std::size_t b, std::size_t, std::size_t i, std::size_t j) { return j < (b == 0 ? 20u : 0u) || j <= i; });
  const auto want = eval(softmax(mask(Q * trans(K), same)) * V);
  for (std::size_t bk : {8u, 16u, 128u})
    REQUIRE(max_abs_diff(eval(softmax(mask(Q * trans(K), m)) * V, {8, bk, 2}), want) < 1e-6);
  // with a mask without row_span next to it, partial blocks take the element-by-element route
  const auto no_span = predicate([](std::size_t, std::size_t, std::size_t, std::size_t) { return true; });
  REQUIRE(max_abs_diff(eval(softmax(mask(mask(Q * trans(K), m), no_span)) * V, {8, 16, 2}), want) < 1e-6);
  const auto e = softmax(mask(Q * trans(K), dsl::prefix_lm_mask{{20, 0}, -1e6})) * V;
  REQUIRE(max_abs_diff(eval(e, {8, 16, 1}), xt::view(reference(e).output, xt::all(), 0)) < 1e-6);
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), dsl::prefix_lm_mask{{1}})) * V),
                      Catch::Contains("1 prefixes for a batch of 2"));
}

TEST_CASE("policies: relative_bias (operator, apply_row, bind) equals the same bias as a tensor") {
  testing::rng r(3);
  const std::size_t H = 3, S = 21;
  const xt::xtensor<float, 4> q = r.tensor<float>({2, H, S, 8}), k = r.tensor<float>({2, H, S, 8}),
                              v = r.tensor<float>({2, H, S, 4});
  auto Q = ref(q), K = ref(k), V = ref(v);
  dsl::relative_bias rb{{}, 4};
  for (std::size_t n = 0; n < H * 9; ++n) rb.table.push_back(r.uniform(-2, 2));
  xt::xtensor<float, 3> t = xt::xtensor<float, 3>::from_shape({H, S, S});  // (H, Sq, Skv) broadcasts over the batch
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t i = 0; i < S; ++i)
      for (std::size_t j = 0; j < S; ++j) t(h, i, j) = float(rb(0.0, 0, h, i, j));
  const auto want = eval(softmax(mask(Q * trans(K) + bias(t), causal())) * V);
  REQUIRE(max_abs_diff(eval(softmax(mask(modify(Q * trans(K), rb), causal())) * V, {5, 8, 2}), want) < 1e-6);
  // apply_row equals operator() element by element
  std::vector<float> row(S, 1.0f);
  rb.apply_row(row.data(), S - 3, 0, 2, 7, 3);
  for (std::size_t c = 0; c < S - 3; ++c) REQUIRE(row[c] == rb(1.0f, 0, 2, 7, 3 + c));
  dsl::relative_bias bad{{1.0, 2.0}, 4};
  REQUIRE_THROWS_WITH(eval(softmax(modify(Q * trans(K), bad)) * V), Catch::Contains("need 3 heads x 9"));
}

TEST_CASE("policies: the catalogue's quoted policies run fused against the reference") {
  testing::rng r(4);
  const xt::xtensor<double, 3> q = r.tensor<double>({1, 30, 6}), k = r.tensor<double>({1, 30, 6}),
                               v = r.tensor<double>({1, 30, 2});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto a = softmax(mask(score(dsl::cosine_with_temperature{0.5}, Q, K), dsl::band_mask{2})) * V;
  REQUIRE(max_abs_diff(eval(a, {4, 8, 1}), xt::view(reference(a).output, xt::all(), 0)) < 1e-12);
  const auto b = softmax(score(dsl::vector_sum{}, Q, K)) * V;
  REQUIRE(max_abs_diff(eval(b, {4, 8, 1}), xt::view(reference(b).output, xt::all(), 0)) < 1e-12);
}
