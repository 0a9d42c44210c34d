// hadamard_row: the normalised Walsh-Hadamard matrix by its definition, blockwise, orthogonal and
// its own inverse.
#include "support/random.hpp"

#include <xattn/kernel/hadamard.hpp>

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <vector>

using namespace xattn;

TEST_CASE("hadamard_row: (-1)^popcount(i & j) / sqrt(block) on each block, its own inverse") {
  testing::rng r(1);
  CHECK(kernel::hadamard_block(128) == 128);
  CHECK(kernel::hadamard_block(96) == 32);
  CHECK(kernel::hadamard_block(80) == 16);
  for (const std::size_t n : {std::size_t(8), std::size_t(96), std::size_t(128)}) {
    INFO("n " << n);
    const std::size_t block = kernel::hadamard_block(n);
    const auto x = r.tensor<double>({n});
    std::vector<double> y(x.begin(), x.end());
    kernel::hadamard_row(y.data(), n, block);
    double xx = 0, yy = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t b0 = i / block * block;
      double want = 0;
      for (std::size_t j = b0; j < b0 + block; ++j)
        want += (std::popcount((i - b0) & (j - b0)) % 2 ? -1.0 : 1.0) * x(j) / std::sqrt(double(block));
      CHECK(y[i] == Approx(want).margin(1e-12));
      xx += x(i) * x(i), yy += y[i] * y[i];
    }
    CHECK(yy == Approx(xx).epsilon(1e-12));  // orthogonal
    kernel::hadamard_row(y.data(), n, block);
    for (std::size_t i = 0; i < n; ++i) CHECK(y[i] == Approx(x(i)).margin(1e-12));  // H H = I
  }
}
