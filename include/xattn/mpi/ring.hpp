#pragma once
// The ring: at step s rank r holds the key/value block of origin (r - s) mod P. A block travels
// r -> r + 1 -> ... only as far as some rank on its way still needs it (masks decide; every rank
// computes the same route), and the next block is received while the current one is computed
// (double buffering with non-blocking sends and receives). The backward's gradient accumulators
// for a block travel behind it, sent once that step's contribution is added, and go straight home
// from the last rank that needed them.
#include "../error.hpp"

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <vector>

namespace xattn::mpi {

/// How the ring moves blocks. none exists for benchmarks only: no message is sent, every step
/// computes with the rank's own block as if it were the travelling one (results are wrong), so
/// that the ring's time can be compared with the same computation without communication.
enum class comm_mode { ring, none };

/// Where the last call's time went on this rank (for benchmarks: the balance between ranks).
struct ring_stats {
  double compute_seconds = 0;      // wall time in the blocks' kernels
  double compute_cpu_seconds = 0;  // CPU time of the process's threads meanwhile (time the host
                                   // ran other work, or a neighbour slowed a vCPU, is not in it)
  std::size_t blocks = 0;          // (query segment, key segment) blocks computed
  std::size_t bytes_sent = 0;      // by this rank, in ring messages
};

namespace detail {

/// Which rank needs which origin's keys, and how far each block therefore travels.
struct ring_route {
  std::size_t ranks = 1;
  std::vector<char> need;  // need[r * ranks + o]: rank r computes with origin o's keys

  bool needs(std::size_t r, std::size_t o) const { return need[r * ranks + o] != 0; }
  /// The last step at which a rank needs origin o's block (0: only its home).
  std::size_t last_step(std::size_t o) const {
    for (std::size_t t = ranks - 1; t > 0; --t)
      if (needs((o + t) % ranks, o)) return t;
    return 0;
  }
  /// Whether the holder of origin o at step s passes it on.
  bool forwards(std::size_t o, std::size_t s) const { return s + 1 <= last_step(o); }
};

/// A buffer and the one request (send or receive) last started on it.
struct channel_buffer {
  std::vector<std::byte> bytes;
  MPI_Request req = MPI_REQUEST_NULL;
  void wait() { MPI_Wait(&req, MPI_STATUS_IGNORE); }
};

inline int message_size(std::size_t bytes) {
  if (bytes > std::size_t(INT_MAX))
    fail("mpi: a ring message of ", bytes, " bytes is over MPI's int count; use more ranks or a shorter sequence");
  return int(bytes);
}

/// Ring steps over a communicator: origins, neighbours, and the non-blocking transfers.
struct ring_steps {
  MPI_Comm comm;
  std::size_t rank, ranks;
  const ring_route& route;
  bool communicate;
  std::size_t* bytes_sent = nullptr;

  std::size_t origin(std::size_t s) const { return (rank + ranks - s % ranks) % ranks; }
  int next() const { return int((rank + 1) % ranks); }
  int prev() const { return int((rank + ranks - 1) % ranks); }

  /// Step s holds origin(s)'s block in `cur`: start receiving step s + 1's block into `nxt` and
  /// sending `cur` on, each only where the route says so.
  void start_kv(std::size_t s, channel_buffer& cur, channel_buffer& nxt, std::size_t cur_bytes, std::size_t nxt_bytes,
                int tag) const {
    if (!communicate || s + 1 >= ranks) return;
    if (route.forwards(origin(s + 1), s)) {
      nxt.wait();
      MPI_Irecv(nxt.bytes.data(), message_size(nxt_bytes), MPI_BYTE, prev(), tag, comm, &nxt.req);
    }
    if (route.forwards(origin(s), s)) {
      cur.wait();
      MPI_Isend(cur.bytes.data(), message_size(cur_bytes), MPI_BYTE, next(), tag, comm, &cur.req);
      if (bytes_sent) *bytes_sent += cur_bytes;
    }
  }
};

}  // namespace detail
}  // namespace xattn::mpi
