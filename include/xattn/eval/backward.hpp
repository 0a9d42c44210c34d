#pragma once
// The fused backward driver: Δ = rowsum(dO ∘ O) per row, then every (batch, key head, key chunk)
// task on the schedule's threads (any thread may take any task: each writes only its own dK, dV
// rows, its chunk's dQ partial and its chunk's bias-gradient entries), then dQ summed over the
// chunks in order and the bias gradients reduced over their broadcast axes -- all in an order that
// does not depend on the thread count.
#include "backward_worker.hpp"
#include "reference_grad.hpp"

#include <vector>

namespace xattn {

/// What the driver hands back besides the views it wrote.
struct backward_report {
  double worst_row_sum_error = 0;  // max |Σ_j P_ij − 1| over rows with visible keys
};

/// Beyond this a float log-sum-exp cannot resolve a probability to 1e-4 (its ulp is 1.2e-4).
inline constexpr double large_lse = 1024;

/// The row's max final score m and ln Σ e^(s - m), in double from the plan (a row of d2l's -1e6
/// fills: its log-sum-exp -1e6 + ln Skv is stored to within 0.06 in float, but s - m is exact).
template <class Acc, class Plan, class Ops, class Masks>
std::pair<Acc, Acc> exact_row_stats(const Plan& p, const problem& pr, const Ops& ops, const Masks& masks, std::size_t b,
                                    std::size_t h, std::size_t i) {
  std::vector<double> s(pr.kv_len);
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < pr.kv_len; ++j) {
    double x;
    if constexpr (decltype(p.base)::tensor_scores) {
      x = double(p.base.x.view(b, h, i, j));
    } else {
      const auto &q = p.base.q.view, &k = p.base.k.view;
      x = kernel::dot_row<double>(q.row(b, h, i), q.inner_stride(), k.row(b, h / (pr.q_heads / pr.kv_heads), j),
                                  k.inner_stride(), pr.q_dim);
    }
    x *= p.scale;
    hana::for_each(ops, [&](const auto& op) { x = double(op(x, b, h, i, j)); });
    s[j] = masked_score(masks, x, b, h, i, j);
    m = std::max(m, s[j]);
  }
  double l = 0;
  for (double x : s) l += std::exp(x - m);
  return {Acc(m), Acc(std::log(l))};
}

template <class Acc, class Plan, class DO, class O, class DQ>
backward_report run_backward(const Plan& p, const problem& pr, const backward_schedule& bs,
                             const strided_view<const DO>& d_out, const strided_view<const O>& out,
                             const strided_view<const Acc, 3>& lse, const strided_view<DQ>& dq,
                             const strided_view<Acc>& dk, const strided_view<Acc>& dv, const strided_view<Acc>& dx,
                             std::vector<xt::xarray<Acc>>& dbias) {
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  using Ops = std::decay_t<decltype(ops)>;
  constexpr std::size_t n_ops = decltype(hana::length(ops))::value;
  using IO = backward_io<Acc, DO, n_ops>;
  const std::size_t rows = pr.batch * pr.q_heads * pr.q_len, dqp = simd::padded<Acc>(pr.q_dim);
  std::vector<Acc> delta(rows), row_sums(bs.key_chunks * rows, Acc(0));
  std::vector<Acc> dq_part(bs.key_chunks * rows * dqp, Acc(0));
  for (std::size_t b = 0, n = 0; b < pr.batch; ++b)
    for (std::size_t h = 0; h < pr.q_heads; ++h)
      for (std::size_t i = 0; i < pr.q_len; ++i, ++n)
        delta[n] = kernel::dot_row<Acc>(d_out.row(b, h, i), d_out.inner_stride(), out.row(b, h, i), out.inner_stride(),
                                        pr.v_dim);
  std::vector<Acc> shift(rows), rel(rows, Acc(0));
  for (std::size_t b = 0, n = 0; b < pr.batch; ++b)
    for (std::size_t h = 0; h < pr.q_heads; ++h)
      for (std::size_t i = 0; i < pr.q_len; ++i, ++n) {
        shift[n] = lse(b, h, i);
        if (std::abs(shift[n]) > large_lse && !std::isinf(shift[n]))
          std::tie(shift[n], rel[n]) = exact_row_stats<Acc>(p, pr, ops, masks, b, h, i);
      }
  IO io{d_out, shift.data(), rel.data(), delta.data(), dq_part.data(), row_sums.data(), dk, dv, dx, {}};
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

  using worker_t = backward_worker<Acc, Plan, Ops, std::decay_t<decltype(masks)>, IO>;
  const std::size_t chunks = bs.key_chunks;
#pragma omp parallel num_threads(bs.threads) if (bs.threads > 1)
  {
    worker_t wk(p, pr, ops, masks, bs, io);
#pragma omp for schedule(dynamic, 1)
    for (std::size_t t = 0; t < bs.tasks; ++t) {
      const std::size_t c = t % chunks, bh = t / chunks;
      wk.run(bh / pr.kv_heads, bh % pr.kv_heads, c);
    }
  }

  if constexpr (!decltype(p.base)::tensor_scores) {
    for (std::size_t b = 0, n = 0; b < pr.batch; ++b)
      for (std::size_t h = 0; h < pr.q_heads; ++h)
        for (std::size_t i = 0; i < pr.q_len; ++i, ++n) {
          DQ* dst = dq.row(b, h, i);
          for (std::size_t d = 0; d < pr.q_dim; ++d) {
            Acc s = 0;
            for (std::size_t c = 0; c < chunks; ++c) s += dq_part[(c * rows + n) * dqp + d];
            dst[std::ptrdiff_t(d) * dq.inner_stride()] = DQ(s);
          }
        }
  }
  std::size_t bi = 0;
  hana::for_each(ops, [&](const auto& op) {
    if constexpr (is_tensor_bias_v<std::decay_t<decltype(op)>>) {
      auto [g, view] = bias_gradient<Acc>(op, pr);
      const std::vector<Acc>& full = bias_full[bi++];
      std::size_t n = 0;
      for (std::size_t b = 0; b < pr.batch; ++b)
        for (std::size_t h = 0; h < pr.q_heads; ++h)
          for (std::size_t i = 0; i < pr.q_len; ++i)
            for (std::size_t j = 0; j < pr.kv_len; ++j) view(b, h, i, j) += full[n++];
      dbias.push_back(std::move(g));
    }
  });

  backward_report rep;
  for (std::size_t n = 0; n < rows; ++n) {
    Acc s = 0;
    for (std::size_t c = 0; c < chunks; ++c) s += row_sums[c * rows + n];
    // no visible key, or a NaN score (the forward's row is NaN; so are its gradients)
    if ((std::isinf(shift[n]) && shift[n] < 0) || std::isnan(shift[n])) continue;
    const double e = std::abs(double(s) - 1);
    rep.worst_row_sum_error =
        std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(rep.worst_row_sum_error, e);
  }
  return rep;
}

}  // namespace xattn
