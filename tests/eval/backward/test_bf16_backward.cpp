// grad of bfloat16 operands: on vdpbf16ps where the build has AVX512-BF16 (the five products on
// bf16, P and dS rounded to bf16, sums and statistics fp32), widened to float otherwise (this file
// is also built at -march=x86-64-v3). Checked against PyTorch's bf16 tolerance for SDPA gradients
// (its goldens: float64 and bf16 eager autograd on the same bf16 values), against the double
// reference under masks, GQA, sinks, dropout and a modifier, and grad<bfloat16>'s rounding.
#include "support/goldens.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <xtensor/xmath.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

using namespace xattn;

namespace {

xt::xtensor<bfloat16, 4> bf16_of(const xt::xarray<double>& x) { return xt::cast<bfloat16>(xt::xtensor<double, 4>(x)); }

xt::xtensor<bfloat16, 4> random_bf16(testing::rng& r, std::array<std::size_t, 4> shape) {
  xt::xtensor<bfloat16, 4> t = xt::xtensor<bfloat16, 4>::from_shape(shape);
  for (auto& x : t) x = bfloat16(r.uniform(-1, 1));
  return t;
}

/// PyTorch's test_transformers rule for a low-precision gradient: atol and rtol are the largest
/// absolute and relative deviations of its own bf16 eager computation from the float64 one (at
/// least its bf16 defaults, 1e-3 and 1.6e-2), and got must be within atol + rtol·|want| of want.
void within_pytorch_bf16_tolerance(const xt::xtensor<float, 4>& got, const xt::xarray<double>& want,
                                   const xt::xarray<double>& eager_bf16, const char* what) {
  REQUIRE(got.size() == want.size());
  double atol = 1e-3, rtol = 1.6e-2, worst = 0;
  for (std::size_t n = 0; n < want.size(); ++n) {
    const double dev = std::abs(want.flat(n) - eager_bf16.flat(n));
    atol = std::max(atol, dev);
    if (want.flat(n) != 0) rtol = std::max(rtol, dev / std::abs(want.flat(n)));
  }
  for (std::size_t n = 0; n < want.size(); ++n)
    worst = std::max(worst, std::abs(double(got.data()[n]) - want.flat(n)) / (atol + rtol * std::abs(want.flat(n))));
  INFO(what << ": worst error in units of PyTorch's tolerance (atol " << atol << ", rtol " << rtol << "): " << worst);
  CHECK(worst <= 1.0);
  if (std::getenv("XATTN_SHOW_TOLERANCE")) WARN(what << ": " << worst << " of PyTorch's tolerance");
}

/// max |got - want| / max |want| (the same shape, else infinite).
double relative_worst(const xt::xtensor<float, 4>& got, const xt::xtensor<double, 4>& want) {
  return testing::max_abs_diff(got, want) / xt::amax(xt::abs(want))();
}

/// Whether every element of r is x's rounded to bf16 once.
bool rounded_from(const xt::xtensor<bfloat16, 4>& r, const xt::xtensor<float, 4>& x) {
  if (r.shape() != x.shape()) return false;
  for (std::size_t n = 0; n < x.size(); ++n)
    if (r.data()[n].bits() != bfloat16(x.data()[n]).bits()) return false;
  return x.size() > 0;
}

// bf16 products round P (for dV) and dS (for dQ, dK) to 8 significant bits: a few 2^-9 of the
// largest gradient; widened, the float computation on the same values.
constexpr double bf16_bound = kernel::has_dpbf16 ? 6e-3 : 2e-5;

}  // namespace

