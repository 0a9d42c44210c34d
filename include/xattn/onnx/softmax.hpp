#pragma once
// ONNX Softmax-13: y = exp(x - max) / sum(exp(x - max)) along one axis of an N-D
// tensor. (Opsets 1 and 11 flattened to 2-D at the axis instead; not handled here.)

#include "../error.hpp"

#include <xtensor/xarray.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace xattn::onnx {

// Computed in double whatever T is: subtracting the max keeps exp() in range (inputs
// like 10000 would overflow otherwise), and double accumulation makes the single final
// rounding to T the only error, which is what the float64 reference does.
template <class T>
xt::xarray<T> softmax(const xt::xarray<T>& x, std::int64_t axis = -1) {
  static_assert(std::is_floating_point_v<T>, "softmax needs a floating-point tensor");
  const auto rank = static_cast<std::int64_t>(x.dimension());
  if (axis < -rank || axis >= rank)
    throw std::invalid_argument("softmax: axis " + std::to_string(axis) + " is out of range for shape " +
                                xattn::shape_str(x.shape()) + " (valid: " + std::to_string(-rank) + ".." +
                                std::to_string(rank - 1) + ")");
  const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);

  // View the tensor as (outer, n, inner): the softmax runs over n with stride inner.
  std::size_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < a; ++d) outer *= x.shape()[d];
  for (std::size_t d = a + 1; d < x.dimension(); ++d) inner *= x.shape()[d];
  const std::size_t n = x.shape()[a];

  // Row-major copies, so the flat (outer, n, inner) indexing holds for any input layout.
  const xt::xarray<double, xt::layout_type::row_major> in = x;
  xt::xarray<double, xt::layout_type::row_major> out(in.shape());
  const double* src = in.data();
  double* dst = out.data();
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < inner; ++i) {
      const std::size_t base = o * n * inner + i;
      double m = -INFINITY;
      for (std::size_t k = 0; k < n; ++k) m = std::fmax(m, src[base + k * inner]);
      double sum = 0;
      for (std::size_t k = 0; k < n; ++k) sum += dst[base + k * inner] = std::exp(src[base + k * inner] - m);
      for (std::size_t k = 0; k < n; ++k) dst[base + k * inner] /= sum;
    }
  }
  return xt::xarray<T>(out);
}

}  // namespace xattn::onnx
