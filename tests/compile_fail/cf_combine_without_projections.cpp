// combine(fq, fk) without the projections it combines.
#include <xattn/xattn.hpp>

#include <cmath>
#include <span>
struct l1 {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    return combine(q, k);
  }
  template <class T>
  T combine(std::span<const T> a, std::span<const T> b) const {
    T s = 0;
    for (std::size_t d = 0; d < a.size(); ++d) s -= std::abs(a[d] - b[d]);
    return s;
  }
};
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(xattn::score(l1{}, Q, Q)) * Q);
  return int(out.size());
}
