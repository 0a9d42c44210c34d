// A positions tensor passed to transformed(X, t) where a load transform belongs (rope(X, positions) was meant).
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<float, 4> q = xt::ones<float>({1, 2, 2, 2});
  xt::xtensor<int, 1> pos = {0, 1};
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(xattn::transformed(Q, pos) * xattn::trans(Q)) * Q);
  return int(out.size());
}
