#pragma once
// One collective check before any ring: every rank contributes the facts the ranks must agree on
// (sizes, the expression's type, the sequence layout) and the error its own inputs raised, if
// any; all ranks see all of it and throw the same std::invalid_argument, so a mismatch never
// leaves some ranks waiting for messages that will not come.
#include "../error.hpp"

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xattn::mpi::detail {

struct agreement {
  std::vector<std::pair<const char*, std::int64_t>> facts;  // must be equal on every rank
  std::string local_error;                                  // this rank's own inputs were bad

  void add(const char* name, std::int64_t value) { facts.emplace_back(name, value); }
};

/// Throws on every rank (the same message) unless every rank had no local error and all agree.
inline void check_agreement(MPI_Comm comm, const char* where, const agreement& a) {
  int ranks = 0, rank = 0;
  MPI_Comm_size(comm, &ranks);
  MPI_Comm_rank(comm, &rank);
  const int n = int(a.facts.size());
  std::vector<std::int64_t> mine(std::size_t(n) + 1), all(std::size_t(n + 1) * std::size_t(ranks));
  mine[0] = std::int64_t(a.local_error.size());
  for (int k = 0; k < n; ++k) mine[std::size_t(k) + 1] = a.facts[std::size_t(k)].second;
  MPI_Allgather(mine.data(), n + 1, MPI_INT64_T, all.data(), n + 1, MPI_INT64_T, comm);
  std::vector<int> lengths(std::size_t(ranks), 0), at(std::size_t(ranks), 0);
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    lengths[std::size_t(r)] = int(all[std::size_t(r * (n + 1))]);
    at[std::size_t(r)] = total;
    total += lengths[std::size_t(r)];
  }
  if (total > 0) {
    std::string errors(std::size_t(total), ' ');
    MPI_Allgatherv(a.local_error.data(), int(a.local_error.size()), MPI_CHAR, errors.data(), lengths.data(), at.data(),
                   MPI_CHAR, comm);
    for (int r = 0; r < ranks; ++r)
      if (lengths[std::size_t(r)] > 0)
        fail(where, ": rank ", r, " of ", ranks, ": ",
             errors.substr(std::size_t(at[std::size_t(r)]), std::size_t(lengths[std::size_t(r)])));
  }
  for (int k = 0; k < n; ++k)
    for (int r = 1; r < ranks; ++r) {
      const std::int64_t v0 = all[std::size_t(k) + 1], vr = all[std::size_t(r * (n + 1) + k) + 1];
      if (v0 != vr)
        fail(where, ": the ranks disagree on ", a.facts[std::size_t(k)].first, ": rank 0 has ", v0, ", rank ", r,
             " has ", vr, " (every rank must call it with the same expression and sizes)");
    }
}

/// The local error text of f(): its std::invalid_argument message without the "xattn: " prefix.
template <class F>
std::string local_error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    return m.rfind("xattn: ", 0) == 0 ? m.substr(7) : m;
  }
  return {};
}

}  // namespace xattn::mpi::detail
