// The first program of docs/guide.md: d2l's worked example of masked dot-product attention.
// tests/docs builds and runs it and checks the printed numbers (xattn-docs-quickstart).
// [snippet quickstart]
#include <xattn/xattn.hpp>

#include <cmath>
#include <iostream>

int main() {
  using namespace xattn;
  // batch 2, one query, 10 keys of size 2, values of size 4 (d2l: arange(40) repeated per batch)
  xt::xtensor<float, 3> queries = xt::ones<float>({2, 1, 2});
  xt::xtensor<float, 3> keys = xt::ones<float>({2, 10, 2});
  xt::xtensor<float, 3> values = xt::xtensor<float, 3>::from_shape({2, 10, 4});
  for (std::size_t n = 0; n < values.size(); ++n) values.flat(n) = float(n % 40);
  xt::xtensor<int, 1> valid_lens = {2, 6};  // batch 0 sees 2 keys, batch 1 sees 6

  auto Q = ref(queries), K = ref(keys), V = ref(values);  // views of the tensors, no copy
  auto attention = softmax(mask(Q * trans(K) / std::sqrt(2.0f), lengths(valid_lens))) * V;  // nothing computed yet
  xt::xtensor<float, 3> out = eval(attention);  // one fused pass; shape (2, 1, 4), the layout of Q

  for (float x : out) std::cout << x << ' ';
  std::cout << '\n';  // prints: 2 3 4 5 10 11 12 13
}
// [end quickstart]
