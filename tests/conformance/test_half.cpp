#include <xattn/onnx/attention.hpp>
#include <xattn/onnx/half.hpp>

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>

using namespace xattn::onnx;

namespace {

// The value of a finite half straight from the definition, independent of half.hpp.
double half_value(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return (h & 0x8000) ? -mag : mag;
}

bool is_nan_pattern(std::uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

}  // namespace

TEST_CASE("every half pattern decodes to its exact value and round-trips bit-exactly", "[half]") {
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = half_to_float(h);
    INFO("half bits 0x" << std::hex << i);
    if (is_nan_pattern(h))
      REQUIRE(std::isnan(f));
    else if ((h & 0x7fff) == 0x7c00)
      REQUIRE(f == ((h & 0x8000) ? -INFINITY : INFINITY));
    else
      REQUIRE(static_cast<double>(f) == half_value(h));
    REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
    REQUIRE(float_to_half(f) == h);
    if (is_nan_pattern(h))
      REQUIRE(is_nan_pattern(double_to_half(f)));
    else
      REQUIRE(double_to_half(f) == h);
  }
}

TEST_CASE("float -> half rounds to nearest, ties to even, everywhere", "[half]") {
  // Around every pair of neighbouring positive finite halves: the midpoint is a tie
  // (goes to the even one), anything just off it goes to the nearer one.
  for (std::uint16_t h = 0; h < 0x7bff; ++h) {
    const auto next = static_cast<std::uint16_t>(h + 1);
    const float mid = (half_to_float(h) + half_to_float(next)) / 2;  // exact: 12 significant bits
    const std::uint16_t even = (h & 1) ? next : h;
    INFO("between 0x" << std::hex << h << " and 0x" << next);
    REQUIRE(float_to_half(mid) == even);
    REQUIRE(float_to_half(std::nextafter(mid, INFINITY)) == next);
    REQUIRE(float_to_half(std::nextafter(mid, 0.0f)) == h);
    REQUIRE(float_to_half(-mid) == (even | 0x8000));
    const double dmid = mid;
    REQUIRE(double_to_half(dmid) == even);
    REQUIRE(double_to_half(dmid + std::ldexp(dmid, -40)) == next);
    REQUIRE(double_to_half(dmid - std::ldexp(dmid, -40)) == h);
  }
}

TEST_CASE("float -> half special and boundary cases", "[half]") {
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(0.0f) == 0x0000);
  CHECK(float_to_half(-0.0f) == 0x8000);
  CHECK(float_to_half(65504.0f) == 0x7bff);                        // largest finite
  CHECK(float_to_half(std::nextafter(65520.0f, 0.0f)) == 0x7bff);  // just below the overflow tie
  CHECK(float_to_half(65520.0f) == 0x7c00);                        // tie with 65536 -> even -> inf
  CHECK(float_to_half(1e6f) == 0x7c00);
  CHECK(float_to_half(-1e30f) == 0xfc00);
  CHECK(float_to_half(INFINITY) == 0x7c00);
  CHECK(float_to_half(-INFINITY) == 0xfc00);
  CHECK(is_nan_pattern(float_to_half(NAN)));
  // A float NaN whose payload lives only in low bits must not become infinity.
  CHECK(is_nan_pattern(float_to_half(std::bit_cast<float>(0x7f800001u))));

  CHECK(float_to_half(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // tie with zero -> even
  CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 units: tie -> 2
  CHECK(float_to_half(std::ldexp(2047.0f, -25)) == 0x0400);  // 1023.5 units: tie -> smallest normal
  CHECK(float_to_half(-std::ldexp(1.0f, -26)) == 0x8000);
  CHECK(float_to_half(1e-45f) == 0x0000);                        // float subnormal
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie -> even
  CHECK(float_to_half(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);  // tie -> even
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -23)) == 0x3c01);
}

TEST_CASE("double -> half rounds once, not via float", "[half]") {
  // Rounding this to float first would land exactly on the tie and then go to 1.0.
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(float_to_half(static_cast<float>(d)) == 0x3c00);
  CHECK(double_to_half(d) == 0x3c01);
  CHECK(double_to_half(1e300) == 0x7c00);
  CHECK(double_to_half(-1e-300) == 0x8000);
  CHECK(double_to_half(65519.999999) == 0x7bff);
  CHECK(round_to_half(d) == 1.0 + std::ldexp(1.0, -10));
  CHECK(round_to_half(0.1f) == half_to_float(0x2e66));
}
