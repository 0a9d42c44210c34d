// Terminals view caller memory in place, in every layout the grammar accepts.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;

TEST_CASE("ref of a rank-3 tensor is one head, viewed in place") {
  xt::xtensor<float, 3> x = xt::zeros<float>({2, 5, 3});
  auto r = ref(x);
  REQUIRE(r.how == form::bsd);
  REQUIRE(r.view.data == x.data());
  REQUIRE(r.view.at.shape == std::array<std::size_t, 4>{2, 1, 5, 3});
  x(1, 4, 2) = 7;
  REQUIRE(r.view(1, 0, 4, 2) == 7);
}

TEST_CASE("ref of a strided view and of a temporary") {
  xt::xtensor<double, 4> x = xt::arange<double>(2 * 3 * 4 * 5).reshape({2, 3, 4, 5});
  auto sub = xt::view(x, xt::all(), xt::range(1, 3), xt::all(), xt::range(0, 5, 2));
  auto r = ref(sub);
  REQUIRE(r.view.at.shape == std::array<std::size_t, 4>{2, 2, 4, 3});
  REQUIRE(r.view(1, 1, 3, 2) == x(1, 2, 3, 4));
  auto t = ref(xt::xtensor<double, 4>(x * 2.0));
  REQUIRE(t.owned != nullptr);
  REQUIRE(t.view(1, 2, 3, 4) == 2 * x(1, 2, 3, 4));
}

TEST_CASE("heads() reads packed (B, S, H*D) as H heads without copying") {
  xt::xtensor<float, 3> x = xt::arange<float>(2 * 3 * 8).reshape({2, 3, 8});
  auto r = heads(x, 4);
  REQUIRE(r.how == form::packed);
  REQUIRE(r.view.data == x.data());
  REQUIRE(r.view.at.shape == std::array<std::size_t, 4>{2, 4, 3, 2});
  REQUIRE(r.view(1, 3, 2, 1) == x(1, 2, 3 * 2 + 1));
  REQUIRE_THROWS_WITH(heads(x, 3), Catch::Contains("not divisible by 3 heads") && Catch::Contains("(2,3,8)"));
}

TEST_CASE("ref over a raw pointer with strides") {
  std::vector<float> buf(2 * 3 * 4 * 5);
  for (std::size_t n = 0; n < buf.size(); ++n) buf[n] = float(n);
  // (B=2, H=3, S=4, D=5) stored as (B, S, H, D)
  auto r = ref(buf.data(), {2, 3, 4, 5}, {60, 5, 15, 1});
  REQUIRE(r.view(1, 2, 3, 4) == buf[60 + 3 * 15 + 2 * 5 + 4]);
}

TEST_CASE("results come back in the layout of the queries") {
  testing::rng g(1);
  const xt::xtensor<float, 3> q = g.tensor<float>({2, 3, 8}), k = g.tensor<float>({2, 5, 8}),
                              v = g.tensor<float>({2, 5, 12});
  auto Q = heads(q, 2), K = heads(k, 2), V = heads(v, 2);
  const xt::xtensor<float, 3> out = eval(softmax(Q * trans(K)) * V);
  REQUIRE(out.shape() == std::array<std::size_t, 3>{2, 3, 12});
  const xt::xtensor<float, 4> w = eval(softmax(Q * trans(K)));
  REQUIRE(w.shape() == std::array<std::size_t, 4>{2, 2, 3, 5});
  // head 1 of the packed output equals attention on head 1's slices
  xt::xtensor<float, 3> q1 = xt::view(q, xt::all(), xt::all(), xt::range(4, 8)),
                        k1 = xt::view(k, xt::all(), xt::all(), xt::range(4, 8)),
                        v1 = xt::view(v, xt::all(), xt::all(), xt::range(6, 12));
  auto Q1 = ref(q1), K1 = ref(k1), V1 = ref(v1);
  const xt::xtensor<float, 3> o1 = eval(softmax(Q1 * trans(K1)) * V1);
  REQUIRE(testing::max_abs_diff(o1, xt::view(out, xt::all(), xt::all(), xt::range(6, 12))) < 1e-6);
  xt::xarray<float> qa = q, ka = k, va = v;
  auto Qa = ref(qa), Ka = ref(ka), Va = ref(va);
  const xt::xarray<float> oa = eval(softmax(Qa * trans(Ka)) * Va);
  REQUIRE(oa.shape() == std::vector<std::size_t>{2, 3, 12});
}
