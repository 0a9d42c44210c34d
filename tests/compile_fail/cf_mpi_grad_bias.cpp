// bias(t) gradients are not distributed over the ring: cp.grad says so.
#include <xattn/mpi.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  xattn::mpi::context cp(MPI_COMM_WORLD, 8);
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 8, 4}), k = q, v = q, b = xt::zeros<float>({1, 1, 8, 8});
  const auto e = xattn::softmax(xattn::ref(q) * trans(xattn::ref(k)) + xattn::bias(b)) * xattn::ref(v);
  const auto f = cp.eval_with_lse(e);
  auto g = cp.grad(e, f, f.output);
  (void)g;
  MPI_Finalize();
}
