#pragma once
// Equinox's mask semantics on top of bool_mask: True = attend, and a hidden logit becomes the
// lowest float (jnp.where(mask, logits, finfo.min)) rather than being excluded, so a query that
// sees no key at all gets uniform weights exactly as in equinox. The shape is checked up front
// so the error speaks of num_heads and the sequences, not of the kernel's score tensor.
#include "../error.hpp"
#include "../policy/masks/bool_mask.hpp"

#include <cstddef>
#include <limits>
#include <vector>

namespace xattn::nn {

template <class B>
struct lowest_fill_mask {
  bool_mask_policy<B> inner;

  bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const noexcept {
    return inner.visible(b, h, i, j);
  }
  // float's lowest even for double modules: it must survive the cast to the kernel's type.
  double fill() const noexcept { return double(std::numeric_limits<float>::lowest()); }
  lowest_fill_mask bind(const problem& pr) const { return {inner.bind(pr)}; }
};

template <class B>
lowest_fill_mask<B> lowest_fill_of(bool_mask_policy<B> m) {
  return {std::move(m)};
}

/// lowest_fill(m): bool_mask(m) with equinox's fill.
template <class E>
auto lowest_fill(const E& m) {
  return lowest_fill_of(bool_mask(m));
}

namespace detail {

/// Throws unless `shape` broadcasts (right-aligned, each axis equal or 1) to `target`.
inline void check_mask_shape(const std::vector<std::size_t>& shape, const std::vector<std::size_t>& target,
                             const char* who, const char* target_axes) {
  bool ok = !shape.empty() && shape.size() <= target.size();
  for (std::size_t a = 0; ok && a < shape.size(); ++a) {
    const std::size_t n = shape[shape.size() - 1 - a], t = target[target.size() - 1 - a];
    ok = n == t || n == 1;
  }
  if (!ok)
    xattn::fail(who, ": mask has shape ", xattn::shape_str(shape), " but must be ", target_axes, " = ",
                xattn::shape_str(target), " or broadcast to it (right-aligned, each axis equal or 1); True = attend");
}

}  // namespace detail

}  // namespace xattn::nn
