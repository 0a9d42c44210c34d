// Each tile operation of the fused kernel against a plain loop, on odd sizes and both types.
#include "support/bitwise.hpp"
#include "support/random.hpp"

#include <xattn/kernel/tile_ops.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

using namespace xattn;
using xattn::simd::padded;

TEMPLATE_TEST_CASE("qk_tile computes Q Kᵀ from packed keys", "[kernel]", float, double) {
  using T = TestType;
  testing::rng r(1);
  for (auto [rows, cols, n] :
       {std::tuple{1u, 1u, 1u}, {4u, 16u, 8u}, {7u, 37u, 13u}, {13u, 130u, 64u}, {6u, 64u, 3u}}) {
    const std::size_t lds = padded<T>(cols) + 3, sw = kernel::strip_width<T>, size = kernel::packed_kt_size<T>(cols, n);
    const auto q = r.tensor<T>({rows, n}), k = r.tensor<T>({cols, n});
    std::vector<T> kt(size + 1, T(99)), s(rows * lds, T(-7));
    kernel::pack_kt([&](std::size_t c) { return &k(c, 0); }, cols, n, 1, kt.data());
    REQUIRE(size % (sw * n) == 0);
    REQUIRE(kt[size] == T(99));  // nothing written past the panel
    for (std::size_t d = 0; d < n; ++d)
      for (std::size_t c = 0; c < size / n; ++c)  // strip c / sw, row d, lane c % sw
        REQUIRE(kt[c / sw * sw * n + d * sw + c % sw] == (c < cols ? k(c, d) : T(0)));
    kernel::qk_tile(q.data(), n, rows, kt.data(), n, padded<T>(cols), s.data(), lds);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = 0; c < cols; ++c) {
        double want = 0;
        for (std::size_t d = 0; d < n; ++d) want += double(q(i, d)) * double(k(c, d));
        REQUIRE(s[i * lds + c] == Approx(want).margin(1e-5));
      }
  }
}

TEMPLATE_TEST_CASE("pack_kt transposes keys of any storage type into strips", "[kernel]", float, double, bfloat16,
                   float16) {
  using S = TestType;                                                      // the keys' storage type
  using T = std::conditional_t<std::is_same_v<S, double>, double, float>;  // the panel's
  testing::rng r(4);
  // whole SIMD-width blocks of keys and features (transposed in registers) and the tails around them
  for (auto [cols, n] : {std::pair{1u, 1u}, {16u, 16u}, {37u, 40u}, {130u, 64u}, {64u, 17u}, {70u, 8u}})
    for (std::ptrdiff_t dstride : {1, 3}) {
      xt::xtensor<S, 2> k = xt::xtensor<S, 2>::from_shape({cols, n * std::size_t(dstride)});
      for (auto& x : k) x = S(r.uniform(-1, 1));
      const std::size_t sw = kernel::strip_width<T>, size = kernel::packed_kt_size<T>(cols, n);
      std::vector<T> kt(size + 1, T(99));
      kernel::pack_kt<T>([&](std::size_t c) { return &k(c, 0); }, cols, n, dstride, kt.data());
      REQUIRE(kt[size] == T(99));
      for (std::size_t d = 0; d < n; ++d)
        for (std::size_t c = 0; c < size / n; ++c)
          REQUIRE(kt[c / sw * sw * n + d * sw + c % sw] == (c < cols ? T(k(c, d * std::size_t(dstride))) : T(0)));
    }
}

