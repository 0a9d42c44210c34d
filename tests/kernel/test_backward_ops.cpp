// The backward's tile operations against plain loops: pv_tile_transposed (dV += Pᵀ·dO, dK += dSᵀ·Q),
// the tile products restricted to the keys a mask keeps,
// probs_row (P from a saved log-sum-exp, exact for rows of large fills), softmax_grad_row, the two
// fused into the score products' epilogues (probs_epilogue, softmax_grad_epilogue), Δ = rowsum(dO ∘
// O) (dot_row), and a score row's terms (add_terms_row) and their gradients (accumulate_row).
#include "support/bitwise.hpp"
#include "support/random.hpp"

#include <xattn/kernel/aligned.hpp>
#include <xattn/kernel/tile_ops.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace xattn;
using xattn::simd::padded;

TEMPLATE_TEST_CASE("pv_tile_transposed accumulates Pᵀ V into O", "[kernel]", float, double) {
  using T = TestType;
  testing::rng r(12);
  for (auto [rows, keys, dv] :
       {std::tuple{1u, 1u, 1u}, {5u, 9u, 3u}, {13u, 64u, 70u}, {2u, 7u, 200u}, {128u, 120u, 64u}}) {
    const std::size_t dvp = padded<T>(dv), ldp = rows + 3;  // p is keys x rows, ldp apart
    const auto p = r.tensor<T>({keys, ldp}), o0 = r.tensor<T>({rows, dvp});
    xt::xarray<T> v(std::vector<std::size_t>{keys, dvp}, T(0));
    for (std::size_t j = 0; j < keys; ++j)
      for (std::size_t d = 0; d < dv; ++d) v(j, d) = T(r.uniform(-1, 1));
    xt::xarray<T> o = o0;
    kernel::pv_tile_transposed(p.data(), ldp, rows, v.data(), dvp, keys, o.data(), dvp, dvp);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t d = 0; d < dv; ++d) {
        double want = o0(i, d);
        for (std::size_t j = 0; j < keys; ++j) want += double(p(j, i)) * double(v(j, d));
        REQUIRE(o(i, d) == Approx(want).margin(1e-4));
      }
  }
}

