#pragma once
// The fused backward driver: Δ = rowsum(dO ∘ O) per row, then every key block's task on the
// schedule's threads (any thread may take any task: each writes only its own dK, dV rows and
// bias-gradient entries, and adds into its key chunk's dQ partial after the chunk's earlier key
// blocks), then dQ summed over the chunks in order and the bias gradients reduced over their
// broadcast axes -- all in an order that does not depend on the thread count.
#include "backward_worker.hpp"
#include "positions.hpp"
#include "reference_grad.hpp"

#include <array>
#include <memory>
#include <vector>

namespace xattn {

/// What the driver hands back besides the views it wrote.
struct backward_report {
  double worst_row_sum_error = 0;  // max |Σ_j P_ij − 1| over rows with visible keys
};

/// Beyond this a float log-sum-exp cannot resolve a probability to 1e-4 (its ulp is 1.2e-4).
inline constexpr double large_lse = 1024;

/// The row's max final score m and ln Σ e^(s - m), in double from the plan's definition (a row
/// of d2l's -1e6 fills: its log-sum-exp -1e6 + ln Skv is stored to within 0.06 in float, but
/// s - m is exact).
template <class Acc, class Plan, class Ops, class Masks>
std::pair<Acc, Acc> exact_row_stats(const Plan& p, const problem& pr, const Ops& ops, const Masks& masks, std::size_t b,
                                    std::size_t h, std::size_t i) {
  std::vector<double> s(pr.kv_len);
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < pr.kv_len; ++j) {
    double x = p.scale * detail::base_score(p, pr, b, h, i, j);
    hana::for_each(ops, [&](const auto& op) { x = double(op(x, b, h, i, j)); });
    s[j] = masked_score(masks, x, b, h, i, j);
    m = std::max(m, s[j]);
  }
  double l = 0;
  for (double x : s) l += std::exp(x - m);
  return {Acc(m), Acc(std::log(l))};
}

/// A bias term shifted to a block of a larger problem (context parallelism) is a bias term: its
/// gradient, in the whole tensor's shape, receives the block's part.
template <class X>
inline constexpr bool is_tensor_bias_v<shifted<X>> = is_tensor_bias_v<X>;

template <class T>
const tensor_bias<T>& bias_term(const tensor_bias<T>& op) {
  return op;
}
template <class X>
const auto& bias_term(const shifted<X>& op) {
  return bias_term(op.x);
}

/// bias_gradient_view of the whole problem's gradient, narrowed to the block the term sees.
template <class A, class X>
strided_view<A> bias_gradient_view(xt::xarray<A>& g, const shifted<X>& op, const problem& pr) {
  problem whole = pr;
  whole.q_len = op.x.bound.at.shape[2], whole.kv_len = op.x.bound.at.shape[3];
  strided_view<A> v = bias_gradient_view(g, op.x, whole);
  v.data += std::ptrdiff_t(op.at.q0) * v.at.stride[2] + std::ptrdiff_t(op.at.k0) * v.at.stride[3];
  v.at.shape[2] = pr.q_len, v.at.shape[3] = pr.kv_len;
  return v;
}

/// Where the driver writes, in kernel coordinates (the views of what the source does not have stay empty).
template <class Acc, class DQ>
struct backward_out {
  strided_view<DQ> dq{};                      // (B, Hq, Sq, n): dQ, or the gradient at the query features
  strided_view<Acc> dk{}, dv{}, dx{};         // (B, Hkv, Skv, n), (B, Hkv, Skv, Dv), (B, Hq, Sq, Skv)
  Acc* dalpha = nullptr;                      // (B, Hq, Sq) row-major: at the query terms
  Acc* dbeta = nullptr;                       // (B, Hkv, Skv) row-major: at the key terms
  std::vector<double>* dparams{};             // a combine policy's parameters
  std::vector<xt::xarray<Acc>>* dbias{};      // one per bias(t) term, added into (created when absent)
  std::vector<learned_gradients>* dmodify{};  // one per modifier with learnables, added into (likewise)
};

/// Each modifier's learnables (bound ops: the objects the worker runs) and where they start in a
/// task's flat vector of modifier parameter gradients.
template <class Ops>
struct modifier_slots {
  static constexpr std::size_t n_ops = decltype(hana::length(std::declval<Ops>()))::value;
  std::array<parameter_slots, n_ops + 1> slots{};
  std::array<std::size_t, n_ops + 1> first{};
  std::size_t total = 0;

