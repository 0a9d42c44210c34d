// A downstream project using the installed package: the seeds' worked example, then the other
// kernel paths (weights, additive scores, softcap, a double-only user policy), built by the test
// with -Wall -Wextra -Werror -march=native: xattn must add no warning to a user's build.
#include <xattn/xattn.hpp>
#if defined(XATTN_CONSUMER_HAS_nn)
#include <xattn/nn/nn.hpp>
#endif
#if defined(XATTN_CONSUMER_HAS_mpi)
#include <xattn/mpi.hpp>
#endif

#include <cmath>
#include <iostream>
#include <span>

struct l1_double {  // a user policy written for double only
  double operator()(std::span<const double> q, std::span<const double> k) const {
    double s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s -= std::abs(q[d] - k[d]);
    return s;
  }
};

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> q = xt::ones<float>({2, 1, 2}), k = xt::ones<float>({2, 10, 2});
  xt::xtensor<float, 3> v = xt::xtensor<float, 3>::from_shape({2, 10, 4});
  for (std::size_t n = 0; n < v.size(); ++n) v.flat(n) = float(n % 40);
  xt::xtensor<int, 1> lens = {2, 6};
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<float, 3> out = eval(softmax(mask(Q * trans(K) / std::sqrt(2.0f), lengths(lens))) * V);
  for (float x : out) std::cout << x << ' ';
  std::cout << '\n';

  const xt::xtensor<float, 2> wq = xt::ones<float>({3, 2}), wk = xt::ones<float>({3, 2});
  const xt::xtensor<float, 1> wv = xt::ones<float>({3});
  const auto weights = eval(softmax(mask(softcap(score(additive{wq, wk, wv}, Q, K), 5.0), lengths(lens))));
  const auto user = eval(softmax(score(l1_double{}, Q, K)) * V);
  std::cout << "weights " << weights(1, 0, 0) << ", user " << user(0, 0, 0) << '\n';  // 1/6, mean of 0, 4, ..., 36

  std::cout << "components:";  // those found by find_package, each used once
#if defined(XATTN_CONSUMER_HAS_nn)
  nn::multihead_attention<float> mha({.num_heads = 2, .query_size = 4});
  const xt::xtensor<float, 2> x = xt::ones<float>({3, 4});
  std::cout << " nn " << mha(x, x, x).shape(1);
#endif
#if defined(XATTN_CONSUMER_HAS_mpi)
  int initialized = 0;
  MPI_Initialized(&initialized);
  std::cout << " mpi " << initialized;
#endif
#if defined(XATTN_CONSUMER_HAS_kernels)  // linked, and its layout is this program's
  std::cout << " kernels " << kernel::precompiled::layout_checked;
#endif
  std::cout << '\n';
}
