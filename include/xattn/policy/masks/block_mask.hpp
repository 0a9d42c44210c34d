#pragma once
// block_mask(kinds, block_size[, f]): a mask given by a table of blocks, as FlexAttention's
// BlockMask. kinds (B', H', ceil(Sq / block_size), ceil(Skv / block_size)), B' and H' 1 or the
// full size, says of each block of queries x keys whether every pair in it is hidden (0), some are
// (1: f(b, h, i, j) decides each pair) or none is (2). The kernel skips the hidden blocks, runs the
// full ones without calling f, and asks f only inside partial ones.
#include "../../error.hpp"
#include "../broadcast.hpp"
#include "../problem.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace xattn {

/// What block_mask's table says of one block.
enum class block_kind : std::uint8_t { empty = 0, partial = 1, full = 2 };

/// The mask a partial block of a table without a predicate would need: there is none.
struct no_block_predicate {
  bool operator()(std::size_t, std::size_t, std::size_t, std::size_t) const noexcept { return true; }
};

template <class F>
struct block_mask_policy {
  std::shared_ptr<const std::vector<std::uint8_t>> kinds;  // dense (B', H', nq, nk)
  std::array<std::size_t, 4> shape{};
  std::size_t q_block = 128, kv_block = 128;
  F f{};
  // per (B', H', query block): the keys from the first to past the last block that is not empty;
  // or, when the caller knows them (row_spans, (B', H', Sq) pairs), per row: a tighter bound
  std::shared_ptr<const std::vector<std::pair<std::int64_t, std::int64_t>>> spans, row_spans;
  bool rows_are_spans = false;  // every row's visible keys are exactly its row span: f is never asked

  block_kind kind(std::size_t b, std::size_t h, std::size_t qb, std::size_t kb) const noexcept {
    const std::size_t bb = shape[0] == 1 ? 0 : b, hh = shape[1] == 1 ? 0 : h;
    return block_kind((*kinds)[((bb * shape[1] + hh) * shape[2] + qb) * shape[3] + kb]);
  }

  bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    if (rows_are_spans) {
      const auto [first, last] = row_span(b, h, i);
      return std::int64_t(j) >= first && std::int64_t(j) < last;
    }
    switch (kind(b, h, i / q_block, j / kv_block)) {
      case block_kind::empty:
        return false;
      case block_kind::full:
        return true;
      default:
        return bool(f(b, h, i, j));
    }
  }

  /// Queries [i0, i1) x keys [j0, j1): hidden when every table block it touches is empty, visible
  /// when every one is full.
  block classify(std::size_t b, std::size_t h, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    bool any_empty = false, any_other = false;
    for (std::size_t qb = i0 / q_block; qb * q_block < i1; ++qb)
      for (std::size_t kb = j0 / kv_block; kb * kv_block < j1; ++kb) {
        const block_kind k = kind(b, h, qb, kb);
        if (k == block_kind::partial) return block::partial;
        (k == block_kind::empty ? any_empty : any_other) = true;
        if (any_empty && any_other) return block::partial;
      }
    return any_other ? block::visible : block::hidden;
  }

  /// A bound on row i's visible keys: its block row's first to last non-empty block (bind() finds
  /// them). The kernel leaves out the columns past it, as it does past the causal diagonal.
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t h, std::size_t i) const noexcept {
    const std::size_t bb = shape[0] == 1 ? 0 : b, hh = shape[1] == 1 ? 0 : h;
    if (row_spans) return (*row_spans)[(bb * shape[1] + hh) * (row_spans->size() / (shape[0] * shape[1])) + i];
    return (*spans)[(bb * shape[1] + hh) * shape[2] + i / q_block];
  }

  /// Row i's scores s[0, n) at keys j0...: a block's run filled, skipped or asked pair by pair.
  template <class T>
  void hide_row(T* s, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0, T value) const {
    if (rows_are_spans) {  // causal, windows, prefixes: two fills
      const auto [first, last] = row_span(b, h, i);
      const std::int64_t lo = std::clamp<std::int64_t>(first - std::int64_t(j0), 0, std::int64_t(n));
      const std::int64_t hi = std::clamp<std::int64_t>(last - std::int64_t(j0), lo, std::int64_t(n));
      std::fill(s, s + lo, value);
      std::fill(s + hi, s + n, value);
      return;
    }
    const std::size_t qb = i / q_block;
    for (std::size_t c = 0; c < n;) {
      const std::size_t j = j0 + c, end = std::min(n, (j / kv_block + 1) * kv_block - j0);
      switch (kind(b, h, qb, j / kv_block)) {
        case block_kind::empty:
          std::fill(s + c, s + end, value);
          break;
        case block_kind::full:
          break;
        default:
          for (std::size_t x = c; x < end; ++x)
            if (!f(b, h, i, j0 + x)) s[x] = value;
      }
      c = end;
    }
  }

  block_mask_policy bind(const problem& pr) const {
    const auto blocks = [](std::size_t n, std::size_t size) { return (n + size - 1) / size; };
    if (q_block == 0 || kv_block == 0) fail("block_mask(kinds, block_size): block_size must be positive");
    const std::array<std::size_t, 4> want{pr.batch, pr.q_heads, blocks(pr.q_len, q_block), blocks(pr.kv_len, kv_block)};
    const bool fits = (shape[0] == 1 || shape[0] == want[0]) && (shape[1] == 1 || shape[1] == want[1]) &&
                      shape[2] == want[2] && shape[3] == want[3];
    if (!fits || !kinds || kinds->size() != shape[0] * shape[1] * shape[2] * shape[3])
      fail("block_mask(kinds, block_size): kinds has shape ", shape_str(shape), ", need (", want[0], " or 1, ", want[1],
           " or 1, ", want[2], ", ", want[3], ") for queries ", pr.q_len, " and keys ", pr.kv_len, " in blocks of ",
           q_block, " x ", kv_block);
    for (const std::uint8_t k : *kinds)
      if (k > 2)
        fail("block_mask(kinds, block_size): kinds holds ", int(k), "; it may hold 0 (empty), 1 (partial), 2 (full)");
    if constexpr (std::is_same_v<F, no_block_predicate>)
      if (std::find(kinds->begin(), kinds->end(), std::uint8_t(1)) != kinds->end())
        fail("block_mask(kinds, block_size): kinds has partial blocks (1) but no predicate decides their pairs");
    if (rows_are_spans && !row_spans) fail("block_mask(kinds, block_size): rows_are_spans needs row_spans");
    if (row_spans && row_spans->size() != shape[0] * shape[1] * pr.q_len)
      fail("block_mask(kinds, block_size): ", row_spans->size(), " row spans for ", shape[0], " x ", shape[1],
           " tables of ", pr.q_len, " queries");
    block_mask_policy m = *this;
    auto s = std::make_shared<std::vector<std::pair<std::int64_t, std::int64_t>>>();
    s->reserve(shape[0] * shape[1] * shape[2]);
    for (std::size_t b = 0; b < shape[0]; ++b)
      for (std::size_t h = 0; h < shape[1]; ++h)
        for (std::size_t x = 0; x < shape[2]; ++x) {
          std::size_t first = shape[3], last = 0;
          for (std::size_t y = 0; y < shape[3]; ++y)
            if (kind(b, h, x, y) != block_kind::empty) first = std::min(first, y), last = y + 1;
          if (first >= last) first = last = 0;
          s->emplace_back(std::int64_t(first * kv_block), std::int64_t(std::min(last * kv_block, pr.kv_len)));
        }
    m.spans = std::move(s);
    return m;
  }
};

