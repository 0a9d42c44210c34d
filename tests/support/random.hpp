#pragma once
// Seeded random tensors and shapes for the tests; every failure message carries the seed.
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace xattn::testing {

struct rng {
  std::mt19937_64 gen;
  explicit rng(std::uint64_t seed) : gen(seed) {}

  std::size_t size(std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(gen); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(gen); }

  template <class T>
  xt::xarray<T> tensor(const std::vector<std::size_t>& shape, double lo = -1, double hi = 1) {
    xt::xarray<T> a = xt::xarray<T>::from_shape(shape);
    for (auto& x : a) x = T(uniform(lo, hi));
    return a;
  }

  /// tensor<T>({n}) as a 1-D xtensor, the same draws, filled in place: assigning tensor's xarray to
  /// a 1-D xtensor draws a false -Wmaybe-uninitialized from GCC 12 inside xtl, depending on inlining.
  template <class T>
  xt::xtensor<T, 1> vector(std::size_t n, double lo = -1, double hi = 1) {
    xt::xtensor<T, 1> a = xt::xtensor<T, 1>::from_shape({n});
    for (auto& x : a) x = T(uniform(lo, hi));
    return a;
  }
};

/// max |a - b| over all elements; +inf when the shapes differ, when there is nothing to compare,
/// or when any difference is NaN -- so that `max_abs_diff(a, b) < tol` can only pass on real agreement.
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  const std::vector<std::size_t> sa(a.shape().begin(), a.shape().end()), sb(b.shape().begin(), b.shape().end());
  if (sa != sb || a.size() == 0) return std::numeric_limits<double>::infinity();
  double m = 0;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib) {
    const double d = std::abs(double(*ia) - double(*ib));
    m = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(m, d);
  }
  return m;
}

}  // namespace xattn::testing
