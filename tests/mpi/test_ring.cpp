// Context parallelism against one process: every rank holds the whole problem (same seed), runs
// eval_with_lse / grad on all of it, and checks its own rows of the ring's results. Only the order
// in which key blocks are merged (forward) and summed (backward) differs, so the tolerances are a
// few roundings of the values' size (|values| <= 1, S <= 96): measured worst with 2 and 4 ranks
// 7.2e-7 in float (dV) and 2.0e-15 in double, checked at 4e-6 and 1e-13 (about 5x and 50x).
// Parameter gradients sum every pair, so they are compared relative to 1 + their size: worst
// 1.3e-6 (float) and 8.3e-16 (double). d2l's fully masked rows (lengths 0, log-sum-exp near
// -1e6) are merged at that magnitude, where double resolves 1.2e-10: they are checked in float.
#include "catalogue/laplace_kernel.hpp"
#include "catalogue/relative_bias.hpp"
#include "support/random.hpp"
#include "support/user_terms.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>
#include <xattn/mpi.hpp>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <functional>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace xattn;
using xattn::testing::max_abs_diff;

namespace {

/// x's rows (axis `axis`) at the given positions, in that order.
template <class T, std::size_t N>
xt::xtensor<T, N> rows_at(const xt::xtensor<T, N>& x, const std::vector<std::size_t>& rows, std::size_t axis) {
  auto shape = x.shape();
  shape[axis] = rows.size();
  xt::xtensor<T, N> r = xt::xtensor<T, N>::from_shape(shape);
  const std::size_t outer =
      std::accumulate(shape.begin(), shape.begin() + std::ptrdiff_t(axis), std::size_t(1), std::multiplies<>());
  const std::size_t inner = x.size() / outer / x.shape()[axis];
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::copy_n(x.data() + (o * x.shape()[axis] + rows[i]) * inner, inner, r.data() + (o * rows.size() + i) * inner);
  return r;
}

template <class T, std::size_t N>
xt::xtensor<T, N> random_tensor(std::array<std::size_t, N> shape, std::uint64_t seed) {
  xattn::testing::rng g(seed);
  xt::xtensor<T, N> x = xt::xtensor<T, N>::from_shape(shape);
  for (auto& v : x) v = T(g.uniform(-1, 1));
  return x;
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 4e-6 : 1e-13;
}

/// max |x - y| / (1 + max |y|) over two contiguous ranges of double.
template <class X>
double elementwise_diff(const X& x, const X& y) {
  REQUIRE(x.size() == y.size());
  double d = 0, m = 0;
  for (std::size_t n = 0; n < x.size(); ++n) {
    d = std::max(d, std::abs(x.data()[n] - y.data()[n]));
    m = std::max(m, std::abs(y.data()[n]));
  }
  return d / (1 + m);
}

/// |a - b| over the parts of two parameter gradients, relative to 1 + |b| (they sum every pair).
template <class G>
double parameter_diff(G a, G b) {
  if constexpr (std::is_same_v<G, no_parameters>) {
    return 0;
  } else {
    const auto pa = a.parts(), pb = b.parts();
    double worst = 0;
    auto one = [&](const auto& x, const auto& y) {
      if constexpr (std::is_arithmetic_v<std::decay_t<decltype(x)>>)
        worst = std::max(worst, std::abs(x - y) / (1 + std::abs(y)));
      else  // a tensor, or learned_gradients' vector
        worst = std::max(worst, elementwise_diff(x, y));
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) { (one(std::get<I>(pa), std::get<I>(pb)), ...); }
    (std::make_index_sequence<std::tuple_size_v<std::decay_t<decltype(pa)>>>{});
    return worst;
  }
}

/// One problem, (B, H, S, D) or (B, S, D) (rank N; the sequence on axis N - 2), run both ways.
/// make(Q, K, V) builds the expression from terminals.
template <class T, std::size_t N, class Make>
void check_ring(const mpi::context& cp, std::array<std::size_t, N> q_shape, std::array<std::size_t, N> kv_shape,
                Make make, int line = __builtin_LINE()) {
  const std::size_t axis = N - 2;
  const auto q = random_tensor<T>(q_shape, 1), k = random_tensor<T>(kv_shape, 2), v = random_tensor<T>(kv_shape, 3);
  const auto full = eval_with_lse(make(ref(q), ref(k), ref(v)));
  auto out_shape = q_shape;
  out_shape[N - 1] = kv_shape[N - 1];
  const auto d_out = random_tensor<T, N>(out_shape, 4);
  const auto rows = cp.local_rows();
  const auto ql = rows_at(q, rows, axis), kl = rows_at(k, rows, axis), vl = rows_at(v, rows, axis);
  const auto e = make(ref(ql), ref(kl), ref(vl));
  const auto f = cp.eval_with_lse(e);
  INFO("rank " << cp.rank() << " of " << cp.ranks() << ", sequence " << cp.seq_len() << ", line " << line);
  CHECK(max_abs_diff(f.output, rows_at(xt::xtensor<T, N>(full.output), rows, axis)) < tolerance<T>());
  // rows that see no key have lse -inf both ways
  auto lse_full = rows_at(xt::xtensor<T, N - 1>(full.lse), rows, axis), lse = xt::xtensor<T, N - 1>(f.lse);
  for (std::size_t i = 0; i < lse.size(); ++i)
    if (std::isinf(lse.data()[i]) && lse.data()[i] == lse_full.data()[i]) lse.data()[i] = lse_full.data()[i] = 0;
  CHECK(max_abs_diff(lse, lse_full) < 4 * tolerance<T>());
  const auto g_full = grad(make(ref(q), ref(k), ref(v)), full, d_out);
  const auto g = cp.grad(e, f, rows_at(d_out, rows, axis));
  CHECK(max_abs_diff(g.dq, rows_at(xt::xtensor<T, N>(g_full.dq), rows, axis)) < tolerance<T>());
  CHECK(max_abs_diff(g.dk, rows_at(xt::xtensor<T, N>(g_full.dk), rows, axis)) < tolerance<T>());
  CHECK(max_abs_diff(g.dv, rows_at(xt::xtensor<T, N>(g_full.dv), rows, axis)) < tolerance<T>());
  // bias and parameter gradients are whole on every rank
  REQUIRE(g.dbias.size() == g_full.dbias.size());
  for (std::size_t t = 0; t < g.dbias.size(); ++t) CHECK(max_abs_diff(g.dbias[t], g_full.dbias[t]) < tolerance<T>());
  CHECK(parameter_diff(g.dscore, g_full.dscore) < tolerance<T>());
  REQUIRE(g.dmodify.size() == g_full.dmodify.size());
  for (std::size_t t = 0; t < g.dmodify.size(); ++t)
    CHECK(elementwise_diff(g.dmodify[t].d, g_full.dmodify[t].d) < tolerance<T>());
  REQUIRE(g.dsinks.size() == g_full.dsinks.size());
  if (g.dsinks.size())  // a sum over every row of a head, as the parameter gradients
    CHECK(elementwise_diff(xt::xtensor<double, 1>(xt::cast<double>(g.dsinks)),
                           xt::xtensor<double, 1>(xt::cast<double>(g_full.dsinks))) < tolerance<T>());
}

const auto causal_dot = [](auto q, auto k, auto v) { return softmax(mask(q * trans(k) / 4.0f, causal())) * v; };

}  // namespace

