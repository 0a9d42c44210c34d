// `make demo`: the seeds' pipelines and the catalogue, each printed next to what its source expects.
#include "catalogue/band_mask.hpp"
#include "catalogue/causal_alibi.hpp"
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/nadaraya_watson.hpp"
#include "catalogue/vector_sum.hpp"
#include "d2l_additive_attention.hpp"
#include "d2l_dot_product_attention.hpp"
#include "d2l_masked_softmax.hpp"
#include "seeds_example.hpp"

#include <xtensor/xio.hpp>
#include <xtensor/xrandom.hpp>

#include <iostream>

namespace {

void section(const char* title) { std::cout << "\n== " << title << " ==\n"; }

}  // namespace

int main() {
  using namespace xattn;
  xt::random::seed(0);
  std::cout << std::fixed;
  std::cout.precision(4);

  section("d2l masked_softmax, X = rand(2, 2, 4)");
  xt::xtensor<float, 3> x = xt::random::rand<float>({2, 2, 4});
  std::cout << "valid_lens [2, 3]:\n" << dsl::masked_softmax(x, xt::xtensor<int, 1>{2, 3}) << "\n";
  std::cout << "valid_lens [[1, 3], [2, 4]]:\n" << dsl::masked_softmax(x, xt::xtensor<int, 2>{{1, 3}, {2, 4}}) << "\n";
  std::cout << "(d2l: zeros beyond each length, each row sums to 1)\n";

  const dsl::seeds_example ex;
  section("d2l DotProductAttention, worked example");
  std::cout << dsl::dot_product_attention(ex.dot_queries, ex.keys, ex.values, ex.valid_lens) << "\n";
  std::cout << "d2l expects: [[[ 2,  3,  4,  5]], [[10, 11, 12, 13]]]\n";

  section("d2l AdditiveAttention (query size 20, key size 2, 8 hidden), worked example");
  const xt::xtensor<float, 2> w_q = xt::random::randn<float>({8, 20}), w_k = xt::random::randn<float>({8, 2});
  const xt::xtensor<float, 1> w_v = xt::random::randn<float>({8});
  std::cout << dsl::additive_attention(ex.add_queries, ex.keys, ex.values, ex.valid_lens, w_q, w_k, w_v) << "\n";
  std::cout << "d2l expects: [[[ 2,  3,  4,  5]], [[10, 11, 12, 13]]] (equal keys: uniform over the valid ones)\n";

  section("catalogue: cosine scores with temperature 0.1 (a user policy)");
  xt::xtensor<float, 3> q = xt::random::randn<float>({1, 2, 3}), k = xt::random::randn<float>({1, 5, 3});
  auto cq = ref(q), ck = ref(k);
  std::cout << eval(softmax(score(dsl::cosine_with_temperature{0.1}, cq, ck))) << "\n";

  section("catalogue: vector-sum scores ignore the query (d2l exercise)");
  std::cout << eval(softmax(score(dsl::vector_sum{}, cq, ck))) << "\n(both rows are equal)\n";

  section("catalogue: band mask |i - j| <= 1 on 5 x 5 (a user mask)");
  xt::xtensor<float, 3> s = xt::zeros<float>({1, 5, 5});
  std::cout << eval(softmax(mask(ref(s), dsl::band_mask{1}))) << "\n";

  section("catalogue: causal + ALiBi, 2 heads, 4 tokens: weights of head 0");
  xt::xtensor<float, 4> q4 = xt::zeros<float>({1, 2, 4, 8});
  auto z = ref(q4);
  std::cout << xt::view(eval(softmax(mask(alibi(z * trans(z), alibi_op::standard_slopes(2)), causal()))), 0, 0) << "\n";

  section("catalogue: Nadaraya-Watson regression with a Gaussian kernel (sigma = 0.5)");
  xt::xtensor<float, 3> xt_train = xt::xtensor<float, 3>::from_shape({1, 50, 1}), yt = xt_train;
  for (std::size_t i = 0; i < 50; ++i) {
    xt_train(0, i, 0) = float(i) / 10;
    yt(0, i, 0) = 2 * std::sin(xt_train(0, i, 0)) + std::pow(xt_train(0, i, 0), 0.8f);
  }
  xt::xtensor<float, 3> xq = {{{1.0f}, {2.5f}, {4.0f}}};
  std::cout << "f(x) at x = 1, 2.5, 4: " << dsl::nadaraya_watson(xq, xt_train, yt, 0.5) << "\n";
  std::cout << "truth:                 " << 2 * std::sin(1.0) + 1.0 << ", " << 2 * std::sin(2.5) + std::pow(2.5, 0.8)
            << ", " << 2 * std::sin(4.0) + std::pow(4.0, 0.8) << "\n";
  return 0;
}
