#pragma once
// Blocks of 16 keys of a page whose rows are interleaved by pairs of codes (a cache's int8 and q4
// keys): one 32-byte load holds a pair of codes of each of 16 consecutive rows, so the integer
// score products (qk_q8.hpp, qk_q4.hpp) add a block's products up in the lanes of a register.
// Here: whether rows form such a block, prefetching one, gathering rows that do not (a
// selection's, pages of other sizes) into one on the stack, and the loop over a score tile's
// blocks. A row handle Row has q, scale, col, page_rows, scattered, code_at(i), scale_at(i) and
// features_per_pair (the features a pair of codes holds).
#include "qk.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace xattn::kernel::detail {

/// Keys per block: one 32-byte load holds a pair of codes of each.
inline constexpr std::size_t pair_block = 16;

/// Features per scale of the formats read so.
inline constexpr std::size_t pair_group = 32;

/// Whether the `kept` rows from k0 to kl are consecutive rows of one page, at least pair_block of
/// which follow k0 in its page (they may lie past the sequence's end): pages of a multiple of 16
/// rows, k0 at a multiple of 16 (a page's head part starts on a cache line). A selection's rows
/// (scattered) never are, even when its first and last are 15 rows apart.
template <class Row>
inline bool in_pair_block(const Row& k0, const Row& kl, std::size_t kept) noexcept {
  return !k0.scattered && k0.page_rows % pair_block == 0 &&
         reinterpret_cast<std::uintptr_t>(k0.q) % (2 * pair_block) == 0 && k0.col % pair_group == 0 &&
         kl.q == k0.q + 2 * (kept - 1) && kl.scale == k0.scale + (kept - 1) && kl.col == k0.col &&
         kl.page_rows == k0.page_rows;
}

/// Asks for the cache lines of a pair block's n features and their scales (into L2).
template <class Row>
inline void prefetch_pair_block(const Row& k0, std::size_t n) noexcept {
  const auto* codes = k0.q + k0.code_at(k0.col);
  const std::size_t ps = 2 * k0.page_rows, step = ps >= 64 ? 1 : 64 / ps;
  for (std::size_t p = 0; p < n / Row::features_per_pair; p += step) __builtin_prefetch(codes + p * ps, 0, 1);
  for (std::size_t d = 0; d < n; d += pair_group) __builtin_prefetch(k0.scale_at(k0.col + d), 0, 1);
}

/// The end of a group in the pair products: f[r][h] += (the sum of acc[r][h]'s chains, exact in
/// int32) · the group's 16 key scales at `scales` (`lanes` per half), converted and added once.
template <class L, std::size_t R, std::size_t halves, std::size_t chains, class I, class B>
[[gnu::always_inline]] inline void add_group_sums(const I (&acc)[R][halves][chains], const float* scales,
                                                  B (&f)[R][halves]) noexcept {
  constexpr std::size_t lanes = pair_block / halves;
  each(upto<R * halves>, [&](auto i) {
    constexpr std::size_t r = decltype(i)::value / halves, h = decltype(i)::value % halves;
    I sum = acc[r][h][0];
    each(upto<chains - 1>, [&](auto u) { sum = L::add(sum, acc[r][h][u + 1]); });
    f[r][h] = B(L::fmadd(L::to_float(sum), simd::load(scales + h * lanes), f[r][h]));
  });
}

/// s[r, t] = qs[r] · f[r]'s lane t for the first `kept` keys of a block.
template <std::size_t R, std::size_t halves, class B>
[[gnu::always_inline]] inline void store_pair_scores(const B (&f)[R][halves], const float* qs, float* s,
                                                     std::size_t lds, std::size_t kept) noexcept {
  constexpr std::size_t lanes = pair_block / halves;
  each(upto<R>, [&](auto r) {
    alignas(64) float out[pair_block];
    each(upto<halves>, [&](auto h) { (f[r][h] * B(qs[r])).store_aligned(out + h * lanes); });
    std::copy(out, out + kept, s + r * lds);
  });
}