TEMPLATE_TEST_CASE("qk_direct computes Q Kᵀ from key rows in place, of any storage type", "[kernel]", float, double,
                   bfloat16) {
  using S = TestType;                                                      // the keys' storage type
  using T = std::conditional_t<std::is_same_v<S, double>, double, float>;  // the accumulator
  testing::rng r(9);
  // cols around multiples of 4 (the keys processed together) and n around the SIMD width
  // rows 4, 8, 16: full 4 x 4 blocks (AVX-512 sums them by one tree), with and without a tail
  for (auto [rows, cols, n] : {std::tuple{1u, 1u, 1u},
                               {1u, 4u, 16u},
                               {2u, 7u, 17u},
                               {3u, 9u, 128u},
                               {16u, 12u, 5u},
                               {4u, 8u, 128u},
                               {8u, 9u, 35u},
                               {5u, 13u, 64u}}) {
    const std::size_t lds = cols + 2;
    const auto q = r.tensor<T>({rows, n});
    xt::xtensor<S, 2> k = xt::xtensor<S, 2>::from_shape({cols, n});
    for (auto& x : k) x = S(r.uniform(-1, 1));
    std::vector<T> s(rows * lds, T(-7));
    kernel::qk_direct(
        q.data(), n, rows, [&](std::size_t c) { return &k(c, 0); }, cols, n, s.data(), lds);
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t c = 0; c < cols; ++c) {
        double want = 0;
        for (std::size_t d = 0; d < n; ++d) want += double(q(i, d)) * double(k(c, d));
        REQUIRE(s[i * lds + c] == Approx(want).margin(1e-5));
      }
      REQUIRE(s[i * lds + cols] == T(-7));  // nothing written past the row's keys
    }
  }
}

TEST_CASE("qk_direct prefetches a second stream's rows with the keys it prefetches, each once", "[kernel]") {
  testing::rng r(10);
  const std::size_t rows = 2, cols = 100, n = 64;  // 256-byte rows: keys 16 and more ahead are prefetched
  const auto q = r.tensor<float>({rows, n}), k = r.tensor<float>({cols, n});
  std::vector<float> s(rows * cols);
  std::vector<std::size_t> seen;
  std::size_t calls = 0;
  const auto record = [&](std::size_t t, std::size_t m) {
    ++calls;
    for (std::size_t i = 0; i < m; ++i) seen.push_back(t + i);
  };
  const kernel::row_prefetch also{
      [](const void* f, std::size_t t, std::size_t m) { (*static_cast<decltype(&record)>(f))(t, m); }, &record};
  kernel::qk_direct(
      q.data(), n, rows, [&](std::size_t c) { return &k(c, 0); }, cols, n, s.data(), cols, also);
  std::vector<std::size_t> want(cols - 16);
  std::iota(want.begin(), want.end(), std::size_t(16));
  REQUIRE(seen == want);
  REQUIRE(calls == (want.size() + 3) / 4);  // a call per block of 4 keys
  // the rows_prefetch handle reads rows(t) for those keys
  std::vector<std::size_t> asked;
  const auto rows_of = [&](std::size_t t) {
    asked.push_back(t);
    return &k(t, 0);
  };
  const kernel::rows_prefetch<decltype(rows_of)> values{rows_of, n * sizeof(float)};
  kernel::qk_direct(
      q.data(), n, rows, [&](std::size_t c) { return &k(c, 0); }, cols, n, s.data(), cols, values.handle());
  REQUIRE(asked == want);
  // rows in pages of 6 are looked up once per page and block, and stepped through the page
  struct paged {
    const float* k;
    std::size_t n;
    std::vector<std::size_t>* asked;
    const float* operator()(std::size_t t) const {
      asked->push_back(t);
      return k + t * n;
    }
    std::size_t same_page(std::size_t t) const { return 6 - t % 6; }
    const float* next(const float* p) const { return p + n; }
  };
  asked.clear();
  const paged pages{k.data(), n, &asked};
  const kernel::rows_prefetch<paged> stepped{pages, n * sizeof(float)};
  kernel::qk_direct(
      q.data(), n, rows, [&](std::size_t c) { return &k(c, 0); }, cols, n, s.data(), cols, stepped.handle());
  std::vector<std::size_t> looked;
  for (std::size_t t = 16; t < cols; ++t)
    if (t % 4 == 0 || t % 6 == 0) looked.push_back(t);  // a block's first key, a page's first key
  REQUIRE(asked == looked);
}
namespace {

/// A batch of lanes of magnitudes 2^-20 .. 2^20, so that the order of their additions shows in
/// the bits of a sum.
template <class T>
simd::batch<T> spread_batch(testing::rng& r) {
  alignas(64) T lanes[simd::width<T>];
  for (auto& l : lanes) l = T(r.uniform(-1, 1)) * std::ldexp(T(1), int(r.uniform(-20, 20)));
  return simd::batch<T>::load_aligned(lanes);
}

}  // namespace