// A causal diagonal tile: row i keeps keys [0, i + 1) (and a dead row keeps none); weights are 0
// elsewhere. With ranges, the products skip the register blocks only excluded keys reach and must
// give the same bits as without; skipped blocks of S are 0.
TEMPLATE_TEST_CASE("tile products restricted to ranges skip excluded keys, same bits", "[kernel]", float, double) {
  using T = TestType;
  testing::rng r(15);
  for (const auto& sizes : {std::pair{40u, 13u}, {144u, 64u}, {21u, 130u}}) {
    const std::size_t rows = sizes.first, n = sizes.second;  // not bindings: lambdas capture them
    const std::size_t cols = rows, colsp = padded<T>(cols), lds = colsp + 3, np = padded<T>(n);
    std::vector<std::size_t> lo(rows, 0), hi(rows);
    for (std::size_t i = 0; i < rows; ++i) hi[i] = i == 3 ? 0 : i + 1;
    const auto row_range = [&](std::size_t i0, std::size_t R) {
      std::size_t a = std::size_t(-1), b = 0;
      for (std::size_t i = i0; i < i0 + R; ++i)
        if (lo[i] < hi[i]) a = std::min(a, lo[i]), b = std::max(b, hi[i]);
      return a < b ? std::pair{a, b} : std::pair<std::size_t, std::size_t>{0, 0};
    };
    const auto key_range = [&](std::size_t k, std::size_t R) {
      std::size_t a = std::size_t(-1), b = 0;
      for (std::size_t i = 0; i < rows; ++i)
        if (lo[i] < k + R && k < hi[i]) a = std::min(a, i), b = i + 1;
      return a < b ? std::pair{a, b} : std::pair<std::size_t, std::size_t>{0, 0};
    };
    const auto q = r.tensor<T>({rows, np}), k = r.tensor<T>({cols, np});
    std::vector<T> kt(kernel::packed_kt_size<T>(cols, n)), s_all(rows * lds, T(-7)), s_cut(rows * lds, T(-7));
    kernel::pack_kt([&](std::size_t c) { return &k(c, 0); }, cols, n, 1, kt.data());
    kernel::qk_tile(q.data(), np, rows, kt.data(), n, colsp, s_all.data(), lds);
    kernel::qk_tile(q.data(), np, rows, kt.data(), n, colsp, s_cut.data(), lds, row_range);
    std::size_t skipped = 0;
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = 0; c < colsp; ++c) {
        const T got = s_cut[i * lds + c];
        if (c >= lo[i] && c < hi[i]) REQUIRE(got == s_all[i * lds + c]);
        if (got != s_all[i * lds + c]) {
          REQUIRE(got == T(0));
          ++skipped;
        }
      }
    REQUIRE(skipped > 0);
    // P: the scores where kept, 0 elsewhere; dQ-like (pv_tile) and dK-like (pv_tile_transposed)
    std::vector<T> p(rows * lds, T(0));
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = lo[i]; c < hi[i]; ++c) p[i * lds + c] = s_all[i * lds + c];
    const auto o0 = r.tensor<T>({rows, np});
    xt::xarray<T> o_all = o0, o_cut = o0;
    kernel::pv_tile(p.data(), lds, rows, k.data(), np, cols, o_all.data(), np, np);
    kernel::pv_tile(p.data(), lds, rows, k.data(), np, cols, o_cut.data(), np, np, row_range);
    REQUIRE(testing::bitwise_equal(o_cut, o_all));
    xt::xarray<T> t_all = o0, t_cut = o0;  // output rows are keys; p read transposed
    kernel::pv_tile_transposed(p.data(), lds, cols, q.data(), np, rows, t_all.data(), np, np);
    kernel::pv_tile_transposed(p.data(), lds, cols, q.data(), np, rows, t_cut.data(), np, np, key_range);
    REQUIRE(testing::bitwise_equal(t_cut, t_all));
    for (std::size_t c = 0; c < cols; ++c) {  // and they are the sums (t_all is not left untouched)
      double want = o0(c, 0);
      for (std::size_t i = 0; i < rows; ++i) want += double(p[i * lds + c]) * double(q(i, 0));
      REQUIRE(t_cut(c, 0) == Approx(want).margin(1e-3));
    }
  }
}

TEMPLATE_TEST_CASE("probs_row: e^(s - shift - rel), -inf gives 0, large fills resolved", "[kernel]", float, double) {
  using T = TestType;
  const T ninf = -std::numeric_limits<T>::infinity();
  const std::size_t n = padded<T>(21);
  std::vector<T> s(n, ninf);
  double lse_sum = 0;
  for (std::size_t j = 0; j < 21; ++j) s[j] = T(std::sin(double(j)) * 3), lse_sum += std::exp(double(s[j]));
  const double lse = std::log(lse_sum);
  std::vector<T> p = s;
  const T total = kernel::probs_row(p.data(), n, T(lse), T(0));
  for (std::size_t j = 0; j < n; ++j)
    REQUIRE(p[j] ==
            Approx(j < 21 ? std::exp(double(s[j]) - lse) : 0.0).margin(std::is_same_v<T, float> ? 2e-6 : 1e-14));
  REQUIRE(total == Approx(1.0).epsilon(1e-5));
  // a row of d2l's fills: shift = the max (-1e6), rel = ln(count): uniform, even in float
  std::vector<T> f(n, ninf);
  std::fill(f.begin(), f.begin() + 21, T(-1e6));
  REQUIRE(kernel::probs_row(f.data(), n, T(-1e6), T(std::log(21.0))) == Approx(1.0).epsilon(1e-6));
  for (std::size_t j = 0; j < 21; ++j) REQUIRE(f[j] == Approx(1.0 / 21).epsilon(1e-6));
}

TEMPLATE_TEST_CASE("softmax_grad_row: c · p · (dp - delta)", "[kernel]", float, double) {
  using T = TestType;
  testing::rng r(13);
  const std::size_t n = padded<T>(37);
  std::vector<T> p(n), dp(n);
  for (std::size_t j = 0; j < n; ++j) p[j] = T(r.uniform(0, 1)), dp[j] = T(r.uniform(-2, 2));
  const std::vector<T> dp0 = dp;
  kernel::softmax_grad_row(p.data(), dp.data(), n, T(0.3), T(0.125));
  for (std::size_t j = 0; j < n; ++j)
    REQUIRE(dp[j] == Approx(0.125 * double(p[j]) * (double(dp0[j]) - 0.3)).margin(1e-6));
}