TEMPLATE_TEST_CASE("the ring equals one process: causal, both balances", "[mpi]", float, double) {
  for (auto how : {mpi::balance::zigzag, mpi::balance::contiguous}) {
    mpi::context cp(MPI_COMM_WORLD, 96, how);
    check_ring<TestType, 4>(cp, {2, 3, 96, 16}, {2, 3, 96, 16}, causal_dot);
  }
  mpi::context odd(MPI_COMM_WORLD, 45, mpi::balance::zigzag);  // parts of unequal size
  check_ring<TestType, 4>(odd, {1, 2, 45, 8}, {1, 2, 45, 8}, causal_dot);
}

TEST_CASE("the ring equals one process: masks and modifiers see global positions", "[mpi]") {
  mpi::context cp(MPI_COMM_WORLD, 64, mpi::balance::zigzag);
  check_ring<float, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8},
                       [](auto q, auto k, auto v) { return softmax(mask(q * trans(k), window(9, 0))) * v; });
  check_ring<float, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8}, [](auto q, auto k, auto v) {
    return softmax(mask(q * trans(k), window(5, 3))) * v;  // keys after the query too
  });
  // lengths 1-D (one batch fully masked: uniform rows, d2l's -1e6) and 2-D per global query
  const xt::xtensor<int, 1> lens{0, 37};
  check_ring<float, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8},
                       [&](auto q, auto k, auto v) { return softmax(mask(q * trans(k), lengths(lens))) * v; });
  xt::xtensor<int, 2> lens2 = xt::xtensor<int, 2>::from_shape({2, 64});
  for (std::size_t i = 0; i < lens2.size(); ++i) lens2.data()[i] = int((i * 7) % 65);
  check_ring<float, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8}, [&](auto q, auto k, auto v) {
    return softmax(mask(q * trans(k), lengths(lens2, masked_rows::zero))) * v;
  });
  const xt::xtensor<int, 1> docs =
      xt::concatenate(xt::xtuple(xt::zeros<int>({20}), xt::ones<int>({30}), 2 * xt::ones<int>({14})));
  check_ring<float, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8}, [&](auto q, auto k, auto v) {
    return softmax(mask(mask(q * trans(k), causal()), documents(docs))) * v;
  });
  check_ring<float, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8}, [](auto q, auto k, auto v) {
    return softmax(mask(alibi(q * trans(k), {0.5, 0.25}), causal())) * v;
  });
  check_ring<double, 4>(cp, {1, 2, 64, 8}, {1, 2, 64, 8}, [](auto q, auto k, auto v) {
    return dropout(softmax(mask(softcap(q * trans(k), 2.0), causal())), 0.25f, 1234) * v;
  });
  const auto b = random_tensor<float, 4>({1, 2, 64, 64}, 9);
  check_ring<float, 4>(cp, {1, 2, 64, 8}, {1, 2, 64, 8},
                       [&](auto q, auto k, auto v) { return softmax(q * trans(k) + bias(b)) * v; });
  // broadcast over batch, heads and queries: every rank's rows add into the same entries
  const auto keys_bias = random_tensor<double, 1>({64}, 10);
  const auto pair_bias = random_tensor<double, 2>({64, 64}, 11);
  check_ring<double, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8}, [&](auto q, auto k, auto v) {
    return softmax(mask(q * trans(k) + bias(keys_bias) + bias(pair_bias), causal())) * v;
  });
  // learned sinks join each row once, on the rank that holds it (a row of batch 0 sees no key);
  // sink tokens are global key positions
  const xt::xtensor<float, 1> sink = {1.5f, -0.5f};
  const xt::xtensor<int, 1> some = {0, 50};
  check_ring<float, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8}, [&](auto q, auto k, auto v) {
    return softmax(mask(mask(q * trans(k), window(5, 0, sink_tokens(3))), lengths(some, masked_rows::zero)),
                   sinks(sink)) *
           v;
  });
  // a softmax term of the user's own (a learnable logit per batch row and head) joins the same way
  const xt::xtensor<double, 2> per_bh = {{0.5, -1.0}, {2.0, 0.25}};
  check_ring<double, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8}, [&](auto q, auto k, auto v) {
    return softmax(mask(q * trans(k), causal()), testing::batch_head_logits{&per_bh}) * v;
  });
  // a user modifier with a learnable table: every rank's pairs add into the same entries
  dsl::relative_bias rb{{}, 6};
  for (int n = 0; n < 2 * 13; ++n) rb.table.push_back(0.2 * std::cos(n));
  check_ring<double, 4>(cp, {1, 2, 64, 8}, {1, 2, 64, 8},
                        [&](auto q, auto k, auto v) { return softmax(mask(modify(q * trans(k), rb), causal())) * v; });
}

