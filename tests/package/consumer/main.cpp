// A downstream project using the installed package: the seeds' worked example.
#include <xattn/xattn.hpp>

#include <iostream>

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
}
