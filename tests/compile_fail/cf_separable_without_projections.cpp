// `separable = true` without projections: the fused pass would compute q·k, not operator(), and the
// result would differ from reference() (a user met 2.267 against 2.405). It must not compile.
#include <xattn/xattn.hpp>

#include <span>
struct half_dot {
  static constexpr bool separable = true;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += q[d] * k[d];
    return s / 2;
  }
};
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(xattn::score(half_dot{}, Q, Q)) * Q);
  return int(out.size());
}
