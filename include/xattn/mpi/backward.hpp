#pragma once
// The ring backward (FlashAttention-2's backward per block, ring-flash-attention's schedule): the
// rank's Q, O, dO and global log-sum-exp stay; K and V travel as in the forward, and behind each
// block travel its dK and dV accumulators, sent on once this rank's contribution is added and
// home from the last rank that needs the block. dQ sums the blocks in ring order: deterministic.
// A scoring policy's blocks run its whole backward (projections included: they are linear in the
// gradients at the features, so the blocks' dQ, dK and parameter shares add up).
#include "../eval/backward/backward.hpp"
#include "forward.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace xattn::mpi::detail {

/// Each row's exact (m, ln l) over the whole sequence, for rows whose |lse| is beyond large_lse
/// (rows of d2l's -1e6 fills): one more pass over the key blocks, only when some rank has such a row.
template <class Acc, class Plan>
std::vector<std::pair<Acc, Acc>> exact_stats(const setup& su, const Plan& p, const ring_problem<Plan>& rp,
                                             const schedule& sch, const strided_view<const Acc, 3>& lse) {
  const problem& l = rp.local;
  const std::size_t rows = su.rows(su.rank);
  auto large = [&](std::size_t b, std::size_t h, std::size_t i) {
    const Acc x = lse(b, h, i);
    return std::abs(x) > large_lse && !std::isinf(x);
  };
  int any = 0;
  for (std::size_t b = 0; b < l.batch; ++b)
    for (std::size_t h = 0; h < l.q_heads; ++h)
      for (std::size_t i = 0; i < rows; ++i) any |= int(large(b, h, i));
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_LOR, su.comm);
  if (!any) return {};
  std::vector<double> m(l.batch * l.q_heads * rows, -std::numeric_limits<double>::infinity()), z(m.size(), 0.0);
  std::vector<std::pair<Acc, Acc>> block;
  for_each_key_block(su, p, rp, [&](std::size_t o, const std::byte* msg, std::size_t n) {
    for_each_block(su, rp, o, [&](const segment& qs, const segment& ks) {
      const auto bp = block_plan(p, rp.whole, rp.ml, msg, n, qs, ks);
      const problem pr = resolve(bp);
      block.assign(l.batch * l.q_heads * qs.size, {});
      run_row_stats<Acc>(bp, pr, schedule_for(bp, pr, sch, pass_kind::scores).forward, block.data(),
                         [&](std::size_t b, std::size_t h, std::size_t i0, std::size_t r) {
                           for (std::size_t i = i0; i < i0 + r; ++i)
                             if (large(b, h, qs.local + i)) return true;
                           return false;
                         });
      for (std::size_t b = 0; b < l.batch; ++b)
        for (std::size_t h = 0; h < l.q_heads; ++h)
          for (std::size_t i = 0; i < qs.size; ++i) {
            if (!large(b, h, qs.local + i)) continue;
            const auto [mb, lb] = block[(b * l.q_heads + h) * qs.size + i];
            if (std::isinf(mb) && mb < 0) continue;  // nothing visible in this block
            const std::size_t r = (b * l.q_heads + h) * rows + qs.local + i;
            const double mm = std::max(m[r], double(mb));
            z[r] = z[r] * std::exp(m[r] - mm) + std::exp(double(mb) + double(lb) - mm);
            m[r] = mm;
          }
    });
  });
  std::vector<std::pair<Acc, Acc>> r(m.size());
  for (std::size_t k = 0; k < m.size(); ++k) r[k] = {Acc(m[k]), Acc(std::log(z[k]))};
  return r;
}

/// Copies (B, H, n, D) contiguous Acc into a view of the same shape.
template <class Acc>
void unpack(const std::vector<Acc>& src, const strided_view<Acc>& dst) {
  const auto& sh = dst.at.shape;
  for (std::size_t b = 0, r = 0; b < sh[0]; ++b)
    for (std::size_t h = 0; h < sh[1]; ++h)
      for (std::size_t i = 0; i < sh[2]; ++i, ++r)
        kernel::scaled_copy(src.data() + r * sh[3], 1, sh[3], Acc(1), dst.row(b, h, i), dst.inner_stride());
}

