// A user policy whose parameter gradients have no parts(): the ranks cannot sum them, and cp.grad
// says which member to add (grad on one process works with it as it is).
#include <xattn/mpi.hpp>

#include <span>

struct learned_scale {  // c·(q·k), c learned
  static constexpr bool separable = true;
  double c = 1;
  struct gradients {
    double d_c = 0;
  };
  using parameter_gradients = gradients;

  void validate(std::size_t, std::size_t) const {}
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += q[d] * k[d];
    return T(c) * s;
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> fq) const {
    for (std::size_t d = 0; d < q.size(); ++d) fq[d] = T(c) * q[d];
    return 0;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> fk) const {
    for (std::size_t d = 0; d < k.size(); ++d) fk[d] = k[d];
    return 0;
  }
  gradients zero_gradients() const { return {}; }
  template <class T>
  void project_query_backward(std::span<const T> q, std::span<const T> dfq, T, std::span<T> dq, gradients& g) const {
    for (std::size_t d = 0; d < q.size(); ++d) dq[d] = T(c) * dfq[d], g.d_c += double(dfq[d] * q[d]);
  }
  template <class T>
  void project_key_backward(std::span<const T>, std::span<const T> dfk, T, std::span<T> dk, gradients&) const {
    for (std::size_t d = 0; d < dfk.size(); ++d) dk[d] = dfk[d];
  }
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  xattn::mpi::context cp(MPI_COMM_WORLD, 8);
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 8, 4}), k = q, v = q;
  const auto e = xattn::softmax(xattn::score(learned_scale{}, xattn::ref(q), xattn::ref(k))) * xattn::ref(v);
  const auto f = cp.eval_with_lse(e);
  auto g = cp.grad(e, f, f.output);
  (void)g;
  MPI_Finalize();
}
