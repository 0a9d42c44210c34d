#pragma once
// The fused backward driver: Δ = rowsum(dO ∘ O) per row, then every key block's task on the
// schedule's threads (any thread may take any task: each writes only its own dK, dV rows and
// bias-gradient entries, and adds into its key chunk's dQ partial after the chunk's earlier key
// blocks), then dQ summed over the chunks in order, the score path's own finishing step (the
// projections' backward) and the bias gradients reduced over their broadcast axes -- all in an
// order that does not depend on the thread count. The same function serves a whole problem and a
// block of a larger one (context parallelism adds every block's parameter and bias gradients).
#include "../forward/fused.hpp"
#include "../paths/select.hpp"
#include "../plan/bias_terms.hpp"
#include "../plan/resolve.hpp"
#include "backward_worker.hpp"

#include <xtensor/xarray.hpp>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace xattn {

/// What the backward reads besides the plan, in kernel coordinates.
template <class Acc, class DO, class O>
struct backward_inputs {
  strided_view<const DO> d_out{};         // (B, Hq, Sq, Dv)
  strided_view<const O> out{};            // the forward's output, (B, Hq, Sq, Dv)
  strided_view<const Acc, 3> lse{};       // its log-sum-exp, (B, Hq, Sq)
  const std::pair<Acc, Acc>* exact = {};  // (m, ln l) of the rows beyond large_lse, (B, Hq, Sq) row-major,
                                          // when the caller has them (a block of a larger problem)
};

/// Where the backward writes: dQ, dK or dX and dV (written), and the gradients it adds into.
template <class Acc, class DScore>
struct backward_outputs {
  gradient_targets<Acc> to{};
  strided_view<Acc> dv{};
  std::vector<xt::xarray<Acc>>* dbias = nullptr;      // one per bias(t) term (created when absent)
  std::vector<learned_gradients>* dmodify = nullptr;  // one per modifier with learnables (likewise)
  DScore* dscore = nullptr;                           // the scoring policy's parameter gradients
};

/// What the driver hands back besides the views it wrote.
struct backward_report {
  double worst_row_sum_error = 0;  // max |Σ_j P_ij − 1| over rows with visible keys
};

/// The backward program of a plan on path Path (backward_program): masked, a mask may hide part of
/// a tile; rows_plain, every row's log-sum-exp is finite and its own (explain assumes so).
template <class Acc, class Path>
program backward_program_of(const backward_schedule& bs, const problem& pr, bool masked, bool rows_plain) {
  constexpr bool refusing_tiles = requires(const typename Path::grad_tiles& t) { t.plain(); };  // a guard may fail
  const bool general = masked || !rows_plain || refusing_tiles || pr.kv_len % simd::width<Acc> != 0;
  return backward_program(bs, !Path::key_work.empty() || !Path::backward_ops.prepare.empty(), general);
}

