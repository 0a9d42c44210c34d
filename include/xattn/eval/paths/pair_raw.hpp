#pragma once
// Score path pair_raw: a policy with nothing but operator()(q, k), called per pair on contiguous
// copies of the rows (converted once to the policy's scalar type). The slowest path: explain()
// names it so that a user can see when projections would help.
#include "../../kernel/rows.hpp"
#include "../../policy/concepts.hpp"
#include "../key_features.hpp"
#include "../resolved_schedule.hpp"

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
  static constexpr std::string_view key_work = "copy keys contiguous";
  static constexpr std::string_view query_work = "gather";

  static path_facts facts(const Base&, const problem& pr) {
    return {false, false, pr.k_dim, sizeof(Acc), simd::width<Acc>};
  }

  struct keys {
    key_features<S> f;  // the raw keys, converted
    keys(const Base&, const problem& pr, const resolved_schedule&) : f(pr, pr.k_dim) {}
    void build(const Base& b, const problem& pr) {
      const auto& kv = b.k.view;
      f.for_each_key([&](std::size_t bb, std::size_t h, std::size_t j, S* row, S&) {
        kernel::scaled_copy(kv.row(bb, h, j), kv.inner_stride(), pr.k_dim, S(1), row, 1);
      });
    }
  };

  class tiles {
   public:
    tiles(const Base& b, const problem& pr, const keys& k, const resolved_schedule& rs)
        : b_(b), k_(k), dq_(pr.q_dim), dk_(pr.k_dim), scale_(1), q_(rs.block_q * std::max<std::size_t>(dq_, 1)) {}

    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = b_.q.view;
      scale_ = scale;
      if (at == 0) i0_ = i0;
      for (std::size_t r = 0; r < rows; ++r)
        kernel::scaled_copy(qv.row(b, h, i0 + r), qv.inner_stride(), dq_, S(1), q_.data() + (at + r) * dq_, 1);
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t, Acc* s, std::size_t lds) const {
      for (std::size_t r = 0; r < rows; ++r) {
        const std::span<const S> q(q_.data() + (i0 - i0_ + r) * dq_, dq_);  // rows [i0, i0 + rows) of the block
        for (std::size_t c = 0; c < cols; ++c)
          s[r * lds + c] = scale_ * Acc(S(b_.policy(q, std::span<const S>(k_.f.row(b, hk, j0 + c), dk_))));
      }
    }

   private:
    const Base& b_;
    const keys& k_;
    std::size_t dq_, dk_, i0_ = 0;
    Acc scale_;
    std::vector<S> q_;
  };
};

}  // namespace xattn