TEST_CASE("bf16 backward: within PyTorch's bf16 tolerance for SDPA gradients (PyTorch goldens)") {
  const auto file = testing::read_golden("torch_bf16_attention.json");
  REQUIRE(file["cases"].size() == 2);
  for (const auto& c : file["cases"]) {
    INFO(c["name"].get<std::string>());
    const auto q = testing::golden_tensor<double>(c["q"]), k = testing::golden_tensor<double>(c["k"]),
               v = testing::golden_tensor<double>(c["v"]), d_out = testing::golden_tensor<double>(c["d_output"]);
    const xt::xtensor<bfloat16, 4> q16 = bf16_of(q), k16 = bf16_of(k), v16 = bf16_of(v), do16 = bf16_of(d_out);
    REQUIRE((xt::xtensor<double, 4>(xt::cast<double>(q16)) == xt::xtensor<double, 4>(q)));  // bf16 values, exactly
    const xt::xtensor<double, 4> q64 = q, k64 = k, v64 = v, do64 = d_out;
    const double scale = 1.0 / std::sqrt(double(q.shape()[3]));
    const bool causal_mask = c["causal"].get<bool>();
    const auto check = [&](const auto& e, const auto& e64) {
      // the float64 goldens (9 digits) are this expression's gradients: the double pass matches them
      const auto f64 = eval_with_lse(e64);
      const auto g64 = grad(e64, f64, do64);
      CHECK(testing::worst_flat(g64.dq, testing::golden_tensor<double>(c["d_q"])) < 1e-7);
      CHECK(testing::worst_flat(g64.dv, testing::golden_tensor<double>(c["d_v"])) < 1e-7);
      const auto f = eval_with_lse(e);
      const auto g = grad(e, f, do16);
      STATIC_REQUIRE(std::is_same_v<std::decay_t<decltype(g.dq)>, xt::xtensor<float, 4>>);
      within_pytorch_bf16_tolerance(g.dq, testing::golden_tensor<double>(c["d_q"]),
                                    testing::golden_tensor<double>(c["d_q_bf16"]), "dQ");
      within_pytorch_bf16_tolerance(g.dk, testing::golden_tensor<double>(c["d_k"]),
                                    testing::golden_tensor<double>(c["d_k_bf16"]), "dK");
      within_pytorch_bf16_tolerance(g.dv, testing::golden_tensor<double>(c["d_v"]),
                                    testing::golden_tensor<double>(c["d_v_bf16"]), "dV");
    };
    auto Q = ref(q16), K = ref(k16), V = ref(v16);
    auto Q64 = ref(q64), K64 = ref(k64), V64 = ref(v64);
    if (causal_mask)
      check(softmax(mask(Q * trans(K) * float(scale), causal())) * V,
            softmax(mask(Q64 * trans(K64) * scale, causal())) * V64);
    else
      check(softmax(Q * trans(K) * float(scale)) * V, softmax(Q64 * trans(K64) * scale) * V64);
  }
}

