// An integer output type.
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto out = xattn::eval<int>(xattn::softmax(Q * xattn::trans(Q)) * Q);
  return int(out.size());
}
