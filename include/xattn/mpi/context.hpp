#pragma once
// xattn::mpi::context: context-parallel attention over a communicator. Planned once (who holds
// which rows, FFTW-MPI / heFFTe style), then eval_with_lse and grad any number of times. Every
// rank passes its own rows of Q, K and V (in the order local_rows() gives) in the same expression;
// masks and modifiers see global positions; results come back in each rank's rows. Keys and
// values may come from a kv_cache whose sequences each hold the rank's rows.
#include "../eval/entry/plumbing.hpp"
#include "../eval/paths/select.hpp"
#include "../eval/plan/plan.hpp"
#include "../eval/plan/resolve.hpp"
#include "backward.hpp"
#include "cache_operands.hpp"
#include "forward.hpp"
#include "reduce.hpp"

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <string_view>
#include <typeinfo>
#include <vector>

namespace xattn::mpi {

namespace detail {

/// The same number on every rank for the same expression type (FNV-1a of its mangled name).
template <class E>
std::int64_t type_fingerprint() {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : std::string_view(typeid(E).name())) h = (h ^ std::uint8_t(c)) * 1099511628211ull;
  return std::int64_t(h >> 1);
}

template <class Plan>
agreement facts_of(const Plan& p) {
  agreement a;
  a.add("the expression's type", type_fingerprint<Plan>());
  std::int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &p.scale, sizeof scale_bits);
  a.add("the scale", scale_bits);
  a.add("the dropout probability", std::int64_t(double(p.drop.p) * 1e9));
  a.add("the dropout seed", std::int64_t(p.drop.seed >> 1));
  return a;  // the sequence length and balance were agreed when the context was made
}

template <class Plan>
constexpr bool check_ring_expression() {
  static_assert(Plan::has_values,
                "xattn: mpi::context::eval_with_lse and grad need an attention expression "
                "softmax(...) * V");
  static_assert(!decltype(std::declval<Plan>().base)::tensor_scores,
                "xattn: mpi::context needs scores computed from Q and K (Q * trans(K) or score(policy, Q, K)); a "
                "score tensor X has no key blocks to pass around the ring");
  static_assert(!transforms_v<std::decay_t<decltype(std::declval<Plan>().base)>>,
                "xattn: mpi::context does not take rope(Q, positions) or rope(K, positions) yet (nor another load "
                "transform): rotate Q and K before the ring, or evaluate in one process");
  static_assert(!is_sum_base_v<std::decay_t<decltype(std::declval<Plan>().base)>>,
                "xattn: mpi::context does not take a sum of score products (Q1 * trans(K1) + Q2 * trans(K2)) yet: "
                "evaluate it in one process");
  return true;
}

}  // namespace detail

