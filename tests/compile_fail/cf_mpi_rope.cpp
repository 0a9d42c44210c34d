// Rotary embeddings in a ring: not supported yet, and the context says so first (rotate Q and K
// before the ring, or evaluate in one process).
#include <xattn/mpi.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  xattn::mpi::context cp(MPI_COMM_WORLD, 8);
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 8, 4}), k = q, v = q;
  xt::xtensor<std::int64_t, 1> pos = xt::arange<std::int64_t>(8);
  const auto e = xattn::softmax(xattn::rope(xattn::ref(q), pos) * xattn::trans(xattn::ref(k))) * xattn::ref(v);
  const auto f = cp.eval_with_lse(e);
  (void)f;
  MPI_Finalize();
}
