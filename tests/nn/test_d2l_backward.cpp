// d2l modules' backward(d_out): DotProductAttention and AdditiveAttention (input and parameter
// gradients) against PyTorch autograd on d2l's own code (tests/data/goldens), dropout replaying the
// forward's decisions, and misuse.
#include "support/goldens.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/nn/nn.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <xtensor/xview.hpp>

#include <cmath>

using namespace xattn;

using testing::golden_tensor;
using testing::worst_flat;

TEST_CASE("nn::dot_product_attention::backward matches PyTorch autograd on d2l's DotProductAttention") {
  const auto file = testing::read_golden("d2l_dot_product_attention.json");
  for (const auto& c : file["cases"]) {
    INFO(c["name"].get<std::string>());
    nn::dot_product_attention<double> attention(0.5f);  // eval mode, as the goldens were made
    const xt::xtensor<double, 3> q = golden_tensor<double>(c["queries"]), k = golden_tensor<double>(c["keys"]),
                                 v = golden_tensor<double>(c["values"]), d_out = golden_tensor<double>(c["d_output"]);
    const xt::xarray<long> lens = golden_tensor<long>(c["valid_lens"]);
    const auto y = attention.forward(q, k, v, lens);
    CHECK(worst_flat(y, golden_tensor<double>(c["output"])) < 1e-12);
    const auto g = attention.backward(d_out);
    // same bound as tests/eval/backward/test_goldens.cpp: a few ulp of the case's largest gradient
    CHECK(worst_flat(g.d_queries, golden_tensor<double>(c["d_queries"])) < 1e-11);
    CHECK(worst_flat(g.d_keys, golden_tensor<double>(c["d_keys"])) < 1e-11);
    CHECK(worst_flat(g.d_values, golden_tensor<double>(c["d_values"])) < 1e-11);
  }
}

TEST_CASE("nn::dot_product_attention::backward replays the forward's dropout and differentiates its own inputs") {
  xt::xtensor<double, 3> q = xt::sin(xt::arange<double>(2 * 5 * 4).reshape({2, 5, 4})),
                         k = xt::cos(xt::arange<double>(2 * 7 * 4).reshape({2, 7, 4})),
                         v = xt::sin(xt::arange<double>(2 * 7 * 3).reshape({2, 7, 3}) * 0.3);
  const xt::xtensor<double, 3> d_out = xt::cos(xt::arange<double>(2 * 5 * 3).reshape({2, 5, 3}) * 0.7);
  const xt::xtensor<int, 1> lens{3, 7};
  nn::dot_product_attention<double> attention(0.4f, /*seed*/ 9);
  attention.forward(q, k, v, lens, /*training=*/true);
  const auto g = attention.backward(d_out);
  // the same call written as an expression with the module's first dropout key
  const auto e =
      dropout(softmax(mask(ref(q) * trans(ref(k)) / 2.0, lengths(lens))), 0.4f, nn::call_seed(9, 0)) * ref(v);
  const auto want = reference_grad(make_plan(e), xt::xtensor<double, 4>(xt::view(d_out, xt::all(), xt::newaxis())));
  CHECK(worst_flat(g.d_queries, want.dq) < 1e-12);
  CHECK(worst_flat(g.d_keys, want.dk) < 1e-12);
  CHECK(worst_flat(g.d_values, want.dv) < 1e-12);
  // the module kept copies: changing the caller's tensors after forward changes nothing
  q.fill(0);
  const auto again = attention.backward(d_out);
  CHECK(worst_flat(again.d_queries, want.dq) < 1e-12);
}

TEST_CASE("nn::dot_product_attention::backward misuse") {
  nn::dot_product_attention<float> attention;
  const xt::xtensor<float, 3> d_out = xt::zeros<float>({1, 2, 3});
  CHECK_THROWS_WITH(attention.backward(d_out),
                    Catch::Contains("dot_product_attention.backward(d_out): no forward call"));
  const xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 4}), k = xt::ones<float>({1, 3, 4}),
                              v = xt::ones<float>({1, 3, 3});
  attention.forward(q, k, v);
  const xt::xtensor<float, 3> bad = xt::zeros<float>({1, 2, 4});
  CHECK_THROWS_WITH(attention.backward(bad),
                    Catch::Contains("dot_product_attention.backward") && Catch::Contains("d_out has shape (1,2,4)"));
}

TEMPLATE_TEST_CASE("nn::additive_attention::backward matches PyTorch autograd on d2l's AdditiveAttention", "", float,
                   double) {
  using T = TestType;
  // double: the gradients are sums of O(10) terms computed in double: a few ulp of max(1, the
  // largest gradient); float: single-precision features and tanh (relative 1e-6) through the same
  // sums: 2e-5 of max(1, the largest). (The d2l example's keys are all ones: d_W_k is 0 there.)
  const auto file = testing::read_golden("d2l_additive_attention.json");
  for (const auto& c : file["cases"]) {
    INFO(c["name"].get<std::string>());
    const xt::xtensor<T, 3> q = golden_tensor<T>(c["queries"]), k = golden_tensor<T>(c["keys"]),
                            v = golden_tensor<T>(c["values"]), d_out = golden_tensor<T>(c["d_output"]);
    const xt::xtensor<T, 2> w_q = golden_tensor<T>(c["W_q"]), w_k = golden_tensor<T>(c["W_k"]),
                            w_v = golden_tensor<T>(c["w_v"]);
    const xt::xarray<long> lens = golden_tensor<long>(c["valid_lens"]);
    nn::additive_attention<T> attention(k.shape()[2], q.shape()[2], w_q.shape()[0], 0.1f);
    attention.set_weights(w_q, w_k, w_v);
    const auto y = attention.forward(q, k, v, lens);  // eval mode, as the goldens were made
    const auto want_y = golden_tensor<double>(c["output"]);
    const auto tol = [&](const char* name) {
      const auto g = golden_tensor<double>(c[name]);
      return (std::is_same_v<T, double> ? 1e-12 : 2e-5) * std::max(1.0, xt::amax(xt::abs(g))());
    };
    CHECK(worst_flat(y, want_y) <
          (std::is_same_v<T, double> ? 1e-12 : 1e-5) * std::max(1.0, xt::amax(xt::abs(want_y))()));
    attention.zero_grad();
    const auto g = attention.backward(d_out);
    CHECK(worst_flat(g.d_queries, golden_tensor<double>(c["d_queries"])) < tol("d_queries"));
    CHECK(worst_flat(g.d_keys, golden_tensor<double>(c["d_keys"])) < tol("d_keys"));
    CHECK(worst_flat(g.d_values, golden_tensor<double>(c["d_values"])) < tol("d_values"));
    CHECK(worst_flat(attention.w_q().weight_grad(), golden_tensor<double>(c["d_W_q"])) < tol("d_W_q"));
    CHECK(worst_flat(attention.w_k().weight_grad(), golden_tensor<double>(c["d_W_k"])) < tol("d_W_k"));
    CHECK(worst_flat(attention.w_v().weight_grad(), golden_tensor<double>(c["d_w_v"])) < tol("d_w_v"));
    // gradients accumulate until zero_grad(), as PyTorch's .grad
    attention.backward(d_out);
    CHECK(worst_flat(attention.w_v().weight_grad(), 2.0 * golden_tensor<double>(c["d_w_v"])) < 2 * tol("d_w_v"));
    attention.zero_grad();
    CHECK(xt::amax(xt::abs(attention.w_q().weight_grad()))() == 0);
  }
}