TEST_CASE("bf16 backward against the double reference: masks, GQA, sinks, dropout, a modifier, odd sizes") {
  testing::rng r(48);
  const auto run = [&](std::array<std::size_t, 4> qs, std::array<std::size_t, 4> ks, std::size_t dv, auto build) {
    const auto q = random_bf16(r, qs), k = random_bf16(r, ks);
    const auto v = random_bf16(r, {ks[0], ks[1], ks[2], dv});
    const xt::xtensor<float, 4> d_out = r.tensor<float>({qs[0], qs[1], qs[2], dv});
    auto Q = ref(q), K = ref(k), V = ref(v);
    const auto e = build(Q, K, V);
    const auto f = eval_with_lse(e);
    const auto g = grad(e, f, d_out);
    const auto want = reference_grad(make_plan(e), xt::xtensor<double, 4>(d_out));
    CHECK(relative_worst(g.dq, want.dq) < bf16_bound);
    CHECK(relative_worst(g.dk, want.dk) < bf16_bound);
    CHECK(relative_worst(g.dv, want.dv) < bf16_bound);
    return g;
  };
  SECTION("no mask: plain tiles, P and dS from the products' epilogues") {
    run({2, 3, 100, 64}, {2, 3, 160, 64}, 64, [](auto Q, auto K, auto V) { return softmax(Q * trans(K) / 8.0f) * V; });
  }
  SECTION("causal, odd head sizes and lengths") {
    run({1, 2, 77, 17}, {1, 2, 77, 17}, 13,
        [](auto Q, auto K, auto V) { return softmax(mask(Q * trans(K) / 4.0f, causal())) * V; });
  }
  SECTION("d2l's lengths with a zero: a fully masked row is uniform") {
    const xt::xtensor<int, 1> lens = {0, 37};
    run({2, 2, 30, 32}, {2, 2, 50, 32}, 24,
        [&](auto Q, auto K, auto V) { return softmax(mask(Q * trans(K) / 6.0f, lengths(lens))) * V; });
  }
  SECTION("grouped queries over a sliding window, with sinks") {
    const xt::xtensor<float, 1> s = {0.5f, -1.0f, 2.0f, 0.0f};
    const auto g = run({1, 4, 90, 64}, {1, 2, 90, 64}, 64, [&](auto Q, auto K, auto V) {
      return softmax(mask(Q * trans(K) / 8.0f, window(40, 0)), sinks(s)) * V;
    });
    CHECK(g.dsinks.size() == 4);
  }
  SECTION("a modifier (softcap) and dropout: the general tiles") {
    run({1, 2, 64, 64}, {1, 2, 96, 64}, 32,
        [](auto Q, auto K, auto V) { return dropout(softmax(softcap(Q * trans(K) / 8.0f, 5.0)), 0.2, 7) * V; });
  }
}

TEST_CASE("grad<bfloat16>: the operands' gradients rounded once from grad's") {
  testing::rng r(49);
  const auto q = random_bf16(r, {1, 2, 40, 32}), k = random_bf16(r, {1, 2, 50, 32}), v = random_bf16(r, {1, 2, 50, 16});
  const xt::xtensor<bfloat16, 4> d_out = random_bf16(r, {1, 2, 40, 16});
  const xt::xtensor<float, 1> s = {1.0f, -1.0f};
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) / 4.0f, causal()), sinks(s)) * V;
  const auto f = eval_with_lse(e);
  const auto g = grad(e, f, d_out);
  const auto g16 = grad<bfloat16>(e, f, d_out);
  STATIC_REQUIRE(std::is_same_v<std::decay_t<decltype(g16.dq)>, xt::xtensor<bfloat16, 4>>);
  STATIC_REQUIRE(std::is_same_v<std::decay_t<decltype(g16.dv)>, xt::xtensor<bfloat16, 4>>);
  STATIC_REQUIRE(std::is_same_v<std::decay_t<decltype(g16.dsinks)>, xt::xtensor<float, 1>>);
  CHECK(rounded_from(g16.dq, g.dq));
  CHECK(rounded_from(g16.dk, g.dk));
  CHECK(rounded_from(g16.dv, g.dv));
  CHECK((g16.dsinks == g.dsinks));
}

TEST_CASE("bf16 backward: the path each build takes") {
  testing::rng r(50);
  const auto q = random_bf16(r, {1, 2, 64, 32}), k = q, v = q;
  const xt::xtensor<float, 4> d_out = r.tensor<float>({1, 2, 64, 32});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(Q * trans(K) / 4.0f) * V;
  const std::string text = explain(e, schedule{}, with_backward).text;
  CHECK((text.find("from dS: pack_strips[bf16_pairs], pv_tile_strips[bf16_pairs]") != std::string::npos) ==
        kernel::has_dpbf16);
  if constexpr (!kernel::has_dpbf16) {  // widened: the float computation on the same values, bit for bit
    const xt::xtensor<float, 4> qf = xt::cast<float>(q);
    auto Qf = ref(qf);
    const auto ef = softmax(Qf * trans(Qf) / 4.0f) * Qf;
    const auto f = eval_with_lse(e);
    const auto g = grad(e, f, d_out), gf = grad(ef, f, d_out);
    CHECK((g.dq == gf.dq));
    CHECK((g.dk == gf.dk));
    CHECK((g.dv == gf.dv));
  }
}
