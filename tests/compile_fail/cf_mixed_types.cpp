// float queries and keys with double values.
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  xt::xtensor<double, 3> v = xt::ones<double>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto V = xattn::ref(v);
  auto out = xattn::eval(xattn::softmax(Q * xattn::trans(Q)) * V);
  return int(out.size());
}
