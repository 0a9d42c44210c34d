// Causal attention over a sequence split across MPI ranks (ring attention, zigzag balance),
// forward and backward, checked on every rank against one process evaluating the whole sequence.
//   mpirun -np 2 ./xattn-ring-attention            (as root: add --allow-run-as-root)
#include <mpi.h>
#include <xattn/mpi.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

// [snippet ring]
using namespace xattn;

// Row `pos` of the whole sequence: any rank can make any row, so each makes only its own.
xt::xtensor<float, 4> rows_of(const std::vector<std::size_t>& rows, std::size_t heads, std::size_t dim, float salt) {
  xt::xtensor<float, 4> x = xt::xtensor<float, 4>::from_shape({1, heads, rows.size(), dim});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (std::size_t d = 0; d < dim; ++d) x(0, h, i, d) = std::sin(salt * float(rows[i] * dim + d + h));
  return x;
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);  // OpenMP threads inside each rank
  {
    const std::size_t seq_len = 1024, heads = 4, dim = 32;
    mpi::context cp(MPI_COMM_WORLD, seq_len, mpi::balance::zigzag);
    const std::vector<std::size_t> rows = cp.local_rows();  // e.g. 0-255 and 768-1023 on rank 0 of 2
    const auto q = rows_of(rows, heads, dim, 0.37f), k = rows_of(rows, heads, dim, 0.11f),
               v = rows_of(rows, heads, dim, 0.23f), d_out = rows_of(rows, heads, dim, 0.05f);

    auto e = softmax(mask(ref(q) * trans(ref(k)) / std::sqrt(float(dim)), causal())) * ref(v);
    auto f = cp.eval_with_lse(e);   // f.output, f.lse: this rank's rows
    auto g = cp.grad(e, f, d_out);  // g.dq, g.dk, g.dv: this rank's rows

    // The same on one process, for the whole sequence; compare this rank's rows.
    std::vector<std::size_t> all(seq_len);
    for (std::size_t i = 0; i < seq_len; ++i) all[i] = i;
    const auto Q = rows_of(all, heads, dim, 0.37f), K = rows_of(all, heads, dim, 0.11f),
               V = rows_of(all, heads, dim, 0.23f), dO = rows_of(all, heads, dim, 0.05f);
    auto E = softmax(mask(ref(Q) * trans(ref(K)) / std::sqrt(float(dim)), causal())) * ref(V);
    auto F = eval_with_lse(E);
    auto G = grad(E, F, dO);
    double worst = 0;
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < rows.size(); ++i)
        for (std::size_t d = 0; d < dim; ++d)
          for (auto [a, b] : {std::pair{f.output(0, h, i, d), F.output(0, h, rows[i], d)},
                              {g.dq(0, h, i, d), G.dq(0, h, rows[i], d)},
                              {g.dk(0, h, i, d), G.dk(0, h, rows[i], d)},
                              {g.dv(0, h, i, d), G.dv(0, h, rows[i], d)}})
            worst = std::max(worst, double(std::abs(a - b)));
    std::printf("rank %zu of %zu: rows %zu-%zu and %zu-%zu, output and gradients within %.1e of one process\n",
                cp.rank(), cp.ranks(), rows.front(), cp.segments(cp.rank()).front().size - 1 + rows.front(),
                cp.segments(cp.rank()).back().first, rows.back(), worst);
    if (!(worst < 1e-5)) return 1;
  }
  MPI_Finalize();
}
// [end ring]
