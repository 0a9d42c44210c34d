// multihead_attention::backward against PyTorch autograd on torch.nn.MultiheadAttention (float64
// goldens in tests/data/goldens): input gradients and all eight parameter gradients, without a
// mask, with a causal and with a random bool mask; dropout replays the forward's decisions (the
// reference backward of the same expression); gradients accumulate until zero_grad; misuse.
#include "support/goldens.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/nn/nn.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace xattn;
using testing::golden_tensor;
using testing::worst_flat;

TEMPLATE_TEST_CASE("nn::multihead_attention::backward matches PyTorch autograd on torch.nn.MultiheadAttention", "",
                   float, double) {
  using T = TestType;
  const auto file = testing::read_golden("torch_multihead_attention.json");
  for (const auto& c : file["cases"]) {
    INFO(c["name"].get<std::string>());
    const xt::xarray<T> q = golden_tensor<T>(c["query"]), k = golden_tensor<T>(c["key"]),
                        v = golden_tensor<T>(c["value"]), d_out = golden_tensor<T>(c["d_output"]);
    const std::size_t embed = q.shape()[2];
    nn::multihead_attention<T> mha({.num_heads = c["num_heads"].get<std::size_t>(),
                                    .query_size = embed,
                                    .key_size = k.shape()[2],
                                    .value_size = v.shape()[2],
                                    .use_query_bias = true,
                                    .use_key_bias = true,
                                    .use_value_bias = true,
                                    .use_output_bias = true});
    const char* names[] = {"q", "k", "v", "o"};
    nn::linear<T>* layers[] = {&mha.query_proj(), &mha.key_proj(), &mha.value_proj(), &mha.output_proj()};
    for (int n = 0; n < 4; ++n) {
      layers[n]->set_weight(golden_tensor<T>(c[std::string("W_") + names[n]]));
      layers[n]->set_bias(golden_tensor<T>(c[std::string("b_") + names[n]]));
    }
    // double: sums of O(10) products of O(1) terms in double, a few ulp of max(1, largest);
    // float: single-precision projections, scores and exponentials: 2e-5 of max(1, largest)
    const auto tol = [&](const std::string& name) {
      const auto g = golden_tensor<double>(c[name]);
      return (std::is_same_v<T, double> ? 1e-12 : 2e-5) * std::max(1.0, xt::amax(xt::abs(g))());
    };
    xt::xarray<T> y;
    if (c.contains("mask")) {
      const xt::xarray<bool> mask = xt::cast<bool>(golden_tensor<int>(c["mask"]));
      y = mha.forward(q, k, v, mask);
    } else {
      y = mha.forward(q, k, v);
    }
    CHECK(worst_flat(y, golden_tensor<double>(c["output"])) < tol("output"));
    mha.zero_grad();
    const auto g = mha.backward(d_out);
    CHECK(worst_flat(g.d_query, golden_tensor<double>(c["d_query"])) < tol("d_query"));
    CHECK(worst_flat(g.d_key, golden_tensor<double>(c["d_key"])) < tol("d_key"));
    CHECK(worst_flat(g.d_value, golden_tensor<double>(c["d_value"])) < tol("d_value"));
    for (int n = 0; n < 4; ++n) {
      const std::string w = std::string("d_W_") + names[n], b = std::string("d_b_") + names[n];
      INFO(w);
      CHECK(worst_flat(layers[n]->weight_grad(), golden_tensor<double>(c[w])) < tol(w));
      CHECK(worst_flat(layers[n]->bias_grad(), golden_tensor<double>(c[b])) < tol(b));
    }
    mha.backward(d_out);  // accumulates, as PyTorch's .grad
    CHECK(worst_flat(mha.output_proj().weight_grad(), 2.0 * golden_tensor<double>(c["d_W_o"])) < 2 * tol("d_W_o"));
  }
}

TEST_CASE("nn::multihead_attention::backward replays the forward's dropout; misuse") {
  nn::multihead_attention<double> mha({.num_heads = 2, .query_size = 8, .dropout_p = 0.3f, .seed = 4});
  const xt::xtensor<double, 2> q = xt::sin(xt::arange<double>(5 * 8).reshape({5, 8})),
                               kv = xt::cos(xt::arange<double>(6 * 8).reshape({6, 8}));
  const xt::xtensor<double, 2> d_out = xt::cos(xt::arange<double>(5 * 8).reshape({5, 8}) * 0.3);
  CHECK_THROWS_WITH(mha.backward(d_out), Catch::Contains("multihead_attention.backward(d_out): no forward call"));
  mha.forward(q, kv, kv, nn::none, {.key = 11});
  const auto g = mha.backward(d_out);
  // the attention part written out: projections by hand, then reference_grad of the same expression
  auto proj = [](const nn::linear<double>& l, const xt::xtensor<double, 2>& x) {
    xt::xtensor<double, 3> y = xt::xtensor<double, 3>::from_shape({1, x.shape()[0], l.out_features()});
    l.apply(x.data(), x.shape()[0], x.shape()[1], y.data(), l.out_features());
    return y;
  };
  const auto qp = proj(mha.query_proj(), q), kp = proj(mha.key_proj(), kv), vp = proj(mha.value_proj(), kv);
  const auto e = dropout(softmax(heads(qp, 2) * trans(heads(kp, 2)) / 2.0), 0.3f, 11) * heads(vp, 2);
  xt::xtensor<double, 2> d_heads = xt::xtensor<double, 2>::from_shape({5, 8});  // d_out · W_o
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t c = 0; c < 8; ++c) {
      double s = 0;
      for (std::size_t o = 0; o < 8; ++o) s += d_out(i, o) * mha.output_proj().weight()(o, c);
      d_heads(i, c) = s;
    }
  xt::xtensor<double, 4> d4 = xt::xtensor<double, 4>::from_shape({1, 2, 5, 4});
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < 5; ++i)
      for (std::size_t d = 0; d < 4; ++d) d4(0, h, i, d) = d_heads(i, h * 4 + d);
  const auto want = reference_grad(make_plan(e), d4);
  // d_query = dqp · W_q with dqp the packed (5, 2·4) gradient
  double worst = 0;
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t c = 0; c < 8; ++c) {
      double s = 0;
      for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t d = 0; d < 4; ++d) s += want.dq(0, h, i, d) * mha.query_proj().weight()(h * 4 + d, c);
      worst = std::max(worst, std::abs(s - g.d_query(i, c)));
    }
  CHECK(worst < 1e-12);
  const xt::xtensor<double, 2> bad = xt::zeros<double>({5, 7});
  CHECK_THROWS_WITH(mha.backward(bad),
                    Catch::Contains("d_out has shape (5,7) but the last forward's output has shape (5,8)"));
}
