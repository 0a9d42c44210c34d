// The values must be a tensor, not another expression.
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(Q * xattn::trans(Q)) * (Q * xattn::trans(Q)));
  return int(out.size());
}