TEST_CASE("the ring equals one process: GQA and layouts", "[mpi]") {
  mpi::context cp(MPI_COMM_WORLD, 64, mpi::balance::zigzag);
  check_ring<float, 4>(cp, {2, 4, 64, 8}, {2, 2, 64, 8}, causal_dot);  // 2 query heads per kv head
  check_ring<double, 3>(cp, {2, 64, 8}, {2, 64, 8}, causal_dot);       // (B, S, D)
  const auto q = random_tensor<float, 3>({1, 64, 12}, 5), k = random_tensor<float, 3>({1, 64, 12}, 6);
  const auto rows = cp.local_rows();
  const auto ql = rows_at(q, rows, 1), kl = rows_at(k, rows, 1);
  const auto full = eval_with_lse(softmax(mask(heads(q, 3) * trans(heads(k, 3)), causal())) * heads(k, 3));
  const auto f = cp.eval_with_lse(softmax(mask(heads(ql, 3) * trans(heads(kl, 3)), causal())) * heads(kl, 3));
  CHECK(max_abs_diff(f.output, rows_at(xt::xtensor<float, 3>(full.output), rows, 1)) < tolerance<float>());
}

TEST_CASE("the ring equals one process: scoring policies and their parameters", "[mpi]") {
  mpi::context cp(MPI_COMM_WORLD, 64, mpi::balance::zigzag);
  // additive attention (queries and keys of different sizes), its three weights' gradients
  const additive add{random_tensor<float, 2>({6, 8}, 7), random_tensor<float, 2>({6, 5}, 8),
                     random_tensor<float, 1>({6}, 9)};
  check_ring<float, 4>(cp, {1, 2, 64, 8}, {1, 2, 64, 5},
                       [&](auto q, auto k, auto v) { return softmax(mask(score(add, q, k), causal())) * v; });
  const xt::xtensor<int, 1> lens{0, 41};  // d2l's lengths, a fully masked batch among them
  check_ring<float, 3>(cp, {2, 64, 8}, {2, 64, 5},
                       [&](auto q, auto k, auto v) { return softmax(mask(score(add, q, k), lengths(lens))) * v; });
  // separable policies with terms and parameters, and a user policy with a learnable bandwidth
  check_ring<double, 4>(cp, {1, 2, 64, 8}, {1, 2, 64, 8},
                        [](auto q, auto k, auto v) { return softmax(mask(score(gaussian{1.5}, q, k), causal())) * v; });
  check_ring<float, 4>(cp, {2, 2, 64, 8}, {2, 2, 64, 8},
                       [](auto q, auto k, auto v) { return softmax(score(cosine{0.5}, q, k)) * v; });
  const auto w = random_tensor<double, 2>({8, 8}, 12);
  const auto b = random_tensor<double, 2>({64, 64}, 13);
  check_ring<double, 4>(cp, {1, 4, 64, 8}, {1, 2, 64, 8}, [&](auto q, auto k, auto v) {  // GQA, and a bias
    return softmax(mask(score(bilinear{w}, q, k) + bias(b), window(20, 0))) * v;
  });
  check_ring<double, 4>(cp, {1, 2, 64, 6}, {1, 2, 64, 6}, [](auto q, auto k, auto v) {
    return softmax(mask(score(dsl::laplace_kernel{2.0}, q, k), causal())) * v;
  });
}