/// The fused backward of one plan.
template <class Acc, class Plan, class DO, class O, class DScore>
backward_report run_backward(const Plan& p, const problem& pr, const backward_schedule& bs,
                             const backward_inputs<Acc, DO, O>& in, const backward_outputs<Acc, DScore>& to) {
  using Base = std::decay_t<decltype(p.base)>;
  using Path = path_t<Acc, Base>;
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  using Ops = std::decay_t<decltype(ops)>;
  using IO = backward_io<Acc, DO, Ops>;
  const std::size_t chunks = bs.key_chunks;
  const layout<3> rows_at = layout<3>::row_major({pr.batch, pr.q_heads, pr.q_len});
  const std::size_t rows = rows_at.size();

  typename Path::grads grads(p.base, pr, bs, to.to);
  const strided_view<Acc> dq = grads.query_grads();  // the rows dQ goes to (empty: none)
  const std::size_t n = dq.data ? dq.at.shape[3] : 0, nqp = simd::padded<Acc>(n);
  // The dQ partials, (chunks, B, Hq, Sq, nqp), zeroed row by row on the threads below; with
  // dq_in_place the one chunk is the result's rows.
  std::unique_ptr<Acc[]> dq_buf;
  strided_view<Acc, 5> dq_part;
  if (bs.dq_in_place) {
    const auto& s = dq.at.stride;
    const auto rows_apart = std::ptrdiff_t(nqp), heads_apart = rows_apart * std::ptrdiff_t(pr.q_len),
               batches_apart = heads_apart * std::ptrdiff_t(pr.q_heads);
    if (n != nqp || s[3] != 1 || (pr.q_len > 1 && s[2] != rows_apart) || (pr.q_heads > 1 && s[1] != heads_apart) ||
        (pr.batch > 1 && s[0] != batches_apart))
      throw std::logic_error("xattn: backward: the schedule accumulates dQ in place, but its rows are not dense");
    dq_part = {dq.data, {{1, pr.batch, pr.q_heads, pr.q_len, nqp}, {0, batches_apart, heads_apart, rows_apart, 1}}};
  } else if (n > 0) {
    const layout<5> at = layout<5>::row_major({chunks, pr.batch, pr.q_heads, pr.q_len, nqp});
    dq_buf = std::make_unique_for_overwrite<Acc[]>(at.size());
    dq_part = {dq_buf.get(), at};
  }

  std::vector<Acc> delta(rows), shift(rows), rel(rows, Acc(0));
  const layout<4> sums_at = layout<4>::row_major({chunks, pr.batch, pr.q_heads, pr.q_len});
  std::vector<Acc> row_sums(sums_at.size(), Acc(0));
  const layout<4> turns_at = layout<4>::row_major(
      {pr.batch, pr.q_heads, chunks, (pr.q_len + bs.block_q - 1) / std::max<std::size_t>(bs.block_q, 1)});
  std::vector<std::atomic<std::uint32_t>> turns(turns_at.size());
  const modifier_slots<Ops> slots(ops);
  std::vector<Acc> dmodify_part(bs.tasks * slots.total, Acc(0));
  IO io{.d_out = in.d_out,
        .shift = {shift.data(), rows_at},
        .rel = {rel.data(), rows_at},
        .delta = {delta.data(), rows_at},
        .dq_part = dq_part,
        .row_sums = {row_sums.data(), sums_at},
        .turns = {turns.data(), turns_at},
        .dv = to.dv,
        .modifiers = {&slots, {}, dmodify_part.data()}};
  // bias gradients: the full (B, Hq, Sq, Skv) gradient at each bias, reduced below
  const layout<4> full_at = layout<4>::row_major({pr.batch, pr.q_heads, pr.q_len, pr.kv_len});
  std::vector<std::vector<Acc>> bias_full;
  bias_full.reserve(count_biases<Ops>());
  std::size_t k = 0;
  hana::for_each(ops, [&](const auto& op) {
    if constexpr (is_tensor_bias_v<std::decay_t<decltype(op)>>) {
      bias_full.emplace_back(full_at.size(), Acc(0));
      io.modifiers.bias_full[k] = {bias_full.back().data(), full_at};
    }
    ++k;
  });

  // Rows whose log-sum-exp is too large for Acc to resolve a probability take their exact
  // statistics: the caller's, or a scores pass of their own.
  const auto large = [&](std::size_t b, std::size_t h, std::size_t i) {
    const Acc x = in.lse(b, h, i);
    return std::abs(x) > large_lse && !std::isinf(x);
  };
  std::vector<std::pair<Acc, Acc>> own_exact;
  const std::pair<Acc, Acc>* exact = in.exact;
  if (!exact) {
    bool any = false;
    for (std::size_t b = 0; b < pr.batch; ++b)
      for (std::size_t h = 0; h < pr.q_heads; ++h)
        for (std::size_t i = 0; i < pr.q_len; ++i) any = any || large(b, h, i);
    if (any) {
      own_exact.resize(rows);
      run_row_stats<Acc>(p, pr, bs.rescan, own_exact.data(),
                         [&](std::size_t b, std::size_t h, std::size_t i0, std::size_t r) {
                           for (std::size_t i = i0; i < i0 + r; ++i)
                             if (large(b, h, i)) return true;
                           return false;
                         });
      exact = own_exact.data();
    }
  }

  using worker_t = backward_worker<Acc, Path, Plan, Ops, std::decay_t<decltype(masks)>, IO>;
  // Every pass over the rows runs on the threads too (each row's work is the same for any count).
  const auto row_index = [&](std::size_t r) {
    return std::array<std::size_t, 3>{r / pr.q_len / pr.q_heads, r / pr.q_len % pr.q_heads, r % pr.q_len};
  };
  bool rows_plain = true;  // every row's shift is its finite log-sum-exp
  for (std::size_t r = 0; r < rows && rows_plain; ++r) {
    const auto [b, h, i] = row_index(r);
    rows_plain = std::isfinite(in.lse(b, h, i)) && !large(b, h, i);
  }
  const program prog = backward_program_of<Acc, Path>(bs, pr, !decltype(hana::is_empty(masks))::value, rows_plain);
#pragma omp parallel num_threads(bs.threads) if (bs.threads > 1)
  {
    for (std::size_t at = 0; at < prog.size(); ++at) switch (prog[at].kind) {
        case step::row_deltas:
#pragma omp for schedule(static)
          for (std::size_t r = 0; r < rows; ++r) {  // Δ, the shift, and the row's dQ partials zeroed
            const auto [b, h, i] = row_index(r);
            delta[r] = kernel::dot_row<Acc>(in.d_out.row(b, h, i), in.d_out.inner_stride(), in.out.row(b, h, i),
                                            in.out.inner_stride(), pr.v_dim);
            shift[r] = in.lse(b, h, i);
            if (large(b, h, i)) std::tie(shift[r], rel[r]) = exact[r];
            if (dq_part.data)
              for (std::size_t c = 0; c < dq_part.at.shape[0]; ++c) std::fill_n(dq_part.row(c, b, h, i), nqp, Acc(0));
          }
          break;
        case step::prepare_rows:
          grads.build(p.base, pr);  // orphaned omp fors: their barrier ends before any task reads them
          break;
        case step::tasks: {
          const std::size_t body = prog.body_end(at);
          worker_t wk(p, pr, ops, masks, bs, io, grads);
#pragma omp for schedule(dynamic, 1)
          for (std::size_t t = 0; t < bs.tasks; ++t) wk.run(prog, at + 1, body, t);
          at = body - 1;
          break;
        }
        case step::reduce_rows:
#pragma omp for schedule(static)
          for (std::size_t r = 0; r < rows; ++r) {  // dQ: the partials summed in chunk order
            const auto [b, h, i] = row_index(r);
            if (dq_part.data && !bs.dq_in_place) {
              Acc* dst = dq.row(b, h, i);
              std::size_t d = 0;
              for (constexpr std::size_t w = simd::width<Acc>; dq.inner_stride() == 1 && d + w <= n; d += w) {
                simd::batch<Acc> s(Acc(0));  // the same sums a batch at a time
                for (std::size_t c = 0; c < chunks; ++c) s += simd::load(dq_part.row(c, b, h, i) + d);
                simd::store(dst + d, s);
              }
              for (; d < n; ++d) {
                Acc s = 0;
                for (std::size_t c = 0; c < chunks; ++c) s += dq_part.row(c, b, h, i)[d];
                dst[std::ptrdiff_t(d) * dq.inner_stride()] = s;
              }
            }
            grads.reduce_row(b, h, i, chunks);
          }
          break;
        default:
          break;
      }
  }
  if (prog.has(step::finish_rows)) grads.finish(p.base, pr, bs, *to.dscore);

  std::size_t bi = 0, mi = 0, oi = 0;
  hana::for_each(ops, [&](const auto& op) {
    if constexpr (declares_learnables<std::decay_t<decltype(op)>>) {  // summed in task order, in double
      if (to.dmodify->size() == mi) to.dmodify->push_back(slots.slots[oi].zeros());
      std::vector<double>& d = (*to.dmodify)[mi++].d;
      for (std::size_t t = 0; t < bs.tasks; ++t)
        for (std::size_t j = 0; j < d.size(); ++j) d[j] += double(dmodify_part[t * slots.total + slots.first[oi] + j]);
    }
    ++oi;
    if constexpr (is_tensor_bias_v<std::decay_t<decltype(op)>>) {
      if (to.dbias->size() == bi) to.dbias->push_back(xt::zeros<Acc>(bias_term(op).tensor.shape));
      const strided_view<Acc> view = bias_gradient_view((*to.dbias)[bi], op, pr);
      const std::vector<Acc>& full = bias_full[bi++];
      std::size_t at = 0;
      for (std::size_t b = 0; b < pr.batch; ++b)
        for (std::size_t h = 0; h < pr.q_heads; ++h)
          for (std::size_t i = 0; i < pr.q_len; ++i)
            for (std::size_t j = 0; j < pr.kv_len; ++j) view(b, h, i, j) += full[at++];
    }
  });

  backward_report rep;
  for (std::size_t r = 0; r < rows; ++r) {
    Acc s = 0;
    for (std::size_t c = 0; c < chunks; ++c) s += row_sums[c * rows + r];
    // no visible key, or a NaN score (the forward's row is NaN; so are its gradients)
    if ((std::isinf(shift[r]) && shift[r] < 0) || std::isnan(shift[r])) continue;
    const auto [b, h, i] = row_index(r);
    const double term = std::exp(p.term.logit(b, h) - double(in.lse(b, h, i)));  // the softmax term's weight
    const double e = std::abs(double(s) + term - 1);
    rep.worst_row_sum_error =
        std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(rep.worst_row_sum_error, e);
  }
  return rep;
}

}  // namespace xattn
