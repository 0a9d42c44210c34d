#pragma once
// Sums over the ranks of what every rank holds whole: bias-tensor gradients and a scoring
// policy's parameter gradients. In rank order, ((x0 + x1) + x2) + ..., then sent from the last
// rank to all: the same bits on every rank and in every run (an MPI_Allreduce may pick its
// order by message size and rank count).
#include "../error.hpp"
#include "../policy/gradient.hpp"

#include <mpi.h>

#include <climits>
#include <tuple>
#include <type_traits>
#include <vector>

namespace xattn::mpi::detail {

inline constexpr int tag_reduce = 74;

template <class T>
MPI_Datatype mpi_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
}

/// data[0, n) summed over the ranks of comm, in rank order. Collective.
template <class T>
void sum_in_rank_order(MPI_Comm comm, T* data, std::size_t n) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  if (ranks == 1 || n == 0) return;
  if (n > std::size_t(INT_MAX)) fail("mpi: a gradient of ", n, " elements is over MPI's int count");
  const int count = int(n);
  if (rank > 0) {
    std::vector<T> before(n);
    MPI_Recv(before.data(), count, mpi_type<T>(), rank - 1, tag_reduce, comm, MPI_STATUS_IGNORE);
    for (std::size_t i = 0; i < n; ++i) data[i] = before[i] + data[i];
  }
  if (rank + 1 < ranks) MPI_Send(data, count, mpi_type<T>(), rank + 1, tag_reduce, comm);
  MPI_Bcast(data, count, mpi_type<T>(), ranks - 1, comm);
}

/// A scoring policy's parameter gradients summed over the ranks, part by part (parts(): the
/// members, each a double or a contiguous tensor of double; policy/gradient.hpp).
template <class G>
void sum_parameters_in_rank_order(MPI_Comm comm, G& g) {
  if constexpr (!std::is_same_v<G, no_parameters>)
    std::apply(
        [&](auto&... part) {
          auto one = [&](auto& x) {
            if constexpr (std::is_arithmetic_v<std::decay_t<decltype(x)>>)
              sum_in_rank_order(comm, &x, 1);
            else
              sum_in_rank_order(comm, x.data(), x.size());
          };
          (one(part), ...);
        },
        g.parts());
}

}  // namespace xattn::mpi::detail
