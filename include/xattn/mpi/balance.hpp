#pragma once
// Which rows of a sequence each rank holds. contiguous: rank r holds the r-th of P equal parts.
// zigzag: the sequence is cut into 2P chunks and rank r holds chunks r and 2P - 1 - r, so that
// under a causal mask every rank has one early and one late chunk and the same work
// (ring-flash-attention's zigzag). Parts differ by at most one row when P does not divide S.
// No MPI here: the layout is pure arithmetic, the same on every rank.
#include "../error.hpp"

#include <cstddef>
#include <vector>

namespace xattn::mpi {

enum class balance { contiguous, zigzag };

/// A run of consecutive global positions held by one rank: [first, first + size) of the
/// sequence, stored from row `local` of that rank's tensors.
struct segment {
  std::size_t first = 0, size = 0, local = 0;
};

/// The segments rank `rank` of `ranks` holds, in local order.
inline std::vector<segment> segments_of(std::size_t seq_len, std::size_t ranks, std::size_t rank, balance how) {
  if (ranks == 0 || rank >= ranks) fail("mpi: rank ", rank, " of ", ranks, " ranks does not exist");
  const std::size_t parts = how == balance::zigzag ? 2 * ranks : ranks;
  auto bound = [&](std::size_t c) { return seq_len * c / parts; };
  std::vector<segment> s;
  auto add = [&](std::size_t c) {
    const std::size_t local = s.empty() ? 0 : s.back().local + s.back().size;
    s.push_back({bound(c), bound(c + 1) - bound(c), local});
  };
  add(rank);
  if (how == balance::zigzag) add(parts - 1 - rank);
  return s;
}

/// The number of rows rank `rank` holds.
inline std::size_t rows_of(std::size_t seq_len, std::size_t ranks, std::size_t rank, balance how) {
  std::size_t n = 0;
  for (const segment& s : segments_of(seq_len, ranks, rank, how)) n += s.size;
  return n;
}

}  // namespace xattn::mpi