// The plain tiles' fused path: P and dS computed in qk_tile's epilogue, on the products' registers.
// P against the exact e^(c·q·k - lse) in double and against the passes it replaces (qk_tile, then
// scale_row and probs_row); dS bitwise against softmax_grad_row on the same P and dP. Shapes cover
// whole strips and a last strip one batch wide at a time (cols 80: 64 + 16 floats with AVX-512).
TEMPLATE_TEST_CASE("qk_tile's epilogues: the backward's P and dS on the products' registers", "[kernel]", float,
                   double) {
  using T = TestType;
  constexpr std::size_t w = simd::width<T>;
  testing::rng r(16);
  const double tol = std::is_same_v<T, float> ? 4e-6 : 1e-14;
  for (auto [rows, n, cols] : {std::tuple{40u, 13u, 48u}, {96u, 64u, 192u}, {7u, 128u, 80u}, {13u, 5u, 32u}}) {
    const std::size_t colsp = padded<T>(cols), lds = colsp + w, np = padded<T>(n);
    const T scale = T(0.3);
    const auto q = r.tensor<T>({rows, np}), k = r.tensor<T>({cols, np}), d_o = r.tensor<T>({rows, np}),
               v = r.tensor<T>({cols, np});
    std::vector<T> kt(kernel::packed_kt_size<T>(cols, n)), vt(kernel::packed_kt_size<T>(cols, n));
    kernel::pack_kt([&](std::size_t c) { return &k(c, 0); }, cols, n, 1, kt.data());
    kernel::pack_kt([&](std::size_t c) { return &v(c, 0); }, cols, n, 1, vt.data());
    // each row's log-sum-exp in double, and the exact probabilities
    std::vector<double> lse(rows), exact(rows * cols);
    for (std::size_t i = 0; i < rows; ++i) {
      double m = -INFINITY, l = 0;
      for (std::size_t c = 0; c < cols; ++c) {
        double x = 0;
        for (std::size_t d = 0; d < n; ++d) x += double(q(i, d)) * double(k(c, d));
        exact[i * cols + c] = double(scale) * x, m = std::max(m, double(scale) * x);
      }
      for (std::size_t c = 0; c < cols; ++c) l += std::exp(exact[i * cols + c] - m);
      lse[i] = m + std::log(l);
      for (std::size_t c = 0; c < cols; ++c) exact[i * cols + c] = std::exp(exact[i * cols + c] - lse[i]);
    }
    // the passes the epilogue replaces
    std::vector<T> p_ref(rows * lds, T(-3)), p(rows * lds, T(-3)), t(rows);
    kernel::qk_tile(q.data(), np, rows, kt.data(), n, colsp, p_ref.data(), lds);
    for (std::size_t i = 0; i < rows; ++i) {
      kernel::scale_row(p_ref.data() + i * lds, colsp, scale);
      kernel::probs_row(p_ref.data() + i * lds, colsp, T(lse[i]), T(0));
      t[i] = T(lse[i]) * T(kernel::log2e);
    }
    kernel::aligned_vector<simd::batch<T>> sums(rows, simd::batch<T>(T(0)));
    kernel::qk_tile(q.data(), np, rows, kt.data(), n, colsp, p.data(), lds, kernel::every_column{},
                    kernel::probs_epilogue<T>{t.data(), T(double(scale) * kernel::log2e), sums.data()});
    for (std::size_t i = 0; i < rows; ++i) {
      double sum = 0;
      for (std::size_t c = 0; c < cols; ++c) {
        const T got = p[i * lds + c];
        REQUIRE(got == Approx(exact[i * cols + c]).epsilon(tol).margin(tol / 8));
        REQUIRE(got == Approx(double(p_ref[i * lds + c])).epsilon(2 * tol).margin(tol / 4));
        sum += double(got);
      }
      REQUIRE(double(simd::hsum(sums[i])) == Approx(sum).epsilon(tol));
      REQUIRE(sum == Approx(1.0).epsilon(cols * tol));
    }
    // dS = c · P · (dP - delta): the epilogue's bits are softmax_grad_row's on the same P and dP
    std::vector<T> ds_ref(rows * lds, T(-3)), ds(rows * lds, T(-3)), delta(rows);
    for (std::size_t i = 0; i < rows; ++i) delta[i] = T(r.uniform(-1, 1));
    kernel::qk_tile(d_o.data(), np, rows, vt.data(), n, colsp, ds_ref.data(), lds);
    for (std::size_t i = 0; i < rows; ++i)
      kernel::softmax_grad_row(p.data() + i * lds, ds_ref.data() + i * lds, colsp, delta[i], scale);
    kernel::qk_tile(d_o.data(), np, rows, vt.data(), n, colsp, ds.data(), lds, kernel::every_column{},
                    kernel::softmax_grad_epilogue<T>{delta.data(), scale, p.data() - ds.data()});
    REQUIRE(testing::bitwise_equal(ds, ds_ref));
  }
}

