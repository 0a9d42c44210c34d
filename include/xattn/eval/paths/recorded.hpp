#pragma once
// Score path recorded: a policy with nothing but a generic operator()(q, k), recorded on
// xattn::recorded once per evaluation (record/separate.hpp) and run in one of three forms:
//   separated (parts/separated_score.hpp): what depends on one row only once per row, Σ fq·fk by
//             the score microkernels, the per-pair remainder on lanes;
//   lanes     (parts/lane_score.hpp): the recording pair by pair on lanes, when it does not factor;
//   pairwise  (pair_raw.hpp): the policy itself pair by pair, when the recording is incomplete (a
//             value left it: a call qualified with std::).
// explain() says which, and why.
#include "../../kernel/aligned.hpp"
#include "../../kernel/qk.hpp"
#include "../../kernel/rows.hpp"
#include "../../policy/gradient.hpp"
#include "../../record/machine.hpp"
#include "../../record/separate.hpp"
#include "../operands/key_panels.hpp"
#include "../operands/program_rows.hpp"
#include "../plan/schedule.hpp"
#include "pair_raw.hpp"
#include "parts/common.hpp"
#include "parts/lane_score.hpp"
#include "parts/separated_score.hpp"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace xattn {

template <class Acc, class Base>
struct recorded_path {
  using policy_t = typename Base::policy_type;
  using pairwise = pair_raw_path<Acc, Base>;
  using S = score_scalar_t<policy_t, Acc>;
  static constexpr std::string_view name = "recorded";
  static constexpr std::string_view what =
      "operator()(q, k) recorded and separated: per-row programs, fq·fk by the score microkernel, a per-pair "
      "program on lanes";

  /// The policy recorded for these sizes and separated.
  static std::shared_ptr<const record::separation> separate(const Base& base, const problem& pr) {
    return record::separate_policy(base.policy, pr.q_dim, pr.k_dim);
  }
  using separated_t = separated_score<Acc, Base>;
  using lanes_t = lane_score<Acc, Base>;

  /// What explain prints about this evaluation: what was hoisted, what runs per pair, or why not.
  static std::string describe(const Base& base, const problem& pr) {
    const auto s = separate(base, pr);
    const record::separated& p = s->parts;
    const std::size_t row_guards = p.query_guards.size() + p.key_guards.size();
    const std::string guards =
        (p.expect.empty() ? ""
                          : ", " + std::to_string(p.expect.size()) + " guards (pairs failing one: by the policy)") +
        (row_guards ? ", " + std::to_string(row_guards) + " row guards (a row failing one: its pairs by the policy)"
                    : "");
    if (s->lanes)
      return "not separated (" + s->reason + "): the recording pair by pair on lanes, " +
             std::to_string(p.pair.operations()) + " operations per pair" + guards;
    if (!s->ok) return "not separated (" + s->reason + "): " + std::string(pairwise::what);
    const std::string product = p.features ? std::to_string(p.features) +
                                                 " features per row by the score microkernel (grouped by the " +
                                                 (p.by_key ? "key's" : "query's") + " factors); "
                                           : "";
    const std::string map = p.map_features ? "; a feature map over " + std::to_string(p.map_features) + " features, " +
                                                 std::to_string(p.map.operations()) +
                                                 " operations per feature and pair, on lanes of (feature, key)"
                                           : "";
    const auto rows = [](const record::linear_split& lin, std::size_t scalars) {
      std::string t = std::to_string(lin.others.operations()) + " operations, ";
      if (lin.any()) t += std::to_string(lin.linear.size()) + " outputs a product by a matrix, ";
      return t + std::to_string(scalars) + " scalars";
    };
    return product + "per query row " + rows(p.query_linear, p.query_scalars) + "; per key row " +
           rows(p.key_linear, p.key_scalars) + "; per pair " +
           (p.product_only() ? "nothing (the score is the product)"
                             : std::to_string(p.pair.operations()) + " operations on lanes") +
           map + guards;
  }

  // a separated score that is the product itself: facts() says when
  static constexpr bool plain_products = true;
  static path_facts facts(const Base& base, const problem& pr) {
    const auto s = separate(base, pr);
    if (s->lanes) {
      path_facts f = pair_facts<Acc>(pr.k_dim);
      f.query_width = simd::padded<Acc>(pr.q_dim);
      f.query_grads_dense = true;
      return f;
    }
    if (!s->ok) return pairwise::facts(base, pr);
    // no product (a feature map alone): no panels
    path_facts f = s->parts.features ? dot_facts<Acc>(s->parts.features) : pair_facts<Acc>(pr.k_dim);
    f.keys_in_place_ok = s->parts.features > 0;
    f.plain_products = s->parts.product_only();
    f.query_grads_dense = true;
    f.query_width = separated_t::query_grad_width(s->parts, pr);
    return f;
  }
  static constexpr kernel::tile_op score_op(const forward_schedule& fs) {
    return fs.keys == key_reads::in_place ? kernel::op_on<Acc>(kernel::operation::qk_direct)
           : fs.keys == key_reads::none   ? kernel::tile_op{kernel::operation::pair_scores}
                                          : kernel::op_on<Acc>(kernel::operation::qk_tile);
  }
  static constexpr kernel::tile_op key_pack_op = kernel::op_on<Acc>(kernel::operation::pack_kt);
  static constexpr std::string_view key_work = "keys through the key program (not separated: transposed, or copied)";
  static constexpr op_list key_ops{kernel::tile_op{kernel::operation::project_rows}},
      query_ops{kernel::tile_op{kernel::operation::project_rows}};
  static constexpr backward_steps backward_ops = row_product_steps<Acc>(
      {kernel::tile_op{kernel::operation::project_rows}}, kernel::tile_op{kernel::operation::pair_program},
      kernel::tile_op{kernel::operation::pair_program_gradients}, {kernel::tile_op{kernel::operation::project_back}});

