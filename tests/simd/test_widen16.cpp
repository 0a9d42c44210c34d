// Batches of float widened from 16-bit storage in registers (simd::load_as) equal the scalar
// conversions on every bit pattern, in the ISA of the build (AVX-512 natively, AVX2 in the
// -march=x86-64-v3 build of this file).
#include <xattn/simd/compat.hpp>

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

template <class E>
void every_pattern() {
  constexpr std::size_t w = xattn::simd::width<float>;
  std::vector<E> all(0x10000 + w);
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = E::from_bits(std::uint16_t(i));
  float lanes[w];
  for (std::size_t i = 0; i < 0x10000; i += 3) {  // odd offsets: unaligned loads
    xattn::simd::store(lanes, xattn::simd::load_as<float>(all.data() + i));
    for (std::size_t l = 0; l < w; ++l) {
      const float want = float(all[i + l]);
      INFO("bits 0x" << std::hex << all[i + l].bits());
      if (std::isnan(want))
        REQUIRE(std::isnan(lanes[l]));
      else
        REQUIRE(std::bit_cast<std::uint32_t>(lanes[l]) == std::bit_cast<std::uint32_t>(want));
    }
  }
}

}  // namespace

TEST_CASE("load_as<float> widens bfloat16 in registers, exactly") {
  STATIC_REQUIRE(xattn::simd::detail::widens16_v<float, xattn::bfloat16>);
  every_pattern<xattn::bfloat16>();
}

TEST_CASE("load_as<float> widens float16 in registers (F16C), exactly") {
  STATIC_REQUIRE(xattn::simd::detail::widens16_v<float, xattn::float16>);
  every_pattern<xattn::float16>();
}
