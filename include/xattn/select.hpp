#pragma once
// xattn::select(c, a, b): a where c holds, else b -- a branch written as data. On plain numbers
// and on the tapes' scalars it is `c ? a : b`. On the recording scalar (record/recorded.hpp) it
// records both sides, so that the recorded code holds for every pair without a guard: a policy
// that writes its branches this way runs on the fast paths for every pair, where a branch on a
// comparison (`if`, `?:`) leaves the pairs that take the other way to the policy itself.
#include "record/recorded.hpp"

namespace xattn {

template <class T>
T select(bool c, const T& a, const T& b) {
  return c ? a : b;
}

}  // namespace xattn
