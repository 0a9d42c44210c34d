#pragma once
// How the forward pass reads the values V: one reader per worker, made from the schedule's
// value_reads, owns P·V for a block of probabilities. The worker hands it probabilities and
// accumulators and never learns V's type, layout or placement; a new way of reading V is a file
// beside these and a case below.
#include "../../kernel/prefetch_queue.hpp"
#include "../../kernel/trace.hpp"
#include "../operands/head_rows.hpp"
#include "../plan/schedule.hpp"
#include "bf16_pairs.hpp"
#include "converted.hpp"
#include "in_place.hpp"
#include "strips.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace xattn {

struct no_values;

/// What values of type V in the view vv tell the schedule (plan_facts).
template <class Acc, class V, class View>
value_facts value_facts_of(const View& vv, const problem& pr) {
  return {.bf16_pairs = takes_value_pairs_v<Acc, V>,
          .in_place_ok = values_in_place<Acc>::template takes<V>(vv, pr),
          .same_type = std::is_same_v<V, Acc>};
}

template <class Acc, class Values>
class value_reader {
 public:
  using value_type = typename Values::value_type;
  using view_type = std::remove_cvref_t<decltype(Values::view)>;

  value_reader(const Values& v, const problem& pr, const forward_schedule& fs)
      : vv_(v.view),
        mode_(fs.values),
        dv_(pr.v_dim),
        dvp_(simd::padded<Acc>(pr.v_dim)),
        strips_(pr, fs.block_k),
        converted_(pr, fs.block_k, fs.values == value_reads::widened_per_head) {
    if constexpr (takes_value_pairs_v<Acc, value_type>)
      if (mode_ == value_reads::bf16_pairs) pairs_ = value_pairs<Acc>(pr, fs.block_q, fs.block_k, dvp_);
  }

  /// o[r, :] += p[r, :cols] · V[j0 : j0 + cols] for r < rows, with V's rows of head (b, hk); p holds
  /// fp32 probabilities lds apart, zero from cols to the next whole batch, and o rows ldo apart.
  void accumulate(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols, const Acc* p, std::size_t lds,
                  std::size_t rows, Acc* o, std::size_t ldo) {
    switch (mode_) {
      case value_reads::strips:
        return strips_.accumulate(vv_, b, hk, j0, cols, p, lds, rows, o, ldo);
      case value_reads::bf16_pairs:
        if constexpr (takes_value_pairs_v<Acc, value_type>)
          pairs_.accumulate(vv_, b, hk, j0, cols, p, lds, rows, o, ldo);
        return;
      case value_reads::in_place:
        return values_in_place<Acc>::accumulate(vv_, b, hk, j0, cols, p, lds, rows, o, ldo, dvp_);
      case value_reads::widened_per_head:
      case value_reads::copied_per_task:
        return converted_.accumulate(vv_, b, hk, j0, cols, p, lds, rows, o, ldo);
    }
  }

  /// f(handle), the handle prefetching the value rows of block j0 as the keys are read, when V is
  /// read in place from a cache's pages; otherwise false, f not called.
  template <class F>
  bool with_prefetch(std::size_t b, std::size_t hk, std::size_t j0, F&& f) const {
    return mode_ == value_reads::in_place &&
           values_in_place<Acc>::with_prefetch(vv_, b, hk, j0, dv_ * sizeof(value_type), f);
  }

  /// The tile operation that adds P·V when V is read as m says (explain).
  static constexpr kernel::tile_op op(value_reads m) {
    using kernel::operation;
    switch (m) {
      case value_reads::strips:
        return kernel::op_on<Acc>(operation::pv_tile_strips);
      case value_reads::bf16_pairs:
        return {operation::pv_tile_strips, kernel::bf16_pairs};
      case value_reads::in_place:  // V's elements, or a cache page's row handles
        return kernel::op_on<decltype(values_in_place<Acc>::rows_at(std::declval<const view_type&>(), 0, 0, 0)(0))>(
            operation::pv_tile);
      default:
        return kernel::op_on<Acc>(operation::pv_tile);
    }
  }

  /// Queues the value rows of head (b, hk) (forward_schedule::prefetch_next).
  void queue_head(kernel::prefetch_queue& q, std::size_t b, std::size_t hk, std::size_t kv_len) const {
    queue_head_rows(q, vv_, b, hk, 0, kv_len, false);
  }

 private:
  const decltype(Values::view)& vv_;
  value_reads mode_;
  std::size_t dv_, dvp_;
  value_strips<Acc> strips_;
  values_converted<Acc> converted_;
  value_pairs<Acc> pairs_;  // bf16 values in key pairs (vdpbf16ps), unless decoding
};

/// A pass without values (the weights, the scores): nothing to read.
template <class Acc>
class value_reader<Acc, no_values> {
 public:
  template <class... A>
  explicit value_reader(const A&...) {}
  static constexpr kernel::tile_op op(value_reads) { return {}; }
  template <class F>
  bool with_prefetch(std::size_t, std::size_t, std::size_t, F&&) const {
    return false;
  }
  void queue_head(kernel::prefetch_queue&, std::size_t, std::size_t, std::size_t) const {}
};

}  // namespace xattn