TEMPLATE_TEST_CASE("lane_sums16 sums 16 batches at once, bit for bit as hsum sums each", "[kernel]", float) {
  if constexpr (simd::width<TestType> != 16) {
    SUCCEED("lane_sums16 is for 16-lane float batches (AVX-512)");
  } else {
    testing::rng r(10);
    for (int trial = 0; trial < 20; ++trial) {
      simd::batch<TestType> a[16];
      for (auto& x : a) x = spread_batch<TestType>(r);
      alignas(64) TestType sums[16];
      kernel::detail::lane_sums16(a).store_aligned(sums);
      for (std::size_t i = 0; i < 16; ++i) REQUIRE(sums[i] == simd::hsum(a[i]));
    }
  }
}

TEMPLATE_TEST_CASE("lane_sums4 sums 4 batches at once, bit for bit as hsum sums each", "[kernel]", float) {
  if constexpr (simd::width<TestType> != 16) {
    SUCCEED("lane_sums4 is for 16-lane float batches (AVX-512)");
  } else {
    testing::rng r(11);
    for (int trial = 0; trial < 50; ++trial) {
      simd::batch<TestType> a[4];
      for (auto& x : a) x = spread_batch<TestType>(r);
      alignas(16) TestType sums[4];
      _mm_store_ps(sums, kernel::detail::lane_sums4(a));
      for (std::size_t i = 0; i < 4; ++i) REQUIRE(sums[i] == simd::hsum(a[i]));
    }
  }
}

namespace {

/// keys x dvp values, the first dv columns of each row drawn from r, the padding zero.
template <class T>
xt::xarray<T> random_values(testing::rng& r, std::size_t keys, std::size_t dv, std::size_t dvp) {
  xt::xarray<T> v(std::vector<std::size_t>{keys, dvp}, T(0));
  for (std::size_t j = 0; j < keys; ++j)
    for (std::size_t d = 0; d < dv; ++d) v(j, d) = T(r.uniform(-1, 1));
  return v;
}

/// NaN at value (4, 1), inf at (9, 3), weighed by row 1 only and by every row but 0 respectively.
template <class T>
void plant_nonfinite(xt::xarray<T>& p, xt::xarray<T>& v) {
  v(4, 1) = std::numeric_limits<T>::quiet_NaN();
  v(9, 3) = std::numeric_limits<T>::infinity();
  for (std::size_t i = 0; i < p.shape()[0]; ++i)
    if (i != 1) p(i, 4) = 0;
  p(0, 9) = 0;
}

}  // namespace

TEMPLATE_TEST_CASE("pv_tile accumulates P V into O", "[kernel]", float, double) {
  using T = TestType;
  testing::rng r(2);
  // 200 columns: with one or two rows, blocks of 2 x, 1 x and 1/4 x the six-row width; up to four
  // rows over more than 32 keys and several column blocks: streamed in pieces of keys (300
  // columns: two passes of at most 256)
  for (auto [rows, keys, dv] : {std::tuple{1u, 1u, 1u},
                                {5u, 9u, 3u},
                                {9u, 64u, 70u},
                                {1u, 7u, 200u},
                                {2u, 13u, 200u},
                                {1u, 50u, 200u},
                                {3u, 40u, 70u},
                                {4u, 100u, 300u},
                                {10u, 37u, 130u}}) {
    const std::size_t dvp = padded<T>(dv), ldp = keys + 2;
    const auto p = r.tensor<T>({rows, ldp}), o0 = r.tensor<T>({rows, dvp});
    xt::xarray<T> v = random_values<T>(r, keys, dv, dvp);
    xt::xarray<T> o = o0;
    kernel::pv_tile(p.data(), ldp, rows, v.data(), dvp, keys, o.data(), dvp, dvp);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t d = 0; d < dv; ++d) {
        double want = o0(i, d);
        for (std::size_t j = 0; j < keys; ++j) want += double(p(i, j)) * double(v(j, d));
        REQUIRE(o(i, d) == Approx(want).margin(1e-5));
      }
  }
}

