#pragma once
// Queries turned for keys a cache stores turned by a Hadamard rotation (kv_cache_options::rotate):
// H is orthogonal, so (H q)·(H k) = q·k and the scores are unchanged but for the keys'
// quantization. The queries are turned once per evaluation into a copy the plan then reads; a
// query that its load transform turns too (rope(Q, positions): R) is stored as Rᵀ H R q, so that
// the transform, applied as the kernel loads it, gives H R q -- the keys were stored as H R k.
#include "../../cache/cache_ref.hpp"
#include "../../error.hpp"
#include "../../expr/selected.hpp"
#include "../../kernel/hadamard.hpp"
#include "../../policy/cosine.hpp"
#include "../../policy/dot.hpp"
#include "../../policy/gaussian.hpp"
#include "../operands/transformed_rows.hpp"
#include "../plan/bases.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace xattn {

namespace detail {

/// The cache terminal K reads from, directly or through select(), or void.
template <class K>
struct key_cache {
  using type = void;
};
template <class T>
struct key_cache<cache_ref<T>> {
  using type = cache_ref<T>;
};
template <class Term, class I>
struct key_cache<selected_ref<Term, I>> : key_cache<Term> {};

template <class K>
const auto& key_cache_of(const K& k) {
  if constexpr (is_selected_terminal_v<K>)
    return k.from;
  else
    return k;
}

/// Scores that a rotation of both queries and keys leaves as they are: functions of q·k, |q|, |k|.
template <class P>
inline constexpr bool rotation_invariant_v =
    std::is_same_v<P, dot> || std::is_same_v<P, scaled_dot> || std::is_same_v<P, cosine> || std::is_same_v<P, gaussian>;

}  // namespace detail

/// f(plan): p itself, or -- when its keys are a cache's stored turned by a Hadamard rotation -- a
/// copy whose queries are turned alike. `who` names the entry in messages.
template <class Plan, class F>
void with_turned_queries(const Plan& p, const char* who, F&& f) {
  using base_t = std::decay_t<decltype(p.base)>;
  if constexpr (!base_t::tensor_scores) {
    using K = std::decay_t<decltype(p.base.k)>;
    if constexpr (!std::is_void_v<typename detail::key_cache<K>::type>) {
      const std::size_t block = detail::key_cache_of(p.base.k).hadamard;
      if (block != 0) {
        if constexpr (is_sum_base_v<base_t> || !detail::rotation_invariant_v<typename base_t::policy_type>) {
          fail(who,
               ": the keys come from a cache that turns them by a Hadamard rotation (options.rotate), which "
               "leaves only scores of dot products and norms as they are: Q * trans(K), scaled_dot, cosine or "
               "gaussian, one product");
        } else {
          using Q = std::decay_t<decltype(p.base.q)>;
          using T = typename Q::value_type;
          const auto& s = p.base.q.view.at.shape;
          const std::size_t B = s[0], H = s[1], S = s[2], D = s[3];
          std::vector<T> turned(B * H * S * D);
          transformed_rows<float, Q> rows(p.base.q, B, S, D);
          rows.build(p.base.q);
          std::vector<float> x(D);
          for (std::size_t b = 0; b < B; ++b)
            for (std::size_t h = 0; h < H; ++h)
              for (std::size_t i = 0; i < S; ++i) {
                rows.load(p.base.q, b, h, i, 1.0f, x.data());
                kernel::hadamard_row(x.data(), D, block);
                rows.transpose(p.base.q, x.data(), 1, b, i);  // Rᵀ, which the load will undo
                T* to = turned.data() + ((b * H + h) * S + i) * D;
                for (std::size_t d = 0; d < D; ++d) to[d] = T(x[d]);
              }
          Plan one = p;
          one.base.q.view = {turned.data(), layout<4>::row_major({B, H, S, D})};
          f(std::as_const(one));
          return;
        }
      }
    }
  }
  f(p);
}

}  // namespace xattn
