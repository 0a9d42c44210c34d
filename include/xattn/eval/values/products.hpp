#pragma once
// The backward's value products, dP = dO·Vᵀ and dV += Zᵀ·dO: products of rows as a dot path's,
// with V in the keys' place and dO in the queries', on vdpbf16ps for bfloat16 values where the
// build has it, as the forward's P·V (bf16_pairs.hpp).
#include "../paths/parts/dot_grads.hpp"
#include "../paths/parts/dot_pair_grads.hpp"
#include "bf16_pairs.hpp"

#include <type_traits>

namespace xattn {

template <class Acc, class V>
using value_products_t = std::conditional_t<takes_value_pairs_v<Acc, V>, dot_pair_grads<Acc>, dot_grads<Acc>>;

}  // namespace xattn
