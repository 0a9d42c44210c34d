#pragma once
// The facts every ring pass shares: the communicator, this rank, the sequence and who holds
// which rows of it.
#include "balance.hpp"
#include "ring.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

namespace xattn::mpi::detail {

inline constexpr int tag_keys = 71, tag_gradients = 72, tag_home = 73;

struct setup {
  MPI_Comm comm = MPI_COMM_NULL;
  std::size_t rank = 0, ranks = 1, seq_len = 0;
  balance how = balance::zigzag;
  comm_mode mode = comm_mode::ring;
  std::vector<std::vector<segment>> segments;  // every rank's, so that each knows the whole route
  mutable ring_stats stats;                    // of the last call

  std::size_t rows(std::size_t r) const {
    std::size_t n = 0;
    for (const segment& s : segments[r]) n += s.size;
    return n;
  }
  std::size_t max_rows() const {
    std::size_t n = 0;
    for (std::size_t r = 0; r < ranks; ++r) n = std::max(n, rows(r));
    return n;
  }
};

inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

/// Runs f, adding its wall time and this process's CPU time (every thread's) to st.
template <class F>
void timed(ring_stats& st, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  f();
  st.compute_cpu_seconds += process_cpu_seconds() - c0;
  st.compute_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace xattn::mpi::detail