namespace {

/// A cache (pages of 4 tokens) holding, for each sequence b, the rows of k[b], v[b] (Hkv, S, D) at
/// the given positions, in that order; the last sequence `short_by` rows short.
template <class T>
kv_cache<T> cache_of(const xt::xtensor<float, 4>& k, const xt::xtensor<float, 4>& v, std::vector<std::size_t> rows,
                     std::vector<sequence_id>& batch, kv_cache_options o = {}, std::size_t short_by = 0) {
  o.kv_heads = k.shape()[1], o.head_dim = k.shape()[3], o.page_size = 4, o.max_tokens = 4 * k.shape()[2];
  kv_cache<T> c(o);
  batch.clear();
  for (std::size_t b = 0; b < k.shape()[0]; ++b) {
    if (b + 1 == k.shape()[0]) rows.resize(rows.size() - short_by);
    batch.push_back(c.add_sequence());
    const xt::xtensor<float, 3> kb = xt::view(k, b), vb = xt::view(v, b);
    c.append(batch.back(), rows_at(kb, rows, 1), rows_at(vb, rows, 1));
  }
  return c;
}

}  // namespace

TEMPLATE_TEST_CASE("the ring equals one process: keys and values from a kv_cache", "[mpi][cache]", float, bfloat16,
                   std::int8_t, float8_e4m3) {
  mpi::context cp(MPI_COMM_WORLD, 64, mpi::balance::zigzag);
  const std::size_t S = cp.seq_len();
  const auto q = random_tensor<float, 4>({2, 4, S, 32}, 1);
  const auto k = random_tensor<float, 4>({2, 2, S, 32}, 2), v = random_tensor<float, 4>({2, 2, S, 32}, 3);
  std::vector<std::size_t> all(S);
  std::iota(all.begin(), all.end(), std::size_t(0));
  std::vector<sequence_id> whole_batch, local_batch;
  // one process: the whole sequences in one cache (int8 rounds each token's rows alike either way)
  const auto whole = cache_of<TestType>(k, v, all, whole_batch);
  const auto attend = [](const auto& q_rows, const kv_cache<TestType>& c, const std::vector<sequence_id>& batch) {
    return softmax(mask(ref(q_rows) * trans(c.keys(batch)) / 4.0f, causal())) * c.values(batch);
  };
  const auto full = eval_with_lse(attend(q, whole, whole_batch));
  const auto rows = cp.local_rows();
  const auto mine = cache_of<TestType>(k, v, rows, local_batch);
  const xt::xtensor<float, 4> ql = rows_at(q, rows, 2);
  const auto f = cp.eval_with_lse(attend(ql, mine, local_batch));
  INFO("rank " << cp.rank() << " of " << cp.ranks());
  // bf16 pages travel as bf16 tensors, whose values are multiplied by vdpbf16ps on probabilities
  // rounded to bf16 (|V| <= 1: up to 2^-9 apart); one process reads the pages widened
  const double p_rounding = std::is_same_v<TestType, bfloat16> && takes_value_pairs_v<float, bfloat16> ? 0x1p-9 : 0;
  CHECK(max_abs_diff(f.output, rows_at(xt::xtensor<float, 4>(full.output), rows, 2)) < tolerance<float>() + p_rounding);
  CHECK(max_abs_diff(f.lse, rows_at(xt::xtensor<float, 3>(full.lse), rows, 2)) < 4 * tolerance<float>());
}

