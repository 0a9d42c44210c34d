#pragma once
// How xattn reports bad input at run time: std::invalid_argument whose message starts with
// "xattn: " and names the argument and the shapes. Public, so that a user policy's validate() or
// bind() reads exactly like the built-ins:  xattn::fail("my_mask: ", n, " ids for a batch of ", b);
#include <array>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace xattn {

/// Throws std::invalid_argument("xattn: " + parts...), each part streamed with operator<<.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream os;
  os << "xattn: ";
  (os << ... << std::forward<Parts>(parts));
  throw std::invalid_argument(os.str());
}

/// "(2,3,4)": how every message prints a shape.
template <class Range>
std::string shape_str(const Range& shape) {
  std::ostringstream os;
  os << '(';
  bool first = true;
  for (auto n : shape) {
    os << (first ? "" : ",") << n;
    first = false;
  }
  os << ')';
  return os.str();
}

#if defined(XATTN_PRECOMPILED_KERNELS)  // the shapes every pipeline prints, compiled into libxattn_kernels
extern template std::string shape_str(const std::array<std::size_t, 4>&);
extern template std::string shape_str(const std::vector<std::size_t>&);
#endif

}  // namespace xattn