  explicit modifier_slots(const Ops& ops) {
    std::size_t k = 0;
    hana::for_each(ops, [&](const auto& op) {
      if constexpr (declares_learnables<std::decay_t<decltype(op)>>) slots[k] = parameter_slots(op);
      first[k] = total;
      total += slots[k++].size();
    });
  }
};

/// The fused backward of one plan. `exact`, when given, holds each row's (m, ln l) for the rows
/// whose |lse| exceeds large_lse, row-major (B, Hq, Sq): the caller's when p covers only a block of
/// the keys (context parallelism), where this block alone would give the wrong ones.
template <class Acc, class Plan, class Source, class DO, class O, class DQ>
backward_report run_backward(const Plan& p, const problem& pr, const backward_schedule& bs, const Source& src,
                             const strided_view<const DO>& d_out, const strided_view<const O>& out,
                             const strided_view<const Acc, 3>& lse, const backward_out<Acc, DQ>& to,
                             const std::pair<Acc, Acc>* exact = nullptr) {
  constexpr bool tensor_scores = std::is_same_v<Source, tensor_source>;
  constexpr bool terms = !tensor_scores && (is_pair_source_v<Source> || is_separable_source_v<Source>);
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  using Ops = std::decay_t<decltype(ops)>;
  constexpr std::size_t n_ops = decltype(hana::length(ops))::value;
  using IO = backward_io<Acc, DO, Ops>;
  const std::size_t n = tensor_scores ? 0 : to.dq.at.shape[3];
  const std::size_t rows = pr.batch * pr.q_heads * pr.q_len, dqp = simd::padded<Acc>(n);
  const std::size_t chunks = bs.key_chunks;
  // The dQ partials, (chunks, B, Hq, Sq, dqp), zeroed row by row on the threads below. One chunk
  // accumulates in place when dQ's rows are the kernel's rows (dqp wide, in order).
  Acc* dq_part = nullptr;
  if constexpr (std::is_same_v<DQ, Acc>)
    if (!tensor_scores && chunks == 1 && n == dqp && to.dq.inner_stride() == 1 &&
        to.dq.at.stride[2] == std::ptrdiff_t(dqp) &&
        (pr.q_heads == 1 || to.dq.at.stride[1] == std::ptrdiff_t(pr.q_len * dqp)) &&
        (pr.batch == 1 || to.dq.at.stride[0] == std::ptrdiff_t(pr.q_heads * pr.q_len * dqp)))
      dq_part = to.dq.data;
  const bool direct = dq_part != nullptr;
  std::unique_ptr<Acc[]> dq_buf;
  if (!tensor_scores && !direct) dq_part = (dq_buf = std::make_unique_for_overwrite<Acc[]>(chunks * rows * dqp)).get();
  std::vector<Acc> delta(rows), row_sums(chunks * rows, Acc(0));
  std::vector<Acc> dalpha_part(terms ? chunks * rows : 0, Acc(0));
  std::size_t params = 0;
  if constexpr (is_pair_source_v<Source>) params = src.params;
  std::vector<Acc> dparams_part(bs.tasks * params, Acc(0));
  const modifier_slots<Ops> mods(ops);
  std::vector<Acc> dmodify_part(bs.tasks * mods.total, Acc(0));
  std::vector<Acc> shift(rows), rel(rows, Acc(0));
  std::vector<std::atomic<std::uint32_t>> turns(pr.batch * pr.q_heads * chunks *
                                                ((pr.q_len + bs.block_q - 1) / std::max<std::size_t>(bs.block_q, 1)));
  IO io{.d_out = d_out,
        .shift = shift.data(),
        .rel = rel.data(),
        .delta = delta.data(),
        .dq_part = dq_part,
        .dalpha_part = dalpha_part.data(),
        .dbeta = to.dbeta,
        .dparams_part = dparams_part.data(),
        .row_sums = row_sums.data(),
        .turns = turns.data(),
        .dk = to.dk,
        .dv = to.dv,
        .dx = to.dx,
        .mods = &mods,
        .dmodify_part = dmodify_part.data()};
  // bias gradients: the full (B, Hq, Sq, Skv) gradient at each bias, reduced below
  std::vector<std::vector<Acc>> bias_full;
  bias_full.reserve(n_ops);
  std::size_t k = 0;
  hana::for_each(ops, [&](const auto& op) {
    if constexpr (is_tensor_bias_v<std::decay_t<decltype(op)>>) {
      bias_full.emplace_back(rows * pr.kv_len, Acc(0));
      io.bias_full[k] = bias_full.back().data();
    }
    ++k;
  });

  using worker_t = backward_worker<Acc, Plan, Ops, std::decay_t<decltype(masks)>, IO, Source>;
  // Every pass over the rows runs on the threads too (each row's work is the same for any count).
  const auto row_index = [&](std::size_t r) {
    return std::array<std::size_t, 3>{r / pr.q_len / pr.q_heads, r / pr.q_len % pr.q_heads, r % pr.q_len};
  };
#pragma omp parallel num_threads(bs.threads) if (bs.threads > 1)
  {
#pragma omp for schedule(static)
    for (std::size_t r = 0; r < rows; ++r) {  // Δ, the shift, and the row's dQ partials zeroed
      const auto [b, h, i] = row_index(r);
      delta[r] = kernel::dot_row<Acc>(d_out.row(b, h, i), d_out.inner_stride(), out.row(b, h, i), out.inner_stride(),
                                      pr.v_dim);
      shift[r] = lse(b, h, i);
      if (std::abs(shift[r]) > large_lse && !std::isinf(shift[r]))
        std::tie(shift[r], rel[r]) = exact ? exact[r] : exact_row_stats<Acc>(p, pr, ops, masks, b, h, i);
      if constexpr (!tensor_scores)
        for (std::size_t c = 0; c < chunks; ++c) std::fill_n(dq_part + (c * rows + r) * dqp, dqp, Acc(0));
    }
    worker_t wk(p, pr, ops, masks, bs, io, src);
#pragma omp for schedule(dynamic, 1)
    for (std::size_t t = 0; t < bs.tasks; ++t) wk.run(t);
    if constexpr (!tensor_scores) {
#pragma omp for schedule(static)
      for (std::size_t r = 0; r < rows; ++r) {  // dQ: the partials summed in chunk order
        const auto [b, h, i] = row_index(r);
        if (!direct) {
          DQ* dst = to.dq.row(b, h, i);
          std::size_t d = 0;
          if constexpr (std::is_same_v<DQ, Acc>)  // the same sums a batch at a time
            for (constexpr std::size_t w = simd::width<Acc>; to.dq.inner_stride() == 1 && d + w <= n; d += w) {
              simd::batch<Acc> s(Acc(0));
              for (std::size_t c = 0; c < chunks; ++c) s += simd::load(dq_part + (c * rows + r) * dqp + d);
              simd::store(dst + d, s);
            }
          for (; d < n; ++d) {
            Acc s = 0;
            for (std::size_t c = 0; c < chunks; ++c) s += dq_part[(c * rows + r) * dqp + d];
            dst[std::ptrdiff_t(d) * to.dq.inner_stride()] = DQ(s);
          }
        }
        if constexpr (terms) {
          Acc s = 0;
          for (std::size_t c = 0; c < chunks; ++c) s += dalpha_part[c * rows + r];
          to.dalpha[r] = s;
        }
      }
    }
  }
  if (params) {  // summed in task order, in double
    to.dparams->assign(params, 0.0);
    for (std::size_t t = 0; t < bs.tasks; ++t)
      for (std::size_t k = 0; k < params; ++k) (*to.dparams)[k] += double(dparams_part[t * params + k]);
  }
  std::size_t bi = 0, mi = 0, oi = 0;
  hana::for_each(ops, [&](const auto& op) {
    if constexpr (declares_learnables<std::decay_t<decltype(op)>>) {  // summed in task order, in double
      if (to.dmodify->size() == mi) to.dmodify->push_back(mods.slots[oi].zeros());
      std::vector<double>& d = (*to.dmodify)[mi++].d;
      for (std::size_t t = 0; t < bs.tasks; ++t)
        for (std::size_t k = 0; k < d.size(); ++k) d[k] += double(dmodify_part[t * mods.total + mods.first[oi] + k]);
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
    const double e = std::abs(double(s) - 1);
    rep.worst_row_sum_error =
        std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(rep.worst_row_sum_error, e);
  }
  return rep;
}

}  // namespace xattn