TEST_CASE("ranks that disagree all get the same error", "[mpi][errors]") {
  const int rank = [] {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }();
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(mpi::context(MPI_COMM_WORLD, rank == 1 ? 65 : 64),
                    Contains("ranks disagree on the sequence length: rank 0 has 64, rank 1 has 65"));
  mpi::context uneven(MPI_COMM_WORLD, 45);
  CHECK_THROWS_WITH(uneven.set_comm_mode(mpi::comm_mode::none), Contains("the parts differ in size"));
  mpi::context cp(MPI_COMM_WORLD, 64);
  const std::size_t n = cp.local_rows().size();
  const auto q = random_tensor<float, 4>({1, 2, n, 8}, 1), wide = random_tensor<float, 4>({1, 2, n, 16}, 2);
  const auto q_short = random_tensor<float, 4>({1, 2, n - 1, 8}, 3);
  // shapes: one rank's head size differs
  CHECK_THROWS_WITH(cp.eval_with_lse(softmax(ref(rank == 1 ? wide : q) * trans(ref(rank == 1 ? wide : q))) * ref(q)),
                    Contains("ranks disagree on the query size: rank 0 has 8, rank 1 has 16"));
  // one rank's rows are not what local_rows() gives it
  CHECK_THROWS_WITH(cp.eval_with_lse(softmax(ref(rank == 1 ? q_short : q) * trans(ref(q))) * ref(q)),
                    Contains("rank 1 of") && Contains("sequence rows but local_rows() gives"));
  // the expression: rank 1 masks, the others do not
  if (rank == 1)
    CHECK_THROWS_WITH(cp.eval_with_lse(softmax(mask(ref(q) * trans(ref(q)), causal())) * ref(q)),
                      Contains("ranks disagree on the expression's type"));
  else
    CHECK_THROWS_WITH(cp.eval_with_lse(softmax(ref(q) * trans(ref(q))) * ref(q)),
                      Contains("ranks disagree on the expression's type"));
  // caches: rank 1's second sequence is one token short; keys turned by rope at the cache's positions
  {
    const auto k = random_tensor<float, 4>({2, 2, 64, 8}, 4);
    const auto ql = random_tensor<float, 4>({2, 2, n, 8}, 5);
    std::vector<sequence_id> batch;
    const auto c = cache_of<float>(k, k, cp.local_rows(), batch, {}, rank == 1 ? 1 : 0);
    CHECK_THROWS_WITH(
        cp.eval_with_lse(softmax(ref(ql) * trans(c.keys(batch))) * c.values(batch)),
        Contains("rank 1 of") && Contains("the keys: sequence 1 of the batch holds " + std::to_string(n - 1) +
                                          " tokens and the longest " + std::to_string(n)));
    std::vector<sequence_id> turned_batch;
    const auto turned = cache_of<float>(k, k, cp.local_rows(), turned_batch, {.rope = rope_options{}});
    CHECK_THROWS_WITH(
        cp.eval_with_lse(softmax(ref(ql) * trans(turned.keys(turned_batch))) * turned.values(turned_batch)),
        Contains("rank 0 of") && Contains("the cache turns its keys by rope"));
  }
  // grad: one rank's d_out has the wrong shape
  const auto e = softmax(mask(ref(q) * trans(ref(q)), causal())) * ref(q);
  const auto f = cp.eval_with_lse(e);
  CHECK_THROWS_WITH(cp.grad(e, f, rank == 1 ? q_short : q),
                    Contains("grad(e, f, d_out): rank 1 of") && Contains("d_out has shape"));
}

