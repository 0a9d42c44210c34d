// Projections declared, but project_query returns void instead of the per-query term.
#include <xattn/xattn.hpp>

#include <span>
struct scaled {
  static constexpr bool separable = true;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += 2 * q[d] * k[d];
    return s;
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  void project_query(std::span<const T> q, std::span<T> fq) const {
    for (std::size_t d = 0; d < q.size(); ++d) fq[d] = 2 * q[d];
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> fk) const {
    for (std::size_t d = 0; d < k.size(); ++d) fk[d] = k[d];
    return 0;
  }
};
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(xattn::score(scaled{}, Q, Q)) * Q);
  return int(out.size());
}
