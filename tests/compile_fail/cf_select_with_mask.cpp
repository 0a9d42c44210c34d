// A mask beside select(K, idx): it would see each query's selected columns, not key positions.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 2, 3, 8}), k = xt::zeros<float>({1, 2, 20, 8}), v = k;
  xt::xtensor<std::int32_t, 4> idx = xt::zeros<std::int32_t>({1, 2, 3, 4});
  auto out = eval(softmax(mask(ref(q) * trans(select(ref(k), idx)), causal())) * select(ref(v), idx));
  (void)out;
}
