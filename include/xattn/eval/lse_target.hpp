#pragma once
// Where the fused pass writes the per-row log-sum-exp, when asked (eval_with_lse, split-K partials).
#include <cstddef>

namespace xattn {

/// Element (b, h, i) at b*sb + h*sh + i*si; no data: not wanted.
template <class T>
struct lse_target {
  T* data = nullptr;
  std::ptrdiff_t sb = 0, sh = 0, si = 0;
  T& at(std::size_t b, std::size_t h, std::size_t i) const noexcept {
    return data[std::ptrdiff_t(b) * sb + std::ptrdiff_t(h) * sh + std::ptrdiff_t(i) * si];
  }
};

}  // namespace xattn
