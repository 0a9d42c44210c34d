#pragma once
// xattn::bfloat16: the top half of an IEEE binary32 (8-bit exponent, 7-bit mantissa), an operand
// type for storage only: the kernel computes in float.
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <type_traits>

namespace xattn {

/// bfloat16: 2 bytes, layout-compatible with std::uint16_t, trivially copyable. Built from float or
/// double with one round-to-nearest-even (overflow to infinity, NaN kept as a quiet NaN of the same
/// sign); converted back explicitly and exactly (a shift).
class bfloat16 {
 public:
  bfloat16() = default;
  explicit constexpr bfloat16(float x) noexcept : bits_(from_float(x)) {}
  explicit bfloat16(double x) noexcept : bits_(from_double(x)) {}
  template <std::integral I>
  explicit bfloat16(I x) noexcept : bfloat16(static_cast<double>(x)) {}
  explicit constexpr operator float() const noexcept { return std::bit_cast<float>(std::uint32_t(bits_) << 16); }
  explicit constexpr operator double() const noexcept { return float(*this); }

  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept { return bfloat16(b, raw{}); }
  constexpr std::uint16_t bits() const noexcept { return bits_; }

 private:
  struct raw {};
  constexpr bfloat16(std::uint16_t b, raw) noexcept : bits_(b) {}

  static constexpr std::uint16_t from_float(float x) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);  // NaN: stays one
    // Round to nearest even: a carry out of the mantissa bumps the exponent, and out of the
    // largest finite exponent yields exactly the infinity pattern.
    return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  // One correct rounding from double: narrow to float rounding to odd (the lost bits kept as a
  // sticky last bit; float has 16 bits to spare), then round to nearest even.
  static std::uint16_t from_double(double d) noexcept {
    float f = static_cast<float>(d);
    if (std::isnan(d) || static_cast<double>(f) == d) return from_float(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    return from_float(std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u));
  }

  std::uint16_t bits_;
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16> && std::is_standard_layout_v<bfloat16>);

}  // namespace xattn