/// The rank's dQ and its own keys' dK and dV into out's views (the rank's rows); bias(t), the
/// modifiers' learnables and the scoring policy's parameter gradients of this rank's queries added
/// into out's (the caller sums them over the ranks).
template <class Acc, class Plan, class DO, class O, class DScore>
void ring_gradients(const setup& su, const Plan& p, ring_problem<Plan> rp, const schedule& sch,
                    const backward_inputs<Acc, DO, O>& in, const backward_outputs<Acc, DScore>& out) {
  const problem& l = rp.local;
  const std::size_t rows = su.rows(su.rank), bq = l.batch * l.q_heads, bk = l.batch * l.kv_heads;
  const std::vector<std::pair<Acc, Acc>> exact = exact_stats<Acc>(su, p, rp, sch, in.lse);
  std::vector<Acc> dq, dk_own, dv_own;
  su.stats = {};
  rp.ml.with_gradients = true;
  const message_layout& ml = rp.ml;
  const ring_steps steps{su.comm, su.rank, su.ranks, rp.route, su.mode == comm_mode::ring, &su.stats.bytes_sent};
  dq.assign(bq * rows * l.q_dim, Acc(0));
  dk_own.assign(bk * rows * l.k_dim, Acc(0));
  dv_own.assign(bk * rows * l.v_dim, Acc(0));
  // messages: K | V | dK | dV; keys travel ahead (start_kv), gradients behind (the acc buffers)
  const std::size_t cap = ml.bytes(su.max_rows());
  channel_buffer kv[2], acc[2], home;
  for (auto* c : {&kv[0], &kv[1], &acc[0], &acc[1]}) c->bytes.resize(cap);
  pack_keys(p, ml, rows, kv[0].bytes.data());
  const std::size_t own_last = rp.route.last_step(su.rank);
  if (steps.communicate && own_last > 0) {  // our dK, dV come home from the last rank that needs them
    home.bytes.resize(cap);
    MPI_Irecv(home.bytes.data() + ml.dk_at(rows), message_size(ml.bytes(rows) - ml.dk_at(rows)), MPI_BYTE,
              int((su.rank + own_last) % su.ranks), tag_home, su.comm, &home.req);
  }
  auto grads = [&](std::byte* msg, std::size_t n, std::size_t at_dk, std::size_t at_dv) {
    return std::pair{reinterpret_cast<Acc*>(msg + ml.dk_at(n)) + at_dk,
                     reinterpret_cast<Acc*>(msg + ml.dv_at(n)) + at_dv};
  };
  std::vector<Acc> dq_blk, dk_blk, dv_blk;
  for (std::size_t s = 0; s < su.ranks; ++s) {
    const std::size_t o = steps.origin(s), on = steps.origin(s + 1);
    const bool held = s == 0 || rp.route.forwards(o, s - 1) || !steps.communicate;
    channel_buffer &cur = steps.communicate ? kv[s % 2] : kv[0], &nxt = kv[(s + 1) % 2], &ga = acc[s % 2],
                   &gn = acc[(s + 1) % 2];
    const std::size_t n_o = su.rows(steps.communicate ? o : su.rank), n_on = su.rows(on);
    cur.wait();
    steps.start_kv(s, cur, nxt, ml.kv_bytes(n_o), ml.kv_bytes(n_on), tag_keys);
    if (steps.communicate && s + 1 < su.ranks && rp.route.forwards(on, s)) {
      gn.wait();
      MPI_Irecv(gn.bytes.data() + ml.dk_at(n_on), message_size(ml.bytes(n_on) - ml.dk_at(n_on)), MPI_BYTE, steps.prev(),
                tag_gradients, su.comm, &gn.req);
    }
    if (!held) continue;  // nobody from here on needs o's keys: they never came
    if (s == 0 || !steps.communicate) {
      ga.wait();
      std::fill(ga.bytes.begin() + std::ptrdiff_t(ml.dk_at(n_o)), ga.bytes.begin() + std::ptrdiff_t(ml.bytes(n_o)),
                std::byte{0});
    }
    if (rp.route.needs(su.rank, o)) {
      for_each_block(su, rp, o, [&](const segment& qs, const segment& ks) {
        const auto bp = block_plan(p, rp.whole, ml, cur.bytes.data(), n_o, qs, ks);
        const problem pr = resolve(bp);
        dq_blk.assign(bq * qs.size * l.q_dim, Acc(0));
        dk_blk.assign(bk * ks.size * l.k_dim, Acc(0));
        dv_blk.assign(bk * ks.size * l.v_dim, Acc(0));
        std::vector<std::pair<Acc, Acc>> ex;
        if (!exact.empty()) {
          ex.resize(bq * qs.size);
          for (std::size_t r = 0; r < bq; ++r)
            for (std::size_t i = 0; i < qs.size; ++i) ex[r * qs.size + i] = exact[r * rows + qs.local + i];
        }
        ++su.stats.blocks;
        timed(su.stats, [&] {
          const backward_inputs<Acc, DO, O> block_in{segment_view(in.d_out, qs), segment_view(in.out, qs),
                                                     segment_view(in.lse, qs), ex.empty() ? nullptr : ex.data()};
          const backward_outputs<Acc, DScore> block_out{
              {strided_view<Acc>{dq_blk.data(), packed_layout(l.batch, l.q_heads, qs.size, l.q_dim)},
               strided_view<Acc>{dk_blk.data(), packed_layout(l.batch, l.kv_heads, ks.size, l.k_dim)},
               {}},
              strided_view<Acc>{dv_blk.data(), packed_layout(l.batch, l.kv_heads, ks.size, l.v_dim)},
              out.dbias,
              out.dmodify,
              out.dscore};
          run_backward<Acc>(bp, pr, schedule_for(bp, pr, sch, pass_kind::attention).backward, block_in, block_out);
        });
        for (std::size_t r = 0; r < bq; ++r)
          for (std::size_t x = 0; x < qs.size * l.q_dim; ++x)
            dq[(r * rows + qs.local) * l.q_dim + x] += dq_blk[r * qs.size * l.q_dim + x];
        if (s > 0 && steps.communicate) ga.wait();  // the accumulators behind the block have arrived
        for (std::size_t r = 0; r < bk; ++r) {
          auto [gk, gv] = grads(ga.bytes.data(), n_o, (r * n_o + ks.local) * l.k_dim, (r * n_o + ks.local) * l.v_dim);
          for (std::size_t x = 0; x < ks.size * l.k_dim; ++x) gk[x] += dk_blk[r * ks.size * l.k_dim + x];
          for (std::size_t x = 0; x < ks.size * l.v_dim; ++x) gv[x] += dv_blk[r * ks.size * l.v_dim + x];
        }
      });
    }
    if (!steps.communicate) {
      auto [gk, gv] = grads(ga.bytes.data(), n_o, 0, 0);
      for (std::size_t x = 0; x < dk_own.size(); ++x) dk_own[x] += gk[x];
      for (std::size_t x = 0; x < dv_own.size(); ++x) dv_own[x] += gv[x];
      continue;
    }
    ga.wait();
    const int grad_bytes = message_size(ml.bytes(n_o) - ml.dk_at(n_o));
    if (rp.route.forwards(o, s)) {
      MPI_Isend(ga.bytes.data() + ml.dk_at(n_o), grad_bytes, MPI_BYTE, steps.next(), tag_gradients, su.comm, &ga.req);
    } else if (s > 0) {  // the last rank that needs o's keys: the gradients go home
      MPI_Isend(ga.bytes.data() + ml.dk_at(n_o), grad_bytes, MPI_BYTE, int(o), tag_home, su.comm, &ga.req);
    } else {  // nobody else needs our keys: our gradients are final
      auto [gk, gv] = grads(ga.bytes.data(), n_o, 0, 0);
      std::copy(gk, gk + dk_own.size(), dk_own.begin());
      std::copy(gv, gv + dv_own.size(), dv_own.begin());
    }
  }
  for (auto* c : {&kv[0], &kv[1], &acc[0], &acc[1], &home}) c->wait();
  if (steps.communicate && own_last > 0) {
    auto [gk, gv] = grads(home.bytes.data(), rows, 0, 0);
    std::copy(gk, gk + dk_own.size(), dk_own.begin());
    std::copy(gv, gv + dv_own.size(), dv_own.begin());
  }
  unpack(dq, out.to.dq);
  unpack(dk_own, out.to.dk);
  unpack(dv_own, out.dv);
}

}  // namespace xattn::mpi::detail
