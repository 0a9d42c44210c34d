#pragma once
// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// the generator Random123 calls r123::Philox4x32: the same words for the same counter and key
// (tests/random/test_philox.cpp checks against Random123 itself). Written here because
// <Random123/philox.h> brings <iostream> and every SSE wrapper into each translation unit.
#include <array>
#include <cstdint>

namespace xattn::random {

using philox_counter = std::array<std::uint32_t, 4>;
using philox_key = std::array<std::uint32_t, 2>;

/// The four 32-bit words of Philox4x32-10 for one counter under one key (not `philox4x32`:
/// Random123 defines a macro of that name).
constexpr philox_counter philox4x32_10(philox_counter ctr, philox_key key) noexcept {
  constexpr std::uint64_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // Weyl increments of the key
  for (int round = 0; round < 10; ++round) {
    if (round > 0) key = {key[0] + w0, key[1] + w1};
    const std::uint64_t p0 = m0 * ctr[0], p1 = m1 * ctr[2];
    ctr = {static_cast<std::uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<std::uint32_t>(p1),
           static_cast<std::uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<std::uint32_t>(p0)};
  }
  return ctr;
}

}  // namespace xattn::random
