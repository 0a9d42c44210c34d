#pragma once
// How a tensor is handed over between the user and xattn: (B, S, D), (B, H, S, D), or packed heads
// (B, S, H*D). The kernel sees every one as a (B, H, S, D) layout; this is the one place the three
// are told apart.
#include "layout.hpp"

#include <array>
#include <cstddef>
#include <vector>

namespace xattn {

enum class form { bsd, bhsd, packed };

/// A (B, H, S, L) tensor in form f: the shape the user sees and its dense row-major layout.
struct formed {
  std::vector<std::size_t> user_shape;
  layout<4> at;
};

inline formed in_form(form f, const std::array<std::size_t, 4>& s) {
  const auto h = std::ptrdiff_t(s[1]), sq = std::ptrdiff_t(s[2]), n = std::ptrdiff_t(s[3]);
  switch (f) {
    case form::bsd:
      return {{s[0], s[2], s[3]}, {s, {sq * n, 0, n, 1}}};
    case form::packed:
      return {{s[0], s[2], s[1] * s[3]}, {s, {sq * h * n, n, h * n, 1}}};
    case form::bhsd:
      break;
  }
  return {{s[0], s[1], s[2], s[3]}, layout<4>::row_major(s)};
}

}  // namespace xattn
