// d2l modules' backward(d_out): DotProductAttention against PyTorch autograd's gradients on d2l's
// own code (tests/data/goldens), dropout replaying the forward's decisions, and misuse.
#include "support/goldens.hpp"

#include <xattn/eval/reference_grad.hpp>
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
    // same bound as tests/eval/test_goldens.cpp: a few ulp of the case's largest gradient
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

TEST_CASE("nn::additive_attention::backward says it is not available yet") {
  nn::additive_attention<float> attention(3, 4, 5);
  const xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 4}), k = xt::ones<float>({1, 3, 3}),
                              v = xt::ones<float>({1, 3, 2});
  attention.forward(q, k, v);
  CHECK_THROWS_AS(attention.backward(xt::xtensor<float, 3>(xt::zeros<float>({1, 2, 2}))), std::logic_error);
}