TEMPLATE_TEST_CASE("pv_tile: keys of weight 0 never contribute, even with inf or NaN values", "[kernel]", float,
                   double) {
  using T = TestType;
  testing::rng r(3);
  // six-row blocks, wide two-row ones, and four rows streamed in pieces of keys
  for (auto [rows, keys, dv] : {std::tuple{7u, 11u, 5u}, {2u, 11u, 200u}, {4u, 70u, 300u}}) {
    const std::size_t dvp = padded<T>(dv);
    auto p = r.tensor<T>({rows, keys});
    xt::xarray<T> v = random_values<T>(r, keys, dv, dvp);
    plant_nonfinite(p, v);
    xt::xarray<T> o(std::vector<std::size_t>{rows, dvp}, T(1));
    kernel::pv_tile(p.data(), keys, rows, v.data(), dvp, keys, o.data(), dvp, dvp);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t d = 0; d < dv; ++d) {
        double want = 1;
        for (std::size_t j = 0; j < keys; ++j)
          if (p(i, j) != 0) want += double(p(i, j)) * double(v(j, d));
        INFO("rows " << rows << ", row " << i << " column " << d);
        if (std::isnan(want))
          REQUIRE(std::isnan(o(i, d)));
        else if (std::isinf(want))
          REQUIRE(o(i, d) == T(want));
        else
          REQUIRE(o(i, d) == Approx(want).margin(1e-5));
      }
  }
}

TEMPLATE_TEST_CASE("pv_tile: a few rows over many keys, streamed in pieces, give the bits of a six-row block",
                   "[kernel]", float, double) {
  using T = TestType;
  testing::rng r(4);
  constexpr std::size_t keys = 147, dv = 300, dvp = padded<T>(dv);
  const auto p = r.tensor<T>({6, keys}), v = r.tensor<T>({keys, dvp});
  xt::xarray<T> six(std::vector<std::size_t>{6, dvp}, T(0.5));
  kernel::pv_tile(p.data(), keys, 6, v.data(), dvp, keys, six.data(), dvp, dvp);  // one pass per column block
  for (std::size_t rows = 1; rows <= 4; ++rows) {
    xt::xarray<T> few(std::vector<std::size_t>{rows, dvp}, T(0.5));
    kernel::pv_tile(p.data() + (6 - rows) * keys, keys, rows, v.data(), dvp, keys, few.data(), dvp, dvp);
    INFO(rows << " rows");
    REQUIRE(testing::bitwise_equal(few, xt::xarray<T>(xt::view(six, xt::range(6 - rows, 6), xt::all()))));
  }
}

TEMPLATE_TEST_CASE("pack_strips packs value rows of any storage type into strips, zero-padded", "[kernel]", float,
                   double, bfloat16, float16) {
  using S = TestType;                                                      // the values' storage type
  using T = std::conditional_t<std::is_same_v<S, double>, double, float>;  // the strips'
  testing::rng r(5);
  // whole strips (copied a batch at a time) and the tails around them
  for (auto [rows, n] : {std::pair{1u, 1u}, {5u, 16u}, {37u, 40u}, {20u, 64u}, {3u, 70u}, {9u, 128u}})
    for (std::ptrdiff_t dstride : {1, 2}) {
      xt::xtensor<S, 2> v = xt::xtensor<S, 2>::from_shape({rows, n * std::size_t(dstride)});
      for (auto& x : v) x = S(r.uniform(-1, 1));
      // strips further apart than the rows they hold: nothing may be written in between
      const std::size_t sw = kernel::strip_width<T>, strips = (n + sw - 1) / sw, stride = rows * sw + 3;
      std::vector<T> out(strips * stride, T(99));
      kernel::pack_strips<T>([&](std::size_t i) { return &v(i, 0); }, rows, n, dstride, out.data(), stride);
      for (std::size_t s = 0; s < strips; ++s)
        for (std::size_t e = 0; e < stride; ++e) {
          const std::size_t i = e / sw, d = s * sw + e % sw;
          INFO("rows " << rows << ", n " << n << ", stride " << dstride << ": strip " << s << ", element " << e);
          if (i >= rows)
            REQUIRE(out[s * stride + e] == T(99));
          else
            REQUIRE(out[s * stride + e] == (d < n ? T(v(i, d * std::size_t(dstride))) : T(0)));
        }
    }
}

