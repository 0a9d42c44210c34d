#pragma once
// Error text: every runtime misuse names the argument and the shapes involved.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace xattn::detail {

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

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream os;
  os << "xattn: ";
  (os << ... << std::forward<Parts>(parts));
  throw std::invalid_argument(os.str());
}

}  // namespace xattn::detail