class context {
 public:
  /// Plans the layout of a sequence of seq_len rows over comm's ranks (collective: comm is duplicated).
  context(MPI_Comm comm, std::size_t seq_len, balance how = balance::zigzag) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) fail("mpi::context: MPI is not initialised; call MPI_Init (or MPI_Init_thread) first");
    MPI_Comm_dup(comm, &su_.comm);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(su_.comm, &rank);
    MPI_Comm_size(su_.comm, &ranks);
    su_.rank = std::size_t(rank), su_.ranks = std::size_t(ranks), su_.seq_len = seq_len, su_.how = how;
    for (std::size_t r = 0; r < su_.ranks; ++r) su_.segments.push_back(segments_of(seq_len, su_.ranks, r, how));
    detail::agreement a;
    a.add("the sequence length", std::int64_t(seq_len));
    a.add("the balance", std::int64_t(how));
    detail::check_agreement(su_.comm, "mpi::context(comm, seq_len, balance)", a);
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ~context() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&su_.comm);
  }

  std::size_t rank() const noexcept { return su_.rank; }
  std::size_t ranks() const noexcept { return su_.ranks; }
  std::size_t seq_len() const noexcept { return su_.seq_len; }
  /// The global sequence positions this rank holds, in the order its Q, K and V rows must follow.
  std::vector<std::size_t> local_rows() const {
    std::vector<std::size_t> r;
    for (const segment& s : su_.segments[su_.rank])
      for (std::size_t i = 0; i < s.size; ++i) r.push_back(s.first + i);
    return r;
  }
  /// The runs of consecutive positions rank r holds (local_rows() of rank r, compressed).
  const std::vector<segment>& segments(std::size_t r) const { return su_.segments.at(r); }

  /// This rank's compute time, blocks and bytes sent in the last eval_with_lse or grad.
  const ring_stats& last_stats() const noexcept { return su_.stats; }

  /// Benchmarks only: comm_mode::none computes every ring step on the rank's own keys without any
  /// message (wrong results; the ring's compute time alone). Needs equal parts on every rank.
  void set_comm_mode(comm_mode m) {
    if (m == comm_mode::none)
      for (std::size_t r = 0; r < su_.ranks; ++r)
        if (su_.segments[r].front().size != su_.segments[0].front().size ||
            su_.segments[r].back().size != su_.segments[0].back().size)
          fail("mpi::context::set_comm_mode(none): the parts differ in size (sequence length ", su_.seq_len, " over ",
               su_.ranks, " ranks)");
    su_.mode = m;
  }

  /// softmax(...) * V over the whole sequence for this rank's rows, with their log-sum-exp: the
  /// same types eval_with_lse(e) returns. Collective.
  template <class Out = void, expression E>
  auto eval_with_lse(const E& e, const schedule& sch = {}) const {
    if constexpr (check_grammar<E>() && check_output_type<Out>()) {
      const auto cached = make_plan(e);
      if constexpr (detail::check_ring_expression<std::decay_t<decltype(cached)>>()) {
        detail::agreement a;
        const auto& p = detail::without_cache(cached, a.local_error);
        using Acc = accumulator_of_t<std::decay_t<decltype(p)>>;
        a.facts = detail::facts_of(p).facts;
        const auto rp = detail::prepare<Acc>(su_, p, "mpi::context::eval_with_lse(e)", a);
        return attention_with_lse<Out>(p, rp.local, [&](const auto& out, const auto& lse) {
          detail::ring_attention<Acc>(su_, p, rp, sch, out, lse);
        });
      }
    }
  }

  /// The gradients of sum(d_out ∘ output) for this rank's rows of Q, K and V, given f =
  /// eval_with_lse(e) of this context: K's and V's gradients sum every rank's queries. Bias
  /// tensors' and the scoring policy's parameter gradients are whole, the same on every rank
  /// (summed over the ranks in rank order). Collective.
  template <expression E, class F, class DOut>
  auto grad(const E& e, const F& f, const DOut& d_out, const schedule& sch = {}) const {
    if constexpr (check_grammar<E>()) {
      const auto p = make_plan(e);
      using P = std::decay_t<decltype(p)>;
      if constexpr (detail::check_ring_expression<P>() && check_backward<P>() && check_ring_backward<P>())
        return run_grad(p, f, d_out, sch);
    }
  }

 private:
  detail::setup su_;

  template <class Plan>
  static constexpr bool check_ring_backward() {
    using G = parameter_gradients_t<typename decltype(std::declval<Plan>().base)::policy_type>;
    static_assert(summable_by_parts<G>,
                  "xattn: mpi::context::grad: the scoring policy's parameter_gradients needs a member parts() "
                  "returning std::tie of its members (each a double or a contiguous tensor of double), so that "
                  "the ranks' gradients can be summed (see <xattn/policy/gradient.hpp>)");
    return summable_by_parts<G>;
  }

  template <class Plan, class F, class DOut>
  auto run_grad(const Plan& p, const F& f, const DOut& d_out, const schedule& sch) const {
    using Acc = accumulator_of_t<Plan>;
    detail::agreement a = detail::facts_of(p);
    a.local_error =
        detail::local_error_of([&] { check_gradient_inputs(p, resolve(p), f, d_out, "grad(e, f, d_out)"); });
    const auto rp = detail::prepare<Acc>(su_, p, "mpi::context::grad(e, f, d_out)", a);
    auto g = gradients_of(p, rp.local, f, d_out, 1, [&](const auto& in, const auto& out) {
      detail::ring_gradients<Acc>(su_, p, rp, sch, in, out);
    });
    for (auto& t : g.dbias) detail::sum_in_rank_order(su_.comm, t.data(), t.size());
    for (auto& t : g.dmodify) detail::sum_in_rank_order(su_.comm, t.d.data(), t.d.size());
    if constexpr (Plan::has_term) detail::sum_in_rank_order(su_.comm, g.dsinks.data(), g.dsinks.size());
    detail::sum_parameters_in_rank_order(su_.comm, g.dscore);
    return g;
  }
};

}  // namespace xattn::mpi
