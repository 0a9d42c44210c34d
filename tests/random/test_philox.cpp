#include <xattn/random/philox.hpp>

#include <Random123/philox.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>

using xattn::random::philox4x32_10;

TEST_CASE("philox4x32_10 gives Random123's published known answers", "[random]") {
  // Random123's kat_vectors, philox4x32 with 10 rounds.
  STATIC_REQUIRE(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
                 xattn::random::philox_counter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        xattn::random::philox_counter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        xattn::random::philox_counter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("philox4x32_10 is Random123's Philox4x32 for any counter and key", "[random]") {
  std::mt19937 rng(20261129);
  const auto word = [&] { return static_cast<std::uint32_t>(rng()); };
  for (int n = 0; n < 10000; ++n) {
    const r123::Philox4x32::ctr_type ctr = {{word(), word(), word(), word()}};
    const r123::Philox4x32::key_type key = {{word(), word()}};
    const auto want = r123::Philox4x32{}(ctr, key);
    const auto got = philox4x32_10({ctr[0], ctr[1], ctr[2], ctr[3]}, {key[0], key[1]});
    REQUIRE(got == xattn::random::philox_counter{want[0], want[1], want[2], want[3]});
  }
}