TEMPLATE_TEST_CASE("pv_tile_strips: pv_tile's bits from values packed in strips, inf and NaN included", "[kernel]",
                   float, double) {
  using T = TestType;
  testing::rng r(6);
  const auto range = [](std::size_t row, std::size_t rows) { return std::pair{row / 2, row + rows + 3}; };
  // six-row blocks and the smaller ones after them; whole strips, and the batches of a last partial one
  for (auto [rows, keys, dv] : {std::tuple{1u, 1u, 1u},
                                {7u, 11u, 5u},
                                {2u, 13u, 200u},
                                {13u, 37u, 70u},
                                {6u, 64u, 64u},
                                {4u, 100u, 300u},
                                {11u, 29u, 40u}}) {
    const std::size_t dvp = padded<T>(dv), sw = kernel::strip_width<T>, stride = keys * sw + 5;
    auto p = r.tensor<T>({rows, keys});
    xt::xarray<T> v = random_values<T>(r, keys, dv, dvp);
    if (keys > 9 && dv > 3) plant_nonfinite(p, v);
    std::vector<T> vs((dvp + sw - 1) / sw * stride, T(0));
    kernel::pack_strips<T>([&](std::size_t j) { return &v(j, 0); }, keys, dvp, 1, vs.data(), stride);
    const xt::xarray<T> o0 = r.tensor<T>({rows, dvp});
    xt::xarray<T> want = o0, got = o0, want_ranged = o0, got_ranged = o0;
    kernel::pv_tile(p.data(), keys, rows, v.data(), dvp, keys, want.data(), dvp, dvp);
    kernel::pv_tile_strips(p.data(), keys, rows, vs.data(), stride, keys, got.data(), dvp, dvp);
    kernel::pv_tile(p.data(), keys, rows, v.data(), dvp, keys, want_ranged.data(), dvp, dvp, range);
    kernel::pv_tile_strips(p.data(), keys, rows, vs.data(), stride, keys, got_ranged.data(), dvp, dvp, range);
    INFO("rows " << rows << ", keys " << keys << ", dv " << dv);
    REQUIRE(testing::bitwise_equal(got, want));
    REQUIRE(testing::bitwise_equal(got_ranged, want_ranged));
    REQUIRE(!testing::bitwise_equal(got, o0));
  }
}

TEMPLATE_TEST_CASE("row_max, exp_row (base 2), scale_row", "[kernel]", float, double) {
  using T = TestType;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const std::size_t n = padded<T>(21);
  std::vector<T> s(n, -inf);
  for (std::size_t j = 0; j < 21; ++j) s[j] = T(j % 7) - T(3);
  REQUIRE(kernel::row_max(s.data(), n) == T(3));
  const T sum = kernel::exp_row(s.data(), n, T(3));
  double want = 0;
  for (std::size_t j = 0; j < 21; ++j) {
    const double e = std::exp2(double(j % 7) - 6.0);
    want += e;
    REQUIRE(s[j] == Approx(e).epsilon(1e-6));
  }
  for (std::size_t j = 21; j < n; ++j) REQUIRE(s[j] == T(0));  // -inf padding becomes exactly 0
  REQUIRE(sum == Approx(want).epsilon(1e-6));
  kernel::scale_row(s.data(), n, T(2));
  REQUIRE(s[6] == Approx(2.0).epsilon(1e-6));

  std::vector<T> all_masked(n, -inf);  // nothing visible: max -inf, all exp 0, no NaN
  REQUIRE(kernel::row_max(all_masked.data(), n) == -inf);
  REQUIRE(kernel::exp_row(all_masked.data(), n, -inf) == T(0));
  for (T x : all_masked) REQUIRE(x == T(0));
}

