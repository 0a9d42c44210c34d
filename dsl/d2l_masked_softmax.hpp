#pragma once
// d2l's masked_softmax(X, valid_lens): softmax over the last axis of X (batch, queries, keys),
// keys at or beyond each valid length masked with -1e6. valid_lens is (batch,) or (batch, queries).
#include <xattn/xattn.hpp>

namespace dsl {

// [snippet d2l_masked_softmax]
template <class Scores, class Lens>
auto masked_softmax(const Scores& x, const Lens& valid_lens) {
  using namespace xattn;
  return eval(softmax(mask(ref(x), lengths(valid_lens))));
}
// [end d2l_masked_softmax]

}  // namespace dsl
