// documents(ids): packed variable-length sequences. Against the reference (self-attention, separate
// query and key ids, offsets, unsorted ids, per-batch ids, composed with causal and lengths), its
// block classification against brute force, and its errors.
#include "support/classify.hpp"
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using testing::max_abs_diff;

namespace {

problem sizes(std::size_t batch, std::size_t sq, std::size_t skv) {
  problem pr;
  pr.batch = batch, pr.q_len = sq, pr.kv_len = skv, pr.q_dim = pr.k_dim = pr.v_dim = 4;
  return pr;
}

/// classify() must be exact for documents in runs: hidden iff no pair visible, visible iff all are.
void check_classify(const documents_mask& m, std::size_t batch, std::size_t sq, std::size_t skv, bool exact) {
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t i0 = 0; i0 < sq; i0 += 3)
      for (std::size_t i1 = i0 + 1; i1 <= std::min(sq, i0 + 7); i1 += 2)
        for (std::size_t j0 = 0; j0 < skv; j0 += 2)
          for (std::size_t j1 = j0 + 1; j1 <= std::min(skv, j0 + 9); j1 += 3) {
            const block truth = testing::classify_by_pairs(m, b, i0, i1, j0, j1);
            const block got = m.classify(b, 0, i0, i1, j0, j1);
            INFO("b " << b << " rows [" << i0 << "," << i1 << ") keys [" << j0 << "," << j1 << ")");
            if (exact || got != block::partial) REQUIRE(got == truth);
          }
}

template <class E>
void check(const E& e, double tol = 2e-6) {
  for (const schedule s : {schedule{4, 8, 1}, schedule{6, 16, 2}, schedule{}}) {
    INFO("block_q " << s.block_q << ", block_k " << s.block_k);
    REQUIRE(max_abs_diff(eval(e, s), reference(e).output) < tol);
  }
}

}  // namespace

TEST_CASE("documents: packed sequences attend only inside their document") {
  testing::rng r(1);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 2, 30, 8}), k = r.tensor<float>({2, 2, 30, 8}),
                              v = r.tensor<float>({2, 2, 30, 6});
  auto Q = ref(q), K = ref(k), V = ref(v);
  xt::xtensor<std::int16_t, 2> ids = xt::zeros<std::int16_t>({2, 30});  // batch 0: 5 documents; batch 1: 2
  for (std::size_t i = 0; i < 30; ++i) ids(0, i) = std::int16_t(i < 3 ? 0 : i < 11 ? 1 : i < 12 ? 2 : i < 25 ? 3 : 4);
  for (std::size_t i = 0; i < 30; ++i) ids(1, i) = std::int16_t(i < 17 ? 7 : 9);
  check(softmax(mask(Q * trans(K), documents(ids))) * V);
  check(softmax(mask(mask(Q * trans(K), documents(ids)), causal())) * V);  // causal documents
  const xt::xtensor<int, 1> lens = {20, 30};
  check(softmax(mask(mask(Q * trans(K) / 2.0f, documents(ids)), lengths(lens))) * V);
  // the same documents from offsets (shared by both batches)
  const xt::xtensor<long, 1> cu = {0, 3, 11, 12, 25, 30};
  const auto a = eval(softmax(mask(Q * trans(K), documents_from_offsets(cu))) * V);
  const xt::xtensor<int, 1> shared = xt::view(ids, 0);
  REQUIRE(max_abs_diff(a, eval(softmax(mask(Q * trans(K), documents(shared))) * V)) == 0);
  const auto m = bound(documents(ids), sizes(2, 30, 30));
  REQUIRE(m.runs);
  check_classify(m, 2, 30, 30, true);
  // in runs, a row's span is exactly its document's keys (the kernel trims partial blocks by it)
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 30; ++i) {
      const auto [first, last] = m.row_span(b, 0, i);
      for (std::size_t j = 0; j < 30; ++j)
        REQUIRE(m.visible(b, 0, i, j) == (std::int64_t(j) >= first && std::int64_t(j) < last));
    }
}

TEST_CASE("documents: separate query and key ids, unsorted ids, a document without keys") {
  testing::rng r(2);
  const xt::xtensor<double, 4> q = r.tensor<double>({1, 3, 10, 4}), k = r.tensor<double>({1, 3, 17, 4}),
                               v = r.tensor<double>({1, 3, 17, 5});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<int, 1> qi = {0, 0, 1, 1, 1, 2, 2, 5, 5, 5};  // document 5 has no keys: zero rows
  const xt::xtensor<int, 1> ki = {0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3};
  check(softmax(mask(Q * trans(K), documents(qi, ki))) * V, 1e-12);
  const xt::xtensor<long, 1> cu_q = {0, 2, 5, 10}, cu_k = {0, 4, 6, 17};
  check(softmax(mask(Q * trans(K), documents_from_offsets(cu_q, cu_k))) * V, 1e-12);
  check_classify(bound(documents(qi, ki), sizes(1, 10, 17)), 1, 10, 17, true);
  const xt::xtensor<int, 1> mixed = {3, 1, 3, 0, 1, 1, 0, 3, 2, 2};  // not in runs: element by element
  const auto un = bound(documents(mixed), sizes(1, 10, 10));
  REQUIRE(!un.runs);
  check_classify(un, 1, 10, 10, false);
  const xt::xtensor<double, 4> q10 = r.tensor<double>({1, 3, 10, 4});
  auto Q10 = ref(q10);
  check(softmax(mask(Q10 * trans(Q10), documents(mixed))) * Q10, 1e-12);
}

TEST_CASE("documents: bad ids name the argument and the shapes") {
  const xt::xtensor<float, 3> q = xt::ones<float>({2, 5, 4});
  auto Q = ref(q);
  const xt::xtensor<int, 1> short_ids = {0, 0, 1};
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(Q), documents(short_ids))) * Q),
                      "xattn: documents(ids): ids has shape (3) but must be (5) or (2,5) for the queries of the scores "
                      "(2,5,5)");
  const xt::xtensor<int, 1> bad_cu = {1, 3, 5};
  REQUIRE_THROWS_WITH(documents_from_offsets(bad_cu), Catch::Contains("cu_seqlens must start at 0 and never decrease"));
  const xt::xtensor<int, 1> cu = {0, 2, 4};  // 4 positions for 5 tokens
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(Q), documents_from_offsets(cu))) * Q),
                      Catch::Contains("cu_seqlens has shape (4) but must be (5)"));
}
