// The ring's backward covers Q * trans(K) scores; a scoring policy's gradients over the ring are
// not implemented, and cp.grad says so (one process has them).
#include <xattn/mpi.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  xattn::mpi::context cp(MPI_COMM_WORLD, 8);
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 8, 4}), k = q, v = q;
  const auto e = xattn::softmax(xattn::score(xattn::scaled_dot{}, xattn::ref(q), xattn::ref(k))) * xattn::ref(v);
  const auto f = cp.eval_with_lse(e);
  auto g = cp.grad(e, f, f.output);
  (void)g;
  MPI_Finalize();
}
