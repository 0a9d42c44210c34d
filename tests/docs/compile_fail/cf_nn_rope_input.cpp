// docs/guide.md quotes the marked lines as a call that must not compile;
// tests/docs/CMakeLists.txt builds this file and requires the diagnostic.
#include <xattn/nn/nn.hpp>
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> x = xt::ones<float>({1, 4, 8});
  xt::xtensor<std::int64_t, 1> pos = {0, 1, 2, 3};
  nn::multihead_attention<float> mha({.num_heads = 2, .query_size = 8});
  // [snippet cf_nn_rope_input]
  auto y = mha(rope(ref(x), pos), x, x);  // a module projects its inputs: rope acts after, in dsl::decoder_attention
  // [end cf_nn_rope_input]
  (void)y;
  return 0;
}