TEMPLATE_TEST_CASE("dot_row: Δ of a row, contiguous or strided, a batch at a time or not", "[kernel]", float, double) {
  using T = TestType;
  testing::rng r(17);
  for (std::size_t n : {1u, 7u, 16u, 64u, 131u}) {
    const auto a = r.tensor<T>({2 * n}), b = r.tensor<T>({2 * n});
    double want = 0, want_strided = 0;
    for (std::size_t d = 0; d < n; ++d)
      want += double(a(d)) * double(b(d)), want_strided += double(a(2 * d)) * double(b(2 * d + 1));
    const double tol = (std::is_same_v<T, float> ? 1e-6 : 1e-15) * double(n);
    REQUIRE(kernel::dot_row<T>(a.data(), 1, b.data(), 1, n) == Approx(want).margin(tol));
    REQUIRE(kernel::dot_row<T>(a.data(), 2, b.data() + 1, 2, n) == Approx(want_strided).margin(tol));
    std::vector<float> af(n);  // other element types: widened to T one by one
    for (std::size_t d = 0; d < n; ++d) af[d] = float(a(d));
    double want_f = 0;
    for (std::size_t d = 0; d < n; ++d) want_f += double(af[d]) * double(b(d));
    REQUIRE(kernel::dot_row<T>(af.data(), 1, b.data(), 1, n) == Approx(want_f).margin(tol));
    std::vector<bfloat16> a16(n);  // 16-bit rows: widened in registers (float), or one by one
    for (std::size_t d = 0; d < n; ++d) a16[d] = bfloat16(a(d));
    double want16 = 0;
    for (std::size_t d = 0; d < n; ++d) want16 += double(float(a16[d])) * double(b(d));
    REQUIRE(kernel::dot_row<T>(a16.data(), 1, b.data(), 1, n) == Approx(want16).margin(tol));
  }
}

TEMPLATE_TEST_CASE("add_terms_row and accumulate_row: a score row's terms and their gradients", "[kernel]", float,
                   double) {
  using T = TestType;
  testing::rng r(14);
  for (std::size_t cols : {1u, 16u, 37u}) {
    const std::size_t n = padded<T>(cols);
    std::vector<T> s(n), b(n), g(n), col(n);
    for (std::size_t j = 0; j < n; ++j)
      s[j] = T(r.uniform(-1, 1)), b[j] = T(r.uniform(-1, 1)), g[j] = T(r.uniform(-1, 1)), col[j] = T(j);
    const std::vector<T> s0 = s;
    kernel::add_terms_row(s.data(), n, T(0.75), b.data());
    for (std::size_t j = 0; j < n; ++j) REQUIRE(s[j] == Approx(double(s0[j]) + 0.75 + double(b[j])).margin(1e-6));
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j) sum += double(g[j]);
    REQUIRE(kernel::accumulate_row(g.data(), n, col.data()) == Approx(sum).margin(1e-5));
    for (std::size_t j = 0; j < n; ++j) REQUIRE(col[j] == Approx(double(j) + double(g[j])).margin(1e-6));
  }
}
