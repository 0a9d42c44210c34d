#pragma once
// Score path pair_raw: a policy with nothing but operator()(q, k), called per pair on contiguous
// copies of the rows (converted once to the policy's scalar type). The slowest path: explain()
// names it so that a user can see when projections would help.
// Backward: the raw rows copied once, each tile's scores recomputed pair by pair and dS taken back
// pair by pair through operator() on the tape (parts/pair_grads.hpp), the gradients at the rows
// being dQ and dK (parts/feature_grads.hpp).
#include "../../kernel/rows.hpp"
#include "../../policy/concepts.hpp"
#include "../operands/features.hpp"
#include "../plan/schedule.hpp"
#include "parts/common.hpp"
#include "parts/feature_grads.hpp"
#include "parts/pair_grads.hpp"

#include <span>
#include <string_view>
#include <vector>

namespace xattn {

template <class Acc, class Base>
struct pair_raw_path {
  using policy_t = typename Base::policy_type;
  using S = score_scalar_t<policy_t, Acc>;
  static constexpr std::string_view name = "pair_raw";
  static constexpr std::string_view what = "operator()(q, k) per pair on copies of the rows";

  static constexpr bool plain_products = false;
  static path_facts facts(const Base&, const problem& pr) {
    path_facts f = pair_facts<Acc>(pr.k_dim);
    f.query_width = pr.q_dim;
    f.query_grads_dense = true;  // the rows' own gradient copies
    return f;
  }
  static constexpr kernel::tile_op score_op(const forward_schedule&) {
    return kernel::tile_op{kernel::operation::pair_scores};
  }
  static constexpr kernel::tile_op key_pack_op{};  // no panels
  static constexpr std::string_view key_work = "copy keys contiguous";
  static constexpr op_list key_ops{}, query_ops{};
  static constexpr backward_steps backward_ops{{},
                                               {},
                                               {kernel::tile_op{kernel::operation::pair_scores}},
                                               {kernel::tile_op{kernel::operation::pair_gradients}},
                                               {}};

  // ---- forward ----

  struct keys {
    row_features<S> f;  // the raw keys, converted
    keys(const Base&, const problem& pr, const forward_schedule&) : f(pr.batch, pr.kv_heads, pr.kv_len, pr.k_dim) {}
    void build(const Base& base, const problem&) { copy_rows(f, base.k.view); }
  };

  class tiles {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs)
        : base_(base), k_(k), dq_(pr.q_dim), dk_(pr.k_dim), scale_(1), q_(fs.block_q * std::max<std::size_t>(dq_, 1)) {}

    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = base_.q.view;
      scale_ = scale;
      if (at == 0) i0_ = i0;
      for (std::size_t r = 0; r < rows; ++r)
        kernel::scaled_copy(qv.row(b, h, i0 + r), qv.inner_stride(), dq_, S(1), q_.data() + (at + r) * dq_, 1);
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t, Acc* s, std::size_t lds) const {
      kernel::trace::note(kernel::tile_op{kernel::operation::pair_scores});
      for (std::size_t r = 0; r < rows; ++r) {
        const std::span<const S> q(q_.data() + (i0 - i0_ + r) * dq_, dq_);  // rows [i0, i0 + rows) of the block
        for (std::size_t c = 0; c < cols; ++c)
          s[r * lds + c] = scale_ * Acc(S(base_.policy(q, std::span<const S>(k_.f.row(b, hk, j0 + c), dk_))));
      }
    }

   private:
    const Base& base_;
    const keys& k_;
    std::size_t dq_, dk_, i0_ = 0;
    Acc scale_;
    std::vector<S> q_;
  };

  // ---- backward ----

  using grads = feature_grads<Acc, Base>;

  using grad_tiles = feature_grad_tiles<Acc, Base, pair_grads<Acc, policy_t>, false>;
};

}  // namespace xattn
