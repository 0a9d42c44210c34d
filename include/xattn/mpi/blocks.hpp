#pragma once
// What travels and what is computed: a rank's K and V packed into one message in (B, Hkv, rows, D)
// order (its segments one after another), views of a segment inside such a message, the plan of
// one (query segment, key segment) block at its global positions, and the route masks allow.
#include "../eval/plan/operands.hpp"
#include "../eval/plan/positions.hpp"
#include "../eval/tiling/mask_eval.hpp"
#include "balance.hpp"
#include "ring.hpp"

#include <cstring>
#include <vector>

namespace xattn::mpi::detail {

inline std::size_t align_up(std::size_t n) { return (n + 63) / 64 * 64; }

/// Byte offsets inside one rank's message: K, V, then (backward only) dK and dV in Acc.
struct message_layout {
  std::size_t batch = 0, heads = 0, dk = 0, dv = 0, k_size = 0, v_size = 0, acc_size = 0;
  bool with_gradients = false;

  std::size_t k_at(std::size_t) const { return 0; }
  std::size_t v_at(std::size_t n) const { return align_up(batch * heads * n * dk * k_size); }
  std::size_t kv_bytes(std::size_t n) const { return v_at(n) + batch * heads * n * dv * v_size; }
  std::size_t dk_at(std::size_t n) const { return align_up(kv_bytes(n)); }
  std::size_t dv_at(std::size_t n) const { return dk_at(n) + align_up(batch * heads * n * dk * acc_size); }
  std::size_t bytes(std::size_t n) const {
    return with_gradients ? dv_at(n) + batch * heads * n * dv * acc_size : kv_bytes(n);
  }
};

/// (B, H, n, D) contiguous at `data`: the layout of every packed block.
inline layout<4> packed_layout(std::size_t b, std::size_t h, std::size_t n, std::size_t d) {
  return layout<4>::row_major({b, h, n, d});
}

/// Rows [s.local, s.local + s.size) of a (B, H, n, D) or (B, H, n) view.
template <class T, std::size_t N>
strided_view<T, N> segment_view(const strided_view<T, N>& v, const segment& s) {
  strided_view<T, N> r = v;
  r.data = v.data + std::ptrdiff_t(s.local) * v.at.stride[2];
  r.at.shape[2] = s.size;
  return r;
}

/// (B, H, n) contiguous at `data`.
template <class T>
strided_view<T, 3> rows3(T* data, std::size_t b, std::size_t h, std::size_t n) {
  return {data, {{b, h, n}, {std::ptrdiff_t(h * n), std::ptrdiff_t(n), 1}}};
}

/// Copies a (B, H, n, D) view into contiguous storage at dst.
template <class T>
void pack(const strided_view<const T>& v, T* dst) {
  const auto& sh = v.at.shape;
  for (std::size_t b = 0; b < sh[0]; ++b)
    for (std::size_t h = 0; h < sh[1]; ++h)
      for (std::size_t i = 0; i < sh[2]; ++i) {
        const T* src = v.row(b, h, i);
        for (std::size_t d = 0; d < sh[3]; ++d) *dst++ = src[std::ptrdiff_t(d) * v.inner_stride()];
      }
}

/// The plan of one block: Q's rows of segment qs, keys and values of segment ks of the message at
/// `msg` (n rows in all), masks and modifiers at the block's global positions, and no softmax term:
/// it joins once, where the blocks' results are merged.
template <class Plan>
auto block_plan(const Plan& p, const problem& whole, const message_layout& ml, const std::byte* msg, std::size_t n,
                const segment& qs, const segment& ks) {
  Plan b = p;
  hana::for_each(plan_operands(b), [&](const auto& o) {
    auto& t = o.terminal;
    if (o.role == operand_role::queries) {  // this rank's rows of segment qs
      t.view = segment_view(t.view, qs);
      return;
    }
    // keys and values: segment ks of the message (a ring refuses scores X and sums, whose second
    // keys it has no place for: check_ring_expression)
    using T = typename std::decay_t<decltype(t)>::value_type;
    const bool keys = o.role == operand_role::keys;
    t.view = segment_view(strided_view<const T>{reinterpret_cast<const T*>(msg + (keys ? ml.k_at(n) : ml.v_at(n))),
                                                packed_layout(ml.batch, ml.heads, n, keys ? ml.dk : ml.dv)},
                          ks);
    t.owned.reset();
  });
  return without_term(at_positions(b, whole, positions{qs.first, ks.first}));
}

/// need[r][o]: some (query segment of r, key segment of o) block is not hidden by an excluding
/// mask for some (batch, head). `visible(qs, ks)` answers for one pair.
template <class Visible>
ring_route route_of(const std::vector<std::vector<segment>>& segs, Visible visible) {
  ring_route rt;
  rt.ranks = segs.size();
  rt.need.assign(rt.ranks * rt.ranks, 0);
  for (std::size_t r = 0; r < rt.ranks; ++r)
    for (std::size_t o = 0; o < rt.ranks; ++o)
      for (const segment& qs : segs[r])
        for (const segment& ks : segs[o]) rt.need[r * rt.ranks + o] |= char(visible(qs, ks));
  return rt;
}

/// Whether block (qs, ks) has a pair some (batch, query head) may see under masks bound to the whole problem.
template <class Masks>
bool block_visible(const Masks& masks, const problem& whole, const segment& qs, const segment& ks) {
  if (qs.size == 0 || ks.size == 0) return false;
  for (std::size_t b = 0; b < whole.batch; ++b)
    for (std::size_t h = 0; h < whole.q_heads; ++h)
      if (!classify_block(masks, b, h, qs.first, qs.first + qs.size, ks.first, ks.first + ks.size).skip) return true;
  return false;
}

}  // namespace xattn::mpi::detail
