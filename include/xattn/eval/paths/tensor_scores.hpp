#pragma once
// Score path tensor: the scores are given as a tensor X (d2l's masked_softmax(X, valid_lens)); a
// tile is X's block, converted and times the scale.
#include "../../simd/compat.hpp"
#include "../resolved_schedule.hpp"

#include <string_view>

namespace xattn {

template <class Acc, class Base>
struct tensor_scores_path {
  static constexpr std::string_view name = "tensor";
  static constexpr std::string_view what = "the scores read from the tensor X";
  static constexpr std::string_view key_work = "";
  static constexpr std::string_view query_work = "";

  static path_facts facts(const Base&, const problem&) { return {false, false, 0, sizeof(Acc), simd::width<Acc>}; }

  struct keys {
    keys(const Base&, const problem&, const resolved_schedule&) {}
    void build(const Base&, const problem&) {}
  };

  class tiles {
   public:
    tiles(const Base& b, const problem&, const keys&, const resolved_schedule&) : b_(b), scale_(1) {}

    /// Scores are read by (head, row) in scores(): never run with rows of several heads.
    void load_queries(std::size_t, std::size_t, std::size_t, std::size_t, Acc scale, std::size_t = 0) {
      scale_ = scale;
    }

    void scores(std::size_t b, std::size_t h, std::size_t, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t, Acc* s, std::size_t lds) const {
      const auto& xv = b_.x.view;
      for (std::size_t r = 0; r < rows; ++r) {
        const auto* src = xv.row(b, h, i0 + r) + std::ptrdiff_t(j0) * xv.inner_stride();
        for (std::size_t c = 0; c < cols; ++c)
          s[r * lds + c] = scale_ * Acc(src[std::ptrdiff_t(c) * xv.inner_stride()]);
      }
    }

   private:
    const Base& b_;
    Acc scale_;
  };
};

}  // namespace xattn
