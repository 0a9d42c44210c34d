#pragma once
// Attention over selected keys (select(K, idx)): each query position has its own keys, so the
// fused pass runs once per position i, as a decoding step over the k rows selected for i -- the
// query and output rows of i, the selections' views and mask set to i. Every score path, page
// format and the grouped-query stacking work unchanged on it; the rows are read where they lie.
#include "../../error.hpp"
#include "../../hana.hpp"
#include "../../layout.hpp"
#include "../paths/select.hpp"
#include "../plan/operands.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace xattn {

namespace detail {

/// The longest sequence a selection may index in batch row b: a cache's own length, or Skv.
template <class Term>
std::size_t selectable_keys(const Term& t, std::size_t b) {
  if constexpr (requires { t.lengths; })
    return t.lengths[b];
  else
    return t.view.at.shape[2];
}

/// Checks what the types cannot: idx's query axis, V selected by the same idx, and every index
/// below its sequence's length (negative: no key).
template <class Plan>
void check_selected(const Plan& p, const problem& pr, const char* who) {
  const auto& k = p.base.k;
  const auto& ix = k.view.idx;
  if (ix.at.shape[2] != pr.q_len)
    fail(who, ": select(K, idx): idx ", shape_str(ix.at.shape), " selects keys for ", ix.at.shape[2],
         " queries, but Q has ", pr.q_len, " (idx must be (B, Hkv, Sq, k))");
  const auto& vx = p.v.view.idx;
  if (vx.data != ix.data || vx.at.shape != ix.at.shape || vx.at.stride != ix.at.stride)
    fail(who, ": select(K, idx) and select(V, idx) must use the same idx; V's is ", shape_str(vx.at.shape),
         " at another address than K's ", shape_str(ix.at.shape));
  for (std::size_t b = 0; b < ix.at.shape[0]; ++b) {
    const std::int64_t n = std::int64_t(std::min(selectable_keys(k.from, b), selectable_keys(p.v.from, b)));
    for (std::size_t h = 0; h < ix.at.shape[1]; ++h)
      for (std::size_t i = 0; i < ix.at.shape[2]; ++i)
        for (std::size_t t = 0; t < ix.at.shape[3]; ++t)
          if (const std::int64_t j = ix(b, h, i, t); j >= n)
            fail(who, ": select(K, idx): idx(", b, ", ", h, ", ", i, ", ", t, ") = ", j, " but batch row ", b, " has ",
                 n, " keys");
  }
}

/// one, a copy of plan p over selected keys, at query position i: its queries those of i, the
/// selections' views and mask set to i.
template <class Plan>
void at_position(Plan& one, const Plan& p, std::size_t i) {
  one.base.q.view.data = p.base.q.view.data + std::ptrdiff_t(i) * p.base.q.view.at.stride[2];
  one.base.q.view.at.shape[2] = 1;
  one.base.k.view.i = one.v.view.i = hana::back(one.masks).i = i;
}

}  // namespace detail

/// The schedule a pass over one query position's selected keys asks for: the whole evaluation's
/// key blocks and threads.
inline schedule selected_schedule(const forward_schedule& fs) { return {.block_k = fs.block_k, .threads = fs.threads}; }

/// Runs pass(plan, problem, schedule, out, lse) once per query position of a plan over selected
/// keys, each pass over one query per head and the k keys selected for it.
template <class Acc, class Plan, class Out, class Pass>
void run_selected(const Plan& p, const problem& pr, const forward_schedule& fs, const strided_view<Out>& out,
                  const strided_view<Acc, 3>& lse, Pass&& pass) {
  detail::check_selected(p, pr, "eval(e)");
  Plan one = p;
  problem at_i = pr;
  at_i.q_len = 1;
  const forward_schedule fi = schedule_for(one, at_i, selected_schedule(fs), pass_kind::attention).forward;
  strided_view<Out> o = out;
  strided_view<Acc, 3> l = lse;
  o.at.shape[2] = 1;
  l.at.shape[2] = 1;
  for (std::size_t i = 0; i < pr.q_len; ++i) {
    detail::at_position(one, p, i);
    o.data = out.data + std::ptrdiff_t(i) * out.at.stride[2];
    if (lse.data) l.data = lse.data + std::ptrdiff_t(i) * lse.at.stride[2];
    pass(std::as_const(one), at_i, fi, o, l);
  }
}

}  // namespace xattn
