// A modifier that takes the score alone, not (s, b, h, i, j).
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(xattn::modify(Q * xattn::trans(Q), [](float s) { return 2 * s; })) * Q);
  return int(out.size());
}
