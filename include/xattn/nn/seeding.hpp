#pragma once
// Where the modules' randomness comes from. Two uses, both pure functions of a 64-bit seed:
//  - parameter init: uniform(-bound, bound) from Philox4x32 keyed by the seed, counter
//    (index / 4, stream, tag), so every tensor of every module is reproducible on any platform
//    (std::uniform_real_distribution is not: its algorithm is implementation-defined);
//  - dropout: the Philox key of a module's n-th training call is call_seed(seed, n), so
//    successive calls drop different weights and a run replays exactly from the same seed.
#include "../random/philox.hpp"

#include <cstddef>
#include <cstdint>

namespace xattn::nn {

/// A bijective 64-bit mixer (Steele, Lea, Flood 2014): distinct inputs give distinct outputs.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The dropout key of call n of a module seeded with `seed`. For one seed, distinct n give
/// distinct keys (splitmix64 is a bijection); the domain constant keeps these keys apart from
/// the raw seed, which parameter init uses.
constexpr std::uint64_t call_seed(std::uint64_t seed, std::uint64_t n) noexcept {
  return splitmix64(splitmix64(seed ^ 0x64726f706f757421ull) + n);
}

/// Counts the training calls of one module and hands out their dropout keys.
class dropout_counter {
 public:
  explicit dropout_counter(std::uint64_t seed = 0) noexcept : seed_(seed) {}
  std::uint64_t next() noexcept { return call_seed(seed_, calls_++); }
  std::uint64_t calls() const noexcept { return calls_; }
  /// Replay from call n (e.g. 0 to repeat a run).
  void rewind(std::uint64_t n = 0) noexcept { calls_ = n; }
  std::uint64_t seed() const noexcept { return seed_; }

 private:
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;
};

/// out[n] = uniform in [-bound, bound) for n < count; `stream` tells a module's tensors apart.
template <class T>
void uniform_init(T* out, std::size_t count, double bound, std::uint64_t seed, std::uint32_t stream) {
  const random::philox_key key = {std::uint32_t(seed), std::uint32_t(seed >> 32)};
  for (std::size_t n = 0; n < count; n += 4) {
    const std::uint64_t blk = n / 4;
    const auto words = random::philox4x32_10({std::uint32_t(blk), std::uint32_t(blk >> 32), stream, 0x696e6974u}, key);
    for (std::size_t w = 0; w < 4 && n + w < count; ++w) {
      const double u = double(words[w] >> 8) * 0x1p-24;  // 24 bits: exact in float, in [0, 1)
      out[n + w] = T(bound * (2 * u - 1));
    }
  }
}

}  // namespace xattn::nn
