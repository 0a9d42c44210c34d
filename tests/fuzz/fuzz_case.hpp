#pragma once
// One fuzz case, drawn from (run seed, case index) alone: the pipeline, element type, storage,
// sizes, schedule and query amplitude. Operand values and policy parameters come from the same
// generator afterwards, so `--seed S --case K --only` replays case K bit for bit.
#include "pipelines.hpp"

#include <xattn/schedule.hpp>

#include <cstdint>
#include <string>

namespace xattn::fuzz {

/// How operands are stored. The first three give rank-0 (xarray-typed) terminals, so they share
/// kernel instantiations; raw and packed are separate terminal types.
enum class storage {
  contiguous,  // row-major xarray, rank 3 or 4
  strided,     // xt::view with steps and offsets into a larger, NaN-filled buffer
  transposed,  // xt::transpose of (B, S, H, D) / (B, D, S) storage: non-unit stride on D or S
  raw,         // ref(ptr, shape, strides): any axis order, padding, reversed axes (negative strides)
  packed,      // heads(view, H) over (B, S, H*D) with padded rows
  cache        // K and V a kv_cache's pages: ragged sequences appended in chunks, some forked
};

inline const char* name(storage s) {
  switch (s) {
    case storage::contiguous:
      return "contiguous";
    case storage::strided:
      return "strided-view";
    case storage::transposed:
      return "transposed";
    case storage::raw:
      return "raw-pointer";
    case storage::cache:
      return "kv-cache";
    default:
      return "packed-heads";
  }
}

inline const char* name(element e) {
  switch (e) {
    case element::f32:
      return "float";
    case element::f64:
      return "double";
    case element::bf16:
      return "bfloat16";
    case element::f16:
      return "float16";
    default:
      return "mixed(float Q, bfloat16 K, float16 V)";
  }
}

struct fuzz_case {
  std::uint64_t run_seed = 0, index = 0;
  element elem = element::f32;
  storage kind = storage::contiguous;
  std::size_t scorer = 0, masks = 0;
  testing::case_sizes sizes{};
  schedule sch{};
  double q_amplitude = 1;
  bool fp8_pages = false;  // a float case's cache stores float8_e4m3 keys and values
  bool q4_pages = false;   // or q4 keys and values
  bool q4c_keys = false;   // q4 pages' keys quantized per channel over each page (q4c)
};

/// SplitMix64 finaliser: decorrelates neighbouring (seed, index) pairs.
constexpr std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline std::uint64_t case_seed(std::uint64_t run_seed, std::uint64_t index) { return mix(mix(run_seed) ^ index); }

/// Draw everything but the values.
fuzz_case draw_case(testing::rng& r, std::uint64_t run_seed, std::uint64_t index);

std::string describe(const fuzz_case& c);

}  // namespace xattn::fuzz
