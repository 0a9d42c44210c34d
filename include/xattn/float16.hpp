#pragma once
// xattn::float16: an IEEE-754 binary16 operand type (storage only: the kernel computes in float).
// The bit conversions are exact and independent of F16C, so that constant evaluation, the ONNX
// conformance data (float16 tensors stored as raw bits) and every -march agree; at run time F16C,
// where present, does the same rounding in one instruction.

#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace xattn {

/// The float whose value the binary16 bit pattern h encodes (exact: every half is a float).
constexpr float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;

  if (exp == 0x1f)  // inf or NaN; the payload is kept so NaN patterns survive a round trip
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal half = mant * 2^-24: normalise it, since it is a normal float.
    int e = -14;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(e + 127) << 23) | ((mant & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/// The binary16 bit pattern of f, rounded to nearest even (overflow to infinity, gradual underflow).
constexpr std::uint16_t float_to_half(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;

  if (a >= 0x7f800000u) {
    if (a == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    // NaN: keep the top payload bits; if they are all zero, force the quiet bit
    // so the result is still a NaN rather than an infinity.
    std::uint32_t payload = (a >> 13) & 0x3ffu;
    return static_cast<std::uint16_t>(sign | 0x7c00u | (payload != 0 ? payload : 0x200u));
  }

  const int e = static_cast<int>(a >> 23) - 127;
  const std::uint32_t mant = a & 0x7fffffu;

  if (e > 15) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (e >= -14) {
    // Normal range. A carry out of the mantissa correctly bumps the exponent,
    // and out of the largest exponent it yields exactly the infinity pattern.
    std::uint32_t h = (static_cast<std::uint32_t>(e + 15) << 10) | (mant >> 13);
    const std::uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  if (e < -25)  // below half the smallest subnormal (2^-25): rounds to zero
    return sign;

  // Subnormal result in units of 2^-24; rounding up into 0x400 gives the smallest normal.
  const std::uint32_t m = mant | 0x800000u;
  const int shift = -(e + 1);  // 14..24
  std::uint32_t h = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

/// The binary16 bit pattern of d, in one rounding to nearest even (as float_to_half).
inline std::uint16_t double_to_half(double d) noexcept {
  // Going through float with plain RNE could round twice (e.g. 1 + 2^-11 + 2^-40 would land on the
  // tie and then go to 1.0), so the double is first narrowed with round-to-odd, which is safe
  // because float keeps more than two extra bits over half.
  if (std::isnan(d)) return float_to_half(static_cast<float>(d));
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d) return float_to_half(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d))  // truncate toward zero...
    f = std::nextafter(f, 0.0f);
  // ...then mark the lost bits as sticky in the last place.
  return float_to_half(std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u));
}

/// The value a float16 tensor would hold after storing x.
constexpr float round_to_half(float x) noexcept { return half_to_float(float_to_half(x)); }
inline double round_to_half(double x) noexcept { return half_to_float(double_to_half(x)); }

/// IEEE binary16: 2 bytes, layout-compatible with std::uint16_t, trivially copyable. Built from
/// float or double with one round-to-nearest-even (overflow to infinity, gradual underflow, NaN
/// kept); converted back explicitly and exactly.
class float16 {
 public:
  float16() = default;
  explicit float16(float x) noexcept : bits_(from_float(x)) {}
  explicit float16(double x) noexcept : bits_(double_to_half(x)) {}
  template <std::integral I>
  explicit float16(I x) noexcept : float16(static_cast<double>(x)) {}
  explicit operator float() const noexcept { return to_float(bits_); }
  explicit operator double() const noexcept { return to_float(bits_); }

  static constexpr float16 from_bits(std::uint16_t b) noexcept { return float16(b, raw{}); }
  constexpr std::uint16_t bits() const noexcept { return bits_; }

 private:
  struct raw {};
  constexpr float16(std::uint16_t b, raw) noexcept : bits_(b) {}

  static std::uint16_t from_float(float x) noexcept {
#if defined(__F16C__)
    if (!std::isnan(x))  // F16C quiets NaN payloads differently; every other value rounds the same
      return static_cast<std::uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
#endif
    return float_to_half(x);
  }
  static float to_float(std::uint16_t b) noexcept {
#if defined(__F16C__)
    return _cvtsh_ss(b);
#else
    return half_to_float(b);
#endif
  }

  std::uint16_t bits_;
};

static_assert(sizeof(float16) == 2 && std::is_trivially_copyable_v<float16> && std::is_standard_layout_v<float16>);

}  // namespace xattn