  /// One of the three forms' objects, and calls on whichever it holds.
  template <class Pairwise, class Separated, class Lanes>
  struct one_of {
    std::optional<Pairwise> pairwise;
    std::optional<Separated> separated;
    std::optional<Lanes> lanes;
    template <class F>
    decltype(auto) on(F&& f) {
      if (separated) return f(*separated);
      if (lanes) return f(*lanes);
      return f(*pairwise);
    }
  };

  // ---- forward ----

  struct keys : one_of<typename pairwise::keys, typename separated_t::keys, typename lanes_t::keys> {
    keys(const Base& base, const problem& pr, const forward_schedule& fs) {
      auto s = separate(base, pr);
      if (s->ok)
        this->separated.emplace(std::move(s), base, pr, fs);
      else if (s->lanes)
        this->lanes.emplace(std::move(s), base, pr, fs);
      else
        this->pairwise.emplace(base, pr, fs);
    }
    void build(const Base& base, const problem& pr) {
      this->on([&](auto& k) { k.build(base, pr); });
    }
  };

  class tiles : one_of<typename pairwise::tiles, typename separated_t::tiles, typename lanes_t::tiles> {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs) {
      if (k.separated)
        this->separated.emplace(base, pr, *k.separated, fs);
      else if (k.lanes)
        this->lanes.emplace(base, pr, *k.lanes, fs);
      else
        this->pairwise.emplace(base, pr, *k.pairwise, fs);
    }
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      this->on([&](auto& t) { t.load_queries(b, h, i0, rows, scale, at); });
    }
    void prefetch_with_keys(kernel::row_prefetch also) noexcept {
      if (this->separated) this->separated->prefetch_with_keys(also);
    }
    void scores(std::size_t b, std::size_t h, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      this->on([&](auto& t) { t.scores(b, h, hk, i0, rows, j0, cols, colsp, s, lds); });
    }
  };

  // ---- backward ----

  struct grads : one_of<typename pairwise::grads, typename separated_t::grads, typename lanes_t::grads> {
    grads(const Base& base, const problem& pr, const backward_schedule& bs, const gradient_targets<Acc>& t) {
      auto s = separate(base, pr);
      if (s->ok)
        this->separated.emplace(std::move(s), base, pr, bs, t);
      else if (s->lanes)
        this->lanes.emplace(std::move(s), base, pr, bs, t);
      else
        this->pairwise.emplace(base, pr, bs, t);
    }
    void build(const Base& base, const problem& pr) {
      this->on([&](auto& g) { g.build(base, pr); });
    }
    strided_view<Acc> query_grads() {
      return this->on([](auto& g) { return g.query_grads(); });
    }
    void reduce_row(std::size_t b, std::size_t h, std::size_t i, std::size_t chunks) {
      this->on([&](auto& g) { g.reduce_row(b, h, i, chunks); });
    }
    template <class G>
    void finish(const Base& base, const problem& pr, const backward_schedule& bs, G& out) {
      this->on([&](auto& g) { g.finish(base, pr, bs, out); });
    }
  };

  class grad_tiles
      : one_of<typename pairwise::grad_tiles, typename separated_t::grad_tiles, typename lanes_t::grad_tiles> {
   public:
    grad_tiles(const Base& base, const problem& pr, grads& g, const backward_schedule& bs, Acc scale) {
      if (g.separated)
        this->separated.emplace(base, pr, *g.separated, bs, scale);
      else if (g.lanes)
        this->lanes.emplace(base, pr, *g.lanes, bs, scale);
      else
        this->pairwise.emplace(base, pr, *g.pairwise, bs, scale);
    }
    void begin_task() {
      this->on([](auto& t) { t.begin_task(); });
    }
    void load_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
      this->on([&](auto& t) { t.load_keys(b, hk, j0, cols); });
    }
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t chunk) {
      this->on([&](auto& t) { t.load_queries(b, h, i0, rows, chunk); });
    }
    template <class Range>
    void scores(std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds, Range range) {
      this->on([&](auto& t) { t.scores(cols, colsp, s, lds, range); });
    }
    template <class RowRange, class KeyRange>
    void gradients(const Acc* ds, std::size_t lds, std::size_t cols, std::size_t colsp, Acc* dq, RowRange rows,
                   KeyRange keys) {
      this->on([&](auto& t) { t.gradients(ds, lds, cols, colsp, dq, rows, keys); });
    }
    /// Plain tiles (P and dS from the products' epilogues): a separated score that is the product.
    bool plain() const noexcept { return this->separated && this->separated->plain(); }
    template <class Epi>
    void product(std::size_t colsp, Acc* s, std::size_t lds, const Epi& epi) {
      this->separated->product(colsp, s, lds, epi);
    }
    void store_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
      this->on([&](auto& t) { t.store_keys(b, hk, j0, cols); });
    }
    void end_task(std::size_t id) {
      this->on([&](auto& t) { t.end_task(id); });
    }
  };
};

}  // namespace xattn