/// The most pairs of codes per row a block of gathered rows holds on the stack (16 KiB).
inline constexpr std::size_t gather_pairs = 512;

/// The kept (<= 16) rows row(c + t) gathered into one block laid out as a page of 16 rows
/// interleaved by pairs (codes: n / features_per_pair pairs of 16 rows, scales: n / 32 groups of
/// 16), lanes past kept zero; returns the block's first row. Rows that do not stand so in their
/// page (a selection's, pages of other sizes) then take the 16-key product, to the same bits.
template <class RowFn, class Code>
inline auto gather_pair_block(RowFn row, std::size_t c, std::size_t kept, std::size_t n, Code* codes,
                              float* scales) noexcept {
  using Row = decltype(row(c));
  const std::size_t pairs = n / Row::features_per_pair;
  for (std::size_t t = 0; t < pair_block; ++t) {
    if (t < kept) {
      const Row k = row(c + t);
      const Code* at = k.q + k.code_at(k.col);  // col a group's start: a pair's first code
      const std::size_t step = 2 * k.page_rows;
      for (std::size_t p = 0; p < pairs; ++p) std::copy_n(at + p * step, 2, codes + p * 2 * pair_block + 2 * t);
      for (std::size_t g = 0; g < n / pair_group; ++g) scales[g * pair_block + t] = *k.scale_at(k.col + g * pair_group);
    } else {
      for (std::size_t p = 0; p < pairs; ++p) std::fill_n(codes + p * 2 * pair_block + 2 * t, 2, Code{});
      for (std::size_t g = 0; g < n / pair_group; ++g) scales[g * pair_block + t] = 0.0f;
    }
  }
  return Row{codes, scales, 0, pair_block};
}

/// A score tile's keys row(0..cols) by blocks of 16: block(R, r, k0, s, kept) scores R query rows
/// from r against the block from k0 into s (s + r · lds + c), key(k, s) one key against every query
/// row (s[r · lds]). Blocks of 16 keys of one page are read in place; the others (a selection's
/// rows, pages of other sizes, blocks not starting on 16 rows) are gathered into a block first, or
/// scored key by key where their pairs exceed the gather's stack. `also` is asked for the rows two
/// blocks ahead, whose codes are prefetched.
template <class RowFn, class Block, class Key>
void pair_blocks(std::size_t rows, RowFn row, std::size_t cols, std::size_t n, float* s, std::size_t lds,
                 row_prefetch also, Block&& block, Key&& key) {
  using Row = decltype(row(0));
  using Code = std::remove_cv_t<std::remove_pointer_t<decltype(Row{}.q)>>;
  constexpr std::size_t rmax = direct_rows<float>, ahead = 2 * pair_block;
  for (std::size_t c = 0; c < cols; c += pair_block) {
    const std::size_t kept = std::min(pair_block, cols - c);
    const Row k0 = row(c);
    if (c + ahead < cols) {
      prefetch_pair_block(row(c + ahead), n);
      also(c + ahead, std::min(c + ahead + pair_block, cols) - c - ahead);
    }
    if (in_pair_block(k0, row(c + kept - 1), kept)) {
      by_direct_rows<rmax>(rows, [&](auto R, std::size_t r) { block(R, r, k0, s + r * lds + c, kept); });
    } else if (n / Row::features_per_pair <= gather_pairs) {
      alignas(64) unsigned char codes[gather_pairs * 2 * pair_block * sizeof(Code)];  // not initialized
      alignas(64) float scales[gather_pairs * Row::features_per_pair / pair_group * pair_block];
      const Row g0 = gather_pair_block(row, c, kept, n, reinterpret_cast<Code*>(codes), scales);
      by_direct_rows<rmax>(rows, [&](auto R, std::size_t r) { block(R, r, g0, s + r * lds + c, kept); });
    } else {
      for (std::size_t t = 0; t < kept; ++t) key(row(c + t), s + c + t);
    }
  }
}

}  // namespace xattn::kernel::detail
