#pragma once
// The inputs of d2l's worked example: batch 2, one query, 10 keys of ones (dim 2), values
// arange(40) as (1, 10, 4) repeated over the batch, valid lengths (2, 6).
#include <xtensor/xtensor.hpp>

namespace dsl {

struct seeds_example {
  xt::xtensor<float, 3> keys = xt::ones<float>({2, 10, 2});
  xt::xtensor<float, 3> values = xt::xtensor<float, 3>::from_shape({2, 10, 4});
  xt::xtensor<int, 1> valid_lens = {2, 6};
  xt::xtensor<float, 3> dot_queries = xt::ones<float>({2, 1, 2});   // d2l: normal(0, 1, (2, 1, 2)); any q works
  xt::xtensor<float, 3> add_queries = xt::ones<float>({2, 1, 20});  // additive: query size 20 != key size 2

  seeds_example() {
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t j = 0; j < 10; ++j)
        for (std::size_t c = 0; c < 4; ++c) values(b, j, c) = float(j * 4 + c);
  }
};

}  // namespace dsl
