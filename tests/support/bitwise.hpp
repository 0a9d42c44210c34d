#pragma once
// Bitwise equality of two tensors or vectors (determinism: thread counts, runs, block sizes).
#include <cstring>

namespace xattn::testing {

/// The same shape (tensors) or size, and the same bytes; empty ones are equal (data() may be null).
template <class A, class B>
bool bitwise_equal(const A& a, const B& b) {
  if constexpr (requires { a.shape(); }) {
    if (!(a.shape() == b.shape())) return false;
  }
  if (a.size() != b.size()) return false;
  return a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0;
}

}  // namespace xattn::testing
