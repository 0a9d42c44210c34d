#pragma once
// The score modifiers in the backward. Forward through them on dual numbers, keeping each one's
// derivative; backward, the gradient at the final score taken to the base score, recorded on the
// way at every bias tensor, and the gradients of each modifier's learnables (learnable.hpp) added
// from a second evaluation on param_dual, which carries the derivatives with respect to the
// learnables it read (the tape, var.hpp, when more meet than it holds). Without modifiers every
// member does nothing.
#include "../../dual.hpp"
#include "../../hana.hpp"
#include "../../learnable.hpp"
#include "../../param_dual.hpp"
#include "../../policy/gradient.hpp"
#include "../plan/bias_terms.hpp"
#include "../tiling/apply_modifiers.hpp"

#include <array>
#include <span>
#include <vector>

namespace xattn {

/// Each modifier's learnables (bound ops: the objects the workers run) and where they start in a
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

/// Where the chain writes, shared by every thread: per modifier, the full (B, Hq, Sq, Skv) gradient
/// at a bias term (or nothing), and the modifiers' learnables' gradients per task.
template <class Acc, class Ops>
struct modifier_gradients {
  static constexpr std::size_t n_ops = modifier_slots<Ops>::n_ops;
  const modifier_slots<Ops>* slots = nullptr;
  std::array<strided_view<Acc>, n_ops + 1> bias_full{};  // (B, Hq, Sq, Skv), or empty
  Acc* per_task = nullptr;                               // (task ids, slots->total)
};

template <class Acc, class Ops>
class modifier_chain {
  static constexpr std::size_t n_ops = modifier_slots<Ops>::n_ops;
  static constexpr bool learning = decltype(hana::any_of(std::declval<Ops>(), [](const auto& op) {
    return hana::bool_c<declares_learnables<std::decay_t<decltype(op)>>>;
  }))::value;

 public:
  modifier_chain(const Ops& ops, const modifier_gradients<Acc, Ops>& out, std::size_t rows, std::size_t lds)
      : ops_(ops), out_(out), lds_(lds), s0_(n_ops > 0 ? rows * lds : 0), dmodify_(learning ? out.slots->total : 0) {}

  static constexpr bool empty = n_ops == 0;

  /// Whether the one modifier writes its own backward of a row.
  static constexpr bool own_backward() {
    if constexpr (n_ops == 1)
      return has_backward_row<std::decay_t<decltype(hana::at_c<0>(std::declval<const Ops&>()))>, Acc>;
    else
      return false;
  }

  void begin_task() { std::fill(dmodify_.begin(), dmodify_.end(), Acc(0)); }
  void end_task(std::size_t id) const {
    if constexpr (learning) std::copy(dmodify_.begin(), dmodify_.end(), out_.per_task + id * dmodify_.size());
  }

  /// Row r of the tile, s[0, cols) of query (b, h, i) at keys j0...: kept as the base scores, then
  /// taken through the modifiers.
  void forward_row(Acc* s, std::size_t r, std::size_t cols, std::size_t b, std::size_t h, std::size_t i,
                   std::size_t j0) {
    if constexpr (n_ops > 0) {
      std::copy(s, s + cols, s0_.data() + r * lds_);
      apply_modifiers(ops_, s, cols, b, h, i, j0);  // as the forward pass does: no derivatives yet
    }
  }

  /// The gradient g[0, cols) at row r's final scores taken to its base scores (0 stays 0). A lone
  /// modifier that writes its own backward of a row (has_backward_row) runs it instead of being
  /// differentiated on dual numbers per score.
  void backward_row(Acc* g, std::size_t r, std::size_t cols, std::size_t b, std::size_t h, std::size_t i,
                    std::size_t j0) {
    if constexpr (own_backward()) {
      Acc* dp = nullptr;
      if constexpr (learning) dp = dmodify_.data() + out_.slots->first[0];
      hana::at_c<0>(ops_).backward_row(s0_.data() + r * lds_, g, cols, b, h, i, j0, dp);
    } else if constexpr (n_ops > 0) {
      for (std::size_t c = 0; c < cols; ++c)
        if (g[c] != Acc(0)) through(s0_[r * lds_ + c], b, h, i, j0 + c, &g[c]);
    }
  }

 private:
  /// The modifiers on one score s: returns the final score; with g, turns the gradient at the final
  /// score into the gradient at the first modifier's input, records it at every bias on the way,
  /// and adds the gradients of each modifier's learnables. Flattened and inlined into the row's
  /// loop: called per score, its duals must stay in registers, where in a large translation unit
  /// GCC stops inlining it.
  [[gnu::always_inline, gnu::flatten]] Acc through(Acc s, std::size_t b, std::size_t h, std::size_t i, std::size_t j,
                                                   Acc* g) {
    std::array<Acc, n_ops + 1> deriv{}, in{}, g_out{};
    std::size_t k = 0;
    hana::for_each(ops_, [&](const auto& op) {
      in[k] = s;
      const dual<Acc> y = op(dual<Acc>{s, Acc(1)}, b, h, i, j);
      deriv[k++] = y.d;
      s = y.v;
    });
    if (g) {
      for (std::size_t m = n_ops; m-- > 0;) {
        g_out[m] = *g;
        if (out_.bias_full[m].data) out_.bias_full[m](b, h, i, j) = *g;
        *g *= deriv[m];
      }
      if constexpr (learning) {
        k = 0;
        hana::for_each(ops_, [&](const auto& op) {
          if constexpr (declares_learnables<std::decay_t<decltype(op)>>)
            if (g_out[k] != Acc(0)) {
              const parameter_slots& slots = out_.slots->slots[k];
              Acc* dp = dmodify_.data() + out_.slots->first[k];
              const param_dual<Acc> y = op(param_dual<Acc>{in[k], Acc(1)}, b, h, i, j);
              if (y.overflowed())  // more learnables than a param_dual holds: on the tape
                on_tape(op, in[k], b, h, i, j, g_out[k], slots, std::span<Acc>(dp, slots.size()));
              else
                for (std::size_t e = 0; e < y.n; ++e)
                  if (const std::size_t n = slots.find(y.at[e]); n != parameter_slots::npos) dp[n] += g_out[k] * y.p[e];
            }
          ++k;
        });
      }
    }
    return s;
  }

  /// The rare score whose learnables overflow a param_dual, kept out of the flattened loop.
  template <class Op>
  [[gnu::noinline]] static void on_tape(const Op& op, Acc s, std::size_t b, std::size_t h, std::size_t i, std::size_t j,
                                        Acc g, const parameter_slots& slots, std::span<Acc> dp) {
    modifier_parameters_backward(op, s, b, h, i, j, g, slots, dp);
  }

  const Ops& ops_;
  const modifier_gradients<Acc, Ops>& out_;
  std::size_t lds_;
  std::vector<Acc> s0_;       // the tile's base scores, before the modifiers
  std::vector<Acc> dmodify_;  // this task's gradients at the modifiers' learnables
};

}  // namespace xattn