TEST_CASE("the layouts and the route of a causal ring", "[mpi][balance]") {
  // zigzag: rank r holds chunks r and 2P - 1 - r of 2P; unequal parts differ by at most one row
  const auto z = mpi::segments_of(8, 2, 0, mpi::balance::zigzag);
  REQUIRE(z.size() == 2);
  CHECK((z[0].first == 0 && z[0].size == 2 && z[0].local == 0 && z[1].first == 6 && z[1].size == 2 && z[1].local == 2));
  const auto z1 = mpi::segments_of(8, 2, 1, mpi::balance::zigzag);
  CHECK((z1[0].first == 2 && z1[1].first == 4 && z1[1].local == 2));
  CHECK(mpi::rows_of(45, 2, 0, mpi::balance::zigzag) + mpi::rows_of(45, 2, 1, mpi::balance::zigzag) == 45);
  const auto c = mpi::segments_of(10, 3, 2, mpi::balance::contiguous);
  CHECK((c.size() == 1 && c[0].first == 6 && c[0].size == 4));
  CHECK_THROWS_WITH(mpi::segments_of(8, 2, 2, mpi::balance::zigzag),
                    Catch::Matchers::Contains("rank 2 of 2 ranks does not exist"));
  // causal, contiguous over 4 ranks: rank r needs origins <= r, so a block stops at the last rank
  // and never wraps around to the ranks before its home
  std::vector<std::vector<mpi::segment>> segs;
  for (std::size_t r = 0; r < 4; ++r) segs.push_back(mpi::segments_of(64, 4, r, mpi::balance::contiguous));
  const auto route = mpi::detail::route_of(
      segs, [](const mpi::segment& q, const mpi::segment& k) { return k.first < q.first + q.size; });
  for (std::size_t o = 0; o < 4; ++o) {
    CHECK(route.last_step(o) == 3 - o);
    for (std::size_t r = 0; r < 4; ++r) CHECK(route.needs(r, o) == (o <= r));
  }
  CHECK(!route.forwards(3, 0));  // the last rank's keys go nowhere
  CHECK(route.forwards(0, 2));
}
