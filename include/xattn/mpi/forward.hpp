#pragma once
// The ring forward: each rank's queries meet every key block on its way around the ring; each
// block's attention comes with its log-sum-exp and is merged into the running result exactly
// (kernel::merge_row), in ring order, so the result does not depend on timing.
#include "../eval/forward/fused.hpp"
#include "../eval/paths/select.hpp"
#include "../eval/plan/resolve.hpp"
#include "agree.hpp"
#include "blocks.hpp"
#include "setup.hpp"

#include <limits>
#include <vector>

namespace xattn::mpi::detail {

/// What one rank's evaluation needs to know, the same on every rank.
template <class Plan>
struct ring_problem {
  problem local, whole;
  message_layout ml;
  ring_route route;
  std::vector<char> visible;  // [this rank's segment][origin][origin's segment]: the block is computed

  bool computes(std::size_t qi, std::size_t o, std::size_t ki) const {
    return visible[(qi * route.ranks + o) * 2 + ki];
  }
};

/// Checks the local operands against the layout (collectively) and derives the whole problem,
/// the message layout and the route.
template <class Acc, class Plan>
ring_problem<Plan> prepare(const setup& su, const Plan& p, const char* where, agreement a) {
  ring_problem<Plan> rp;
  const std::size_t mine = su.rows(su.rank);
  a.local_error += local_error_of([&] {
    rp.local = resolve(p);
    if (rp.local.q_len != mine || rp.local.kv_len != mine)
      fail("Q has ", rp.local.q_len, " and K, V have ", rp.local.kv_len, " sequence rows but local_rows() gives ", mine,
           " of ", su.seq_len);
    rp.whole = rp.local;
    rp.whole.q_len = rp.whole.kv_len = su.seq_len;
    bind_all(p.ops, rp.whole), bind_all(p.masks, rp.whole);  // their own checks, against the whole sequence
  });
  const problem& l = rp.local;
  for (auto [name, v] : {std::pair{"the batch", l.batch},
                         {"the query heads", l.q_heads},
                         {"the key/value heads", l.kv_heads},
                         {"the query size", l.q_dim},
                         {"the key size", l.k_dim},
                         {"the value size", l.v_dim}})
    a.add(name, std::int64_t(v));
  check_agreement(su.comm, where, a);
  using TK = typename decltype(p.base.k)::value_type;
  using TV = typename decltype(p.v)::value_type;
  rp.ml = {l.batch, l.kv_heads, l.k_dim, l.v_dim, sizeof(TK), sizeof(TV), sizeof(Acc), false};
  const auto masks = bind_all(p.masks, rp.whole);
  rp.route = route_of(su.segments,
                      [&](const segment& qs, const segment& ks) { return block_visible(masks, rp.whole, qs, ks); });
  const auto& mine_segs = su.segments[su.rank];
  rp.visible.assign(mine_segs.size() * su.ranks * 2, 0);
  for (std::size_t qi = 0; qi < mine_segs.size(); ++qi)
    for (std::size_t o = 0; o < su.ranks; ++o)
      for (std::size_t ki = 0; ki < su.segments[o].size(); ++ki)
        rp.visible[(qi * su.ranks + o) * 2 + ki] = block_visible(masks, rp.whole, mine_segs[qi], su.segments[o][ki]);
  return rp;
}

/// Calls f(query segment, key segment) for each block of this rank's rows and origin o's keys
/// that the masks leave visible.
template <class Plan, class F>
void for_each_block(const setup& su, const ring_problem<Plan>& rp, std::size_t o, F&& f) {
  for (std::size_t qi = 0; qi < su.segments[su.rank].size(); ++qi)
    for (std::size_t ki = 0; ki < su.segments[o].size(); ++ki)
      if (rp.computes(qi, o, ki)) f(su.segments[su.rank][qi], su.segments[o][ki]);
}

/// This rank's K and V packed into a message of layout ml.
template <class Plan>
void pack_keys(const Plan& p, const message_layout& ml, std::size_t n, std::byte* msg) {
  using TK = typename decltype(p.base.k)::value_type;
  using TV = typename decltype(p.v)::value_type;
  pack(p.base.k.view, reinterpret_cast<TK*>(msg + ml.k_at(n)));
  pack(p.v.view, reinterpret_cast<TV*>(msg + ml.v_at(n)));
}

/// Calls block(origin, message, n) for every origin this rank needs, in ring order, receiving the
/// next block while the current one is computed.
template <class Plan, class Block>
void for_each_key_block(const setup& su, const Plan& p, const ring_problem<Plan>& rp, Block&& block) {
  const ring_steps steps{su.comm, su.rank, su.ranks, rp.route, su.mode == comm_mode::ring, &su.stats.bytes_sent};
  const std::size_t cap = rp.ml.bytes(su.max_rows());
  channel_buffer buf[2];
  buf[0].bytes.resize(cap), buf[1].bytes.resize(cap);
  pack_keys(p, rp.ml, su.rows(su.rank), buf[0].bytes.data());
  for (std::size_t s = 0; s < su.ranks; ++s) {
    const std::size_t o = steps.origin(s), on = steps.origin(s + 1);
    // comm_mode::none computes every step on its own keys, in buf[0]
    channel_buffer &cur = steps.communicate ? buf[s % 2] : buf[0], &nxt = buf[(s + 1) % 2];
    cur.wait();
    steps.start_kv(s, cur, nxt, rp.ml.bytes(su.rows(o)), rp.ml.bytes(su.rows(on)), tag_keys);
    // o's keys came only if someone from here on needs them
    const bool held = s == 0 || rp.route.forwards(o, s - 1) || !steps.communicate;
    if (held && rp.route.needs(su.rank, o))
      timed(su.stats, [&] {
        block(o, static_cast<const std::byte*>(cur.bytes.data()), su.rows(steps.communicate ? o : su.rank));
      });
  }
  buf[0].wait(), buf[1].wait();
}

/// The rank's attention over the whole sequence into out (B, Hq, rows, Dv) and lse (B, Hq, rows).
/// The running log-sum-exp is kept in double, and a block's is recomputed exactly where it is
/// beyond large_lse (rows of d2l's -1e6 fills, whose float lse is off by up to 0.06: merged with
/// it, a uniform row would weigh its blocks wrongly).
template <class Acc, class Plan, class O>
void ring_attention(const setup& su, const Plan& p, const ring_problem<Plan>& rp, const schedule& sch,
                    const strided_view<O>& out, const strided_view<Acc, 3>& lse) {
  const problem& l = rp.local;
  const std::size_t rows = su.rows(su.rank), dv = l.v_dim;
  su.stats = {};
  std::vector<Acc> acc(l.batch * l.q_heads * rows * dv, Acc(0));
  std::vector<double> run_lse(l.batch * l.q_heads * rows, -std::numeric_limits<double>::infinity());
  std::vector<Acc> part_out, part_lse;
  std::vector<std::pair<Acc, Acc>> exact;
  for_each_key_block(su, p, rp, [&](std::size_t o, const std::byte* msg, std::size_t n) {
    for_each_block(su, rp, o, [&](const segment& qs, const segment& ks) {
      ++su.stats.blocks;
      const auto bp = block_plan(p, rp.whole, rp.ml, msg, n, qs, ks);
      const problem pr = resolve(bp);
      part_out.resize(l.batch * l.q_heads * qs.size * dv);
      part_lse.resize(l.batch * l.q_heads * qs.size);
      const layout<4> at = packed_layout(l.batch, l.q_heads, qs.size, dv);
      const strided_view<Acc, 3> lv = rows3(part_lse.data(), l.batch, l.q_heads, qs.size);
      run_fused<Acc>(bp, pr, schedule_for(bp, pr, sch, pass_kind::attention).forward,
                     strided_view<Acc>{part_out.data(), at}, lv);
      const auto large = [&](std::size_t part) {
        return std::abs(double(part_lse[part])) > large_lse && !std::isinf(part_lse[part]);
      };
      exact.clear();
      for (std::size_t part = 0; part < part_lse.size() && exact.empty(); ++part)
        if (large(part)) exact.resize(part_lse.size());
      if (!exact.empty())
        run_row_stats<Acc>(bp, pr, schedule_for(bp, pr, sch, pass_kind::scores).forward, exact.data(),
                           [&](std::size_t b, std::size_t h, std::size_t i0, std::size_t r) {
                             for (std::size_t i = i0; i < i0 + r; ++i)
                               if (large((b * l.q_heads + h) * qs.size + i)) return true;
                             return false;
                           });
      for (std::size_t bh = 0; bh < l.batch * l.q_heads; ++bh)
        for (std::size_t i = 0; i < qs.size; ++i) {
          const std::size_t row = bh * rows + qs.local + i, part = bh * qs.size + i;
          const double part_ls = large(part) ? double(exact[part].first) + double(exact[part].second) : part_lse[part];
          const double ls[2] = {run_lse[row], part_ls};
          const Acc* parts[2] = {acc.data() + row * dv, part_out.data() + part * dv};
          run_lse[row] = kernel::merge_row<double>(
              2, [&](std::size_t c) { return ls[c]; }, [&](std::size_t c) { return parts[c]; }, dv,
              acc.data() + row * dv, 1);
        }
    });
  });
  // The softmax term joins once, here on the rank that holds the rows (the blocks' plans have
  // none): a part whose log-sum-exp is the term's logit and whose output is 0.
  if constexpr (Plan::has_term) {
    const std::vector<Acc> zero(dv, Acc(0));
    for (std::size_t b = 0, r = 0; b < l.batch; ++b)
      for (std::size_t h = 0; h < l.q_heads; ++h)
        for (std::size_t i = 0; i < rows; ++i, ++r) {
          const double ls[2] = {run_lse[r], p.term.logit(b, h)};
          const Acc* parts[2] = {acc.data() + r * dv, zero.data()};
          run_lse[r] = kernel::merge_row<double>(
              2, [&](std::size_t c) { return ls[c]; }, [&](std::size_t c) { return parts[c]; }, dv, acc.data() + r * dv,
              1);
        }
  }
  for (std::size_t b = 0, r = 0; b < l.batch; ++b)
    for (std::size_t h = 0; h < l.q_heads; ++h)
      for (std::size_t i = 0; i < rows; ++i, ++r) {
        kernel::scaled_copy(acc.data() + r * dv, 1, dv, Acc(1), out.row(b, h, i), out.inner_stride());
        lse(b, h, i) = Acc(run_lse[r]);
      }
}

}  // namespace xattn::mpi::detail
