// Integer tensors are not attention operands.
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<int, 3> q = xt::ones<int>({1, 2, 2});
  auto Q = xattn::ref(q);
  return int(sizeof(Q));
}