/// The table's blocks as a mask: kinds any 4-D integer tensor (B', H', nq, nk) of 0 (empty), 1
/// (partial, f decides each pair) and 2 (full); blocks of q_block queries x kv_block keys.
template <class E, class F = no_block_predicate>
auto block_mask(const E& kinds, std::size_t q_block, std::size_t kv_block, F f = {}) {
  static_assert(std::is_integral_v<std::remove_cv_t<typename E::value_type>>,
                "xattn: block_mask(kinds, block_size): kinds must be an integer tensor");
  if (kinds.dimension() != 4)
    fail("block_mask(kinds, block_size): kinds has rank ", kinds.dimension(),
         "; it must be (B, H, query blocks, key blocks)");
  block_mask_policy<F> m;
  auto table = std::make_shared<std::vector<std::uint8_t>>();
  table->reserve(kinds.size());
  for (std::size_t a = 0; a < 4; ++a) m.shape[a] = kinds.shape()[a];
  for (std::size_t b = 0; b < m.shape[0]; ++b)
    for (std::size_t h = 0; h < m.shape[1]; ++h)
      for (std::size_t x = 0; x < m.shape[2]; ++x)
        for (std::size_t y = 0; y < m.shape[3]; ++y) {
          const auto k = std::int64_t(kinds(b, h, x, y));
          if (k < 0 || k > 2)
            fail("block_mask(kinds, block_size): kinds(", b, ", ", h, ", ", x, ", ", y, ") is ", k,
                 "; it may hold 0 (empty), 1 (partial), 2 (full)");
          table->push_back(std::uint8_t(k));
        }
  m.kinds = std::move(table);
  m.q_block = q_block;
  m.kv_block = kv_block;
  m.f = std::move(f);
  return m;
}

template <class E, class F = no_block_predicate>
requires std::is_invocable_v<const F&, std::size_t, std::size_t, std::size_t, std::size_t>
auto block_mask(const E& kinds, std::size_t block_size, F f = {}) {
  return block_mask(kinds, block_size, block_size, std::move(f));
}

}  // namespace xattn
