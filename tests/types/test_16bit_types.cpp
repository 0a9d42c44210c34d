// xattn::bfloat16 and xattn::float16: layout, exact widening, one round-to-nearest-even from float
// and double, and the edge values (NaN, ±inf, beyond float16's range, subnormals).
#include <xattn/types.hpp>

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

using xattn::bfloat16;
using xattn::float16;

namespace {

// A bfloat16 pattern's value straight from the definition: the top half of a float.
float bf16_value(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }

bool bf16_nan(std::uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

}  // namespace

TEST_CASE("16-bit types are 2 bytes, trivially copyable and hold std::uint16_t patterns") {
  STATIC_REQUIRE(sizeof(bfloat16) == 2);
  STATIC_REQUIRE(sizeof(float16) == 2);
  STATIC_REQUIRE(std::is_trivially_copyable_v<bfloat16>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<float16>);
  STATIC_REQUIRE(!std::is_convertible_v<bfloat16, float>);  // explicit both ways: no silent rounding
  STATIC_REQUIRE(!std::is_convertible_v<float, float16>);
  STATIC_REQUIRE(xattn::is_element_v<bfloat16> && xattn::is_element_v<float16>);
  STATIC_REQUIRE(std::is_same_v<xattn::accumulator_t<bfloat16, float16>, float>);
  STATIC_REQUIRE(std::is_same_v<xattn::accumulator_t<bfloat16, double>, double>);
  const auto b = std::bit_cast<bfloat16>(std::uint16_t(0x3f80));
  const auto h = std::bit_cast<float16>(std::uint16_t(0x3c00));
  REQUIRE(float(b) == 1.0f);
  REQUIRE(float(h) == 1.0f);
  REQUIRE(bfloat16(1.0f).bits() == 0x3f80);
  REQUIRE(float16(-2.0f).bits() == 0xc000);
  REQUIRE(float(bfloat16(3)) == 3.0f);  // integers convert too (T(0) in generic code)
}

TEST_CASE("bfloat16: every pattern widens exactly and round-trips") {
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const auto b = bfloat16::from_bits(std::uint16_t(i));
    const float f = float(b);
    INFO("bf16 bits 0x" << std::hex << i);
    if (bf16_nan(std::uint16_t(i))) {
      REQUIRE(std::isnan(f));
      REQUIRE(bf16_nan(bfloat16(f).bits()));
      REQUIRE(std::signbit(float(bfloat16(f))) == std::signbit(f));
    } else {
      REQUIRE(std::bit_cast<std::uint32_t>(f) == std::bit_cast<std::uint32_t>(bf16_value(std::uint16_t(i))));
      REQUIRE(bfloat16(f).bits() == i);  // subnormals and ±inf included
      REQUIRE(bfloat16(double(f)).bits() == i);
      REQUIRE(double(b) == double(f));
    }
  }
}

TEST_CASE("bfloat16: float and double round to nearest, ties to even, overflow to infinity") {
  for (std::uint32_t i = 0; i < 0x7f7f; ++i) {  // every pair of neighbouring positive finite values
    const auto lo = std::uint16_t(i), hi = std::uint16_t(i + 1);
    const float mid = std::bit_cast<float>((std::uint32_t(lo) << 16) | 0x8000u);  // exact midpoint
    const std::uint16_t even = (lo & 1) ? hi : lo;
    INFO("between 0x" << std::hex << lo << " and 0x" << hi);
    REQUIRE(bfloat16(mid).bits() == even);
    REQUIRE(bfloat16(std::nextafter(mid, INFINITY)).bits() == hi);
    REQUIRE(bfloat16(std::nextafter(mid, 0.0f)).bits() == lo);
    REQUIRE(bfloat16(-mid).bits() == (even | 0x8000));
    const double dmid = mid;  // one rounding from double: just off the tie is not a tie
    REQUIRE(bfloat16(dmid).bits() == even);
    REQUIRE(bfloat16(dmid + std::ldexp(dmid, -40)).bits() == hi);
    REQUIRE(bfloat16(dmid - std::ldexp(dmid, -40)).bits() == lo);
  }
  REQUIRE(bfloat16(std::numeric_limits<float>::max()).bits() == 0x7f80);  // rounds up to +inf
  REQUIRE(bfloat16(-1e300).bits() == 0xff80);
  REQUIRE(bfloat16(1e-300).bits() == 0x0000);
  REQUIRE(bfloat16(-1e-300).bits() == 0x8000);
  REQUIRE(float(bfloat16(std::numeric_limits<float>::denorm_min())) == 0.0f);
}

TEST_CASE("float16: conversions agree with the exact bit functions everywhere, F16C or not") {
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = float16::from_bits(std::uint16_t(i));
    const float want = xattn::half_to_float(std::uint16_t(i));
    INFO("half bits 0x" << std::hex << i);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(float(h)));
      REQUIRE(std::isnan(float(float16(float(h)))));
    } else {
      REQUIRE(std::bit_cast<std::uint32_t>(float(h)) == std::bit_cast<std::uint32_t>(want));
      REQUIRE(float16(want).bits() == i);
    }
  }
  std::mt19937 gen(7);  // random floats of every exponent, through both rounding routes
  for (int n = 0; n < 200000; ++n) {
    const float f = std::bit_cast<float>(std::uint32_t(gen()));
    if (std::isnan(f)) continue;
    INFO("float bits 0x" << std::hex << std::bit_cast<std::uint32_t>(f));
    REQUIRE(float16(f).bits() == xattn::float_to_half(f));
  }
  REQUIRE(float16(70000.0f).bits() == 0x7c00);  // beyond 65504: +inf
  REQUIRE(float16(65519.0f).bits() == 0x7bff);  // below the rounding boundary 65520: the largest finite
  REQUIRE(float16(65520.0f).bits() == 0x7c00);
  REQUIRE(float(float16(0x1p-24f)) == 0x1p-24f);  // the smallest subnormal survives
  REQUIRE(float16(0x1p-26f).bits() == 0);         // below half of it: zero
  REQUIRE(float16(-std::numeric_limits<float>::infinity()).bits() == 0xfc00);
  REQUIRE(std::isnan(float(float16(std::numeric_limits<float>::quiet_NaN()))));
}
