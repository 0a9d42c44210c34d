// pv_q8_rows, P·V over int8 (q8_0) value rows on integer products, against the double sums of
// the weights and the dequantized values, within the bound the weights' rounding allows; read
// through a paged accessor; declining (writing nothing) what only the float path gets right.
#include "support/random.hpp"

#include <xattn/kernel/pv_q8.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace xattn;

namespace {

/// Rows of n int8 codes and n / 32 scales each, stored one after the other in pages of page_rows
/// rows (a cache's value pages), read through an accessor with the page walk of paged_rows.
struct q8_values {
  std::size_t n, page_rows;
  std::vector<std::int8_t> codes;
  std::vector<float> scales;
  q8_values(std::size_t rows, std::size_t n, std::size_t page_rows, testing::rng& r)
      : n(n), page_rows(page_rows), codes(rows * n), scales(rows * (n / 32)) {
    for (auto& c : codes) c = std::int8_t(std::lround(r.uniform(-127, 127)));
    for (auto& s : scales) s = float(r.uniform(0.001, 0.02));
  }
  double at(std::size_t j, std::size_t d) const { return double(codes[j * n + d]) * scales[j * (n / 32) + d / 32]; }

  struct rows {
    const q8_values* v;
    std::size_t j0 = 0;
    kernel::q8_row operator()(std::size_t j) const {
      return {v->codes.data() + (j0 + j) * v->n, v->scales.data() + (j0 + j) * (v->n / 32), 0};
    }
    std::size_t same_page(std::size_t j) const { return v->page_rows - (j0 + j) % v->page_rows; }
    kernel::q8_row next(const kernel::q8_row& r) const { return {r.q + v->n, r.scale + v->n / 32, r.col}; }
  };
  rows from(std::size_t j0) const { return {this, j0}; }
};

template <std::size_t R>
bool pv_q8(const std::vector<float>& p, std::size_t ldp, const q8_values::rows& v, std::size_t keys,
           std::vector<float>& o, std::size_t ldo, std::size_t dv) {
  return kernel::pv_q8_rows<R>(p.data(), ldp, v, keys, o.data(), ldo, dv);
}

bool pv_q8_any(std::size_t rows, const std::vector<float>& p, std::size_t ldp, const q8_values::rows& v,
               std::size_t keys, std::vector<float>& o, std::size_t ldo, std::size_t dv) {
  switch (rows) {
    case 1:
      return pv_q8<1>(p, ldp, v, keys, o, ldo, dv);
    case 2:
      return pv_q8<2>(p, ldp, v, keys, o, ldo, dv);
    case 3:
      return pv_q8<3>(p, ldp, v, keys, o, ldo, dv);
    default:
      return pv_q8<4>(p, ldp, v, keys, o, ldo, dv);
  }
}

}  // namespace

