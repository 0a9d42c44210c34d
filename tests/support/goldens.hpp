#pragma once
// Reading the PyTorch golden files of tests/data/goldens ({"shape": [...], "data": [...]}, row-major).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <xtensor/xarray.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace xattn::testing {

inline nlohmann::json read_golden(const std::string& name) {
  std::ifstream in(std::string(XATTN_GOLDENS_DIR) + "/" + name);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

template <class T>
xt::xarray<T> golden_tensor(const nlohmann::json& j) {
  xt::xarray<T> a = xt::xarray<T>::from_shape(j.at("shape").get<std::vector<std::size_t>>());
  const auto data = j.at("data").get<std::vector<double>>();
  REQUIRE(a.size() == data.size());
  std::copy(data.begin(), data.end(), a.begin());
  return a;
}

/// max |got - want| over the flattened elements (the two must hold as many).
template <class G>
double worst_flat(const G& got, const xt::xarray<double>& want) {
  REQUIRE(got.size() == want.size());
  double m = 0;
  for (std::size_t n = 0; n < want.size(); ++n) m = std::max(m, std::abs(double(got.data()[n]) - want.flat(n)));
  return m;
}

}  // namespace xattn::testing