TEMPLATE_TEST_CASE("to_base2_row: times log2 e, finite stays finite, inf and NaN pass", "[kernel]", float, double) {
  using T = TestType;
  using lim = std::numeric_limits<T>;
  const std::size_t n = padded<T>(7);
  std::vector<T> s(n, T(1));
  const std::vector<T> x{T(2), T(-3.5), lim::lowest(), lim::max(), -lim::infinity(), lim::infinity(), lim::quiet_NaN()};
  std::copy(x.begin(), x.end(), s.begin());
  kernel::to_base2_row(s.data(), n);
  REQUIRE(s[0] == Approx(2 * 1.4426950408889634).epsilon(1e-7));
  REQUIRE(s[1] == Approx(-3.5 * 1.4426950408889634).epsilon(1e-7));
  REQUIRE(s[2] == lim::lowest());  // saturated, not -inf: a filled key still takes part
  REQUIRE(s[3] == lim::max());
  REQUIRE(s[4] == -lim::infinity());
  REQUIRE(s[5] == lim::infinity());
  REQUIRE(std::isnan(s[6]));
}

TEMPLATE_TEST_CASE("online_softmax_row over blocks equals one base-2 softmax over the row", "[kernel]", float, double) {
  using T = TestType;
  constexpr std::size_t w = simd::width<T>;
  testing::rng r(4);
  const std::size_t blocks = 3, dv = w;
  const auto scores = r.tensor<T>({blocks, w}, -20, 20);
  const auto v = r.tensor<T>({blocks * w, dv});
  kernel::row_state<T> st;
  std::vector<T> o(dv, T(0)), s(w);
  for (std::size_t b = 0; b < blocks; ++b) {
    for (std::size_t j = 0; j < w; ++j) s[j] = scores(b, j);
    kernel::online_softmax_row(s.data(), w, st, o.data(), dv);
    kernel::pv_tile(s.data(), w, 1, &v(b * w, 0), dv, w, o.data(), dv, dv);
  }
  std::vector<T> out(dv);
  kernel::finalize_row(o.data(), dv, st.l, out.data(), 1);
  double m = -1e300, z = 0;
  for (auto x : scores) m = std::max(m, double(x));
  for (auto x : scores) z += std::exp2(double(x) - m);
  REQUIRE(st.m == T(m));
  REQUIRE(double(st.l) == Approx(z).epsilon(1e-5));
  for (std::size_t d = 0; d < dv; ++d) {
    double want = 0;
    for (std::size_t j = 0; j < blocks * w; ++j) want += std::exp2(double(scores.flat(j)) - m) / z * double(v(j, d));
    REQUIRE(out[d] == Approx(want).margin(1e-5));
  }
  REQUIRE(double(kernel::row_lse(st)) == Approx(std::log(z) + m * std::log(2.0)).epsilon(1e-6));  // natural units
}

TEMPLATE_TEST_CASE("scaled_copy multiplies a row into place, contiguous or strided", "[kernel]", float, double) {
  using T = TestType;
  testing::rng r(9);
  const std::size_t n = 3 * simd::width<T> + 5;  // vector body and a scalar tail
  const auto x = r.tensor<T>({2 * n});
  const T c = T(0.37);
  for (auto [ss, ds] : {std::pair<std::ptrdiff_t, std::ptrdiff_t>{1, 1}, {2, 1}, {1, 2}, {2, 2}}) {
    std::vector<T> out(2 * n + 1, T(-3));
    kernel::scaled_copy(x.data(), ss, n, c, out.data(), ds);
    for (std::size_t d = 0; d < n; ++d)
      REQUIRE(out[d * std::size_t(ds)] == x(d * std::size_t(ss)) * c);  // exact: one product
    if (ds == 2) REQUIRE(out[1] == T(-3));                              // strided writes leave the gaps alone
    REQUIRE(out[n * std::size_t(ds)] == T(-3));                         // nothing written past the row
  }
  std::vector<T> y(x.begin(), x.begin() + std::ptrdiff_t(n));
  kernel::scaled_copy(y.data(), 1, n, c, y.data(), 1);  // in place, as the query projection uses it
  for (std::size_t d = 0; d < n; ++d) REQUIRE(y[d] == x(d) * c);
}

TEST_CASE("finalize_row: a row that saw nothing is zero, not NaN") {
  std::vector<float> o(4, 0.f), out(8, 5.f);
  kernel::finalize_row(o.data(), 4, 0.f, out.data(), 2);
  for (std::size_t d = 0; d < 4; ++d) REQUIRE(out[2 * d] == 0.f);
  REQUIRE(out[1] == 5.f);  // strided writes leave the gaps alone
}