TEST_CASE("pv_q8_rows: int8 values on integer products, within the rounding of the weights", "[kernel]") {
  REQUIRE(kernel::has_q8_pv);  // the tests' builds are AVX-512BW or AVX2
  testing::rng r(31);
  // 1 to 4 rows; keys in whole and partial pieces of 16, odd counts; column blocks and their tails
  for (auto [rows, keys, dv, first, page] : {std::tuple{1u, 1u, 32u, 0u, 16u},
                                             {1u, 40u, 256u, 3u, 16u},
                                             {2u, 17u, 64u, 0u, 5u},
                                             {2u, 33u, 160u, 7u, 16u},
                                             {3u, 100u, 96u, 1u, 7u},
                                             {4u, 16u, 128u, 0u, 16u},
                                             {4u, 77u, 128u, 9u, 16u},
                                             {4u, 64u, 224u, 0u, 3u}}) {
    INFO("rows " << rows << ", keys " << keys << ", dv " << dv << " from key " << first << ", pages of " << page);
    const q8_values v(first + keys, dv, page, r);
    const std::size_t ldp = keys + 5, ldo = dv + 16;
    std::vector<float> p(rows * ldp);
    for (auto& x : p) x = r.uniform(0, 1) < 0.2 ? 0.0f : float(std::exp(r.uniform(-12, 0)));  // softmax-like
    std::vector<float> o(rows * ldo);
    for (auto& x : o) x = float(r.uniform(-1, 1));
    const std::vector<float> before = o;
    REQUIRE(pv_q8_any(rows, p, ldp, v.from(first), keys, o, ldo, dv));
    for (std::size_t i = 0; i < rows; ++i) {
      // each weight p · scale moves by at most half a step, the piece's max p times its largest
      // scale over 32767; float sums add a few units of roundoff of the absolute products
      std::vector<double> want(dv, 0.0), bound(dv, 0.0), mass(dv, 0.0);
      for (std::size_t j0 = 0; j0 < keys; j0 += 16) {
        double pmax = 0, smax = 0;
        for (std::size_t j = j0; j < std::min<std::size_t>(keys, j0 + 16); ++j) {
          pmax = std::max(pmax, double(p[i * ldp + j]));
          for (std::size_t g = 0; g < dv / 32; ++g)
            smax = std::max(smax, double(v.scales[(first + j) * (dv / 32) + g]));
        }
        for (std::size_t j = j0; j < std::min<std::size_t>(keys, j0 + 16); ++j)
          for (std::size_t d = 0; d < dv; ++d) {
            want[d] += double(p[i * ldp + j]) * v.at(first + j, d);
            mass[d] += std::abs(double(p[i * ldp + j]) * v.at(first + j, d));
            bound[d] += std::abs(double(v.codes[(first + j) * dv + d])) * pmax * smax / 65534;
          }
      }
      for (std::size_t d = 0; d < dv; ++d) {
        INFO("row " << i << ", feature " << d);
        const double got = double(o[i * ldo + d]) - double(before[i * ldo + d]);
        REQUIRE(std::abs(got - want[d]) <= bound[d] + 8 * (mass[d] + 1) * std::numeric_limits<float>::epsilon());
      }
      for (std::size_t d = dv; d < ldo; ++d) REQUIRE(o[i * ldo + d] == before[i * ldo + d]);  // past dv: untouched
    }
  }
}

TEST_CASE("pv_q8_rows: a piece's weights are rounded against its own bound", "[kernel]") {
  // weight 1 on a key of zero codes in the first piece, tiny weights in the second: the second
  // piece keeps their precision (rounded against a bound shared with the first, they would be 0)
  testing::rng r(8);
  q8_values v(32, 32, 16, r);
  std::fill(v.codes.begin(), v.codes.begin() + 32, std::int8_t(0));
  std::vector<float> p(32, 0.0f), o(32, 0.0f);
  p[0] = 1.0f;
  std::fill(p.begin() + 16, p.end(), 1e-6f);
  REQUIRE(pv_q8<1>(p, 32, v.from(0), 32, o, 32, 32));
  for (std::size_t d = 0; d < 32; ++d) {
    double want = 0;
    for (std::size_t j = 16; j < 32; ++j) want += double(1e-6f) * v.at(j, d);
    INFO("feature " << d);
    REQUIRE(std::abs(double(o[d]) - want) <= 16 * 127 * 1e-6 * 0.02 / 65534 + 1e-6 * std::abs(want));
  }
}

TEST_CASE("pv_q8_rows declines what it cannot do exactly, writing nothing", "[kernel]") {
  testing::rng r(3);
  const q8_values v(40, 64, 16, r);
  std::vector<float> p(2 * 40, 0.5f), o(2 * 64, -7.0f);
  const auto untouched = [&] {
    for (float x : o)
      if (x != -7.0f) return false;
    return true;
  };
  p[40 + 37] = std::numeric_limits<float>::infinity();  // in the last piece: found after others are summed
  CHECK_FALSE(pv_q8<2>(p, 40, v.from(0), 40, o, 64, 64));
  p[40 + 37] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(pv_q8<2>(p, 40, v.from(0), 40, o, 64, 64));
  p[40 + 37] = 0.5f;
  CHECK_FALSE(pv_q8<2>(p, 40, v.from(0), 40, o, 64, 48));  // not whole groups of 32
  q8_values inf_scale = v;
  inf_scale.scales[2 * 39 + 1] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(pv_q8<2>(p, 40, inf_scale.from(0), 40, o, 64, 64));
  std::vector<float> tiny(2 * 40, 1e-38f);  // times scales under 0.02: 32767 / bound overflows
  CHECK_FALSE(pv_q8<2>(tiny, 40, v.from(0), 40, o, 64, 64));
  const q8_values wide(40, 288, 16, r);
  std::vector<float> o_wide(2 * 288, -7.0f);
  CHECK_FALSE(pv_q8<2>(p, 40, wide.from(0), 40, o_wide, 288, 288));  // over 256 columns
  CHECK(untouched());
  CHECK(pv_q8<2>(p, 40, v.from(0), 40, o, 64, 64));
}
