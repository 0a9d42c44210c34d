// xattn_forward and xattn_backward against the C++ library they wrap: random problems (every
// dtype, grouped heads, causal either way, windows, lengths of rank 1 and 2 with empty rows,
// softcap, sinks, scales, transposed and padded strides) give bit for bit what the C++ expression
// the interface documents gives (causal(), or one window() when a window bound is set;
// lengths(lens, masked_rows::zero); softcap(); sinks()), forward and float/double backward, and
// agree with the double reference. The rarer options (documents, masks, bias, ALiBi, dropout,
// rope) agree with the double reference of the C++ expression a user writes for them. Bad input
// returns a status and a message naming the argument.
#include <xattn.h>
#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include "support/bitwise.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xview.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

using namespace xattn;
using xattn::testing::max_abs_diff;
using xattn::testing::rng;

namespace {

template <class T>
constexpr xattn_dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>) return XATTN_F32;
  if constexpr (std::is_same_v<T, double>) return XATTN_F64;
  if constexpr (std::is_same_v<T, bfloat16>) return XATTN_BF16;
  if constexpr (std::is_same_v<T, float16>) return XATTN_F16;
}

/// A (B, H, S, D) tensor stored as (B, S, H, D) (transposed) or with padded rows.
template <class T>
struct stored {
  std::vector<T> data;
  std::array<std::size_t, 4> shape;
  std::array<std::ptrdiff_t, 4> strides;
  xattn_tensor c() {
    xattn_tensor t{data.data(), dtype_of<T>(), 4, {}, {}};
    for (int i = 0; i < 4; ++i)
      t.shape[i] = std::int64_t(shape[std::size_t(i)]), t.strides[i] = strides[std::size_t(i)];
    return t;
  }
  auto term() const { return ref(data.data(), shape, strides); }
  /// The same values in double, stored alike: the double reference of an expression over them is
  /// the reference of every dtype's, so one instantiation serves them all.
  stored<double> widened() const {
    stored<double> w{std::vector<double>(data.size()), shape, strides};
    std::transform(data.begin(), data.end(), w.data.begin(), [](T x) { return double(float(x)); });
    return w;
  }
};

template <class T>
stored<T> make(rng& g, std::array<std::size_t, 4> s, bool transposed, std::size_t pad) {
  stored<T> t{{}, s, {}};
  const std::size_t row = s[3] + pad;
  if (transposed)
    t.strides = {std::ptrdiff_t(s[2] * s[1] * row), std::ptrdiff_t(row), std::ptrdiff_t(s[1] * row), 1};
  else
    t.strides = {std::ptrdiff_t(s[1] * s[2] * row), std::ptrdiff_t(s[2] * row), std::ptrdiff_t(row), 1};
  t.data.resize(s[0] * s[1] * s[2] * row);
  for (auto& x : t.data) x = T(float(g.uniform(-1, 1)));
  return t;
}

/// xattn_backward on the problem the forward just ran: gradients in the accumulator's dtype (or,
/// for 16-bit inputs, sometimes in theirs), some not wanted. For float and double inputs they are
/// bit for bit the C++ grad's with the same threads; every kind agrees with the double reference.
template <class T, class O, class E, class F>
void check_backward(rng& g, const E& e, const F& fused, const xattn_tensor& qc, const xattn_tensor& kc,
                    const xattn_tensor& vc, const xattn_attention_desc& d, const xattn_tensor& out_c,
                    const xattn_tensor& lse_c, bool with_sinks, const xt::xtensor<O, 4>& d_out,
                    const reference_gradients& ref) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr bool sixteen = !std::is_same_v<T, Acc>;
  xattn_tensor d_out_c = out_c;
  d_out_c.data = const_cast<O*>(d_out.data());
  const bool narrow = sixteen && g.coin();  // gradients in the inputs' 16-bit dtype
  using G = std::conditional_t<sixteen, T, Acc>;
  const auto buffer = [](const xattn_tensor& like) {
    return std::vector<Acc>(std::size_t(like.shape[0] * like.shape[1] * like.shape[2] * like.shape[3]), Acc(-7));
  };
  std::vector<Acc> dq = buffer(qc), dk = buffer(kc), dv = buffer(vc);
  std::vector<G> dq16(dq.size(), G(-7.0f)), dk16(dk.size(), G(-7.0f)), dv16(dv.size(), G(-7.0f));
  const auto target = [&](const xattn_tensor& like, std::vector<Acc>& wide, std::vector<G>& n) {
    xattn_tensor t = like;
    t.data = narrow ? static_cast<void*>(n.data()) : static_cast<void*>(wide.data());
    t.dtype = narrow ? dtype_of<T>() : dtype_of<Acc>();
    t.strides[3] = 1, t.strides[2] = like.shape[3], t.strides[1] = like.shape[2] * like.shape[3],
    t.strides[0] = like.shape[1] * t.strides[1];
    return t;
  };
  xattn_tensor dq_c = target(qc, dq, dq16), dk_c = target(kc, dk, dk16), dv_c = target(vc, dv, dv16);
  const bool want_dq = !g.coin(0.2);
  std::vector<Acc> dsinks(std::size_t(qc.shape[1]), Acc(-7));
  xattn_tensor dsinks_c{dsinks.data(), dtype_of<Acc>(), 1, {qc.shape[1]}, {1}};
  const xattn_status s = xattn_backward(&qc, &kc, &vc, &d, &out_c, &lse_c, &d_out_c, want_dq ? &dq_c : nullptr, &dk_c,
                                        &dv_c, with_sinks ? &dsinks_c : nullptr, nullptr);
  INFO(xattn_last_error());
  REQUIRE(s == XATTN_OK);
  const auto as_acc = [&](const std::vector<Acc>& wide, const std::vector<G>& n) {
    std::vector<Acc> r(wide.size());
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = narrow ? Acc(float(n[i])) : wide[i];
    return r;
  };
  const auto shaped = [](const std::vector<Acc>& x, const xattn_tensor& like) {
    const std::array<std::size_t, 4> sh{std::size_t(like.shape[0]), std::size_t(like.shape[1]),
                                        std::size_t(like.shape[2]), std::size_t(like.shape[3])};
    return xt::xtensor<Acc, 4>(xt::adapt(x, sh));
  };
  const auto got_dq = shaped(as_acc(dq, dq16), qc), got_dk = shaped(as_acc(dk, dk16), kc),
             got_dv = shaped(as_acc(dv, dv16), vc);
  if (!want_dq) CHECK(std::all_of(dq.begin(), dq.end(), [](Acc x) { return x == Acc(-7); }));
  if constexpr (!sixteen) {
    schedule sch;
    sch.threads = d.threads;
    const auto want = grad(e, fused, d_out, sch);
    // the same kernels, but not bit for bit: GCC contracts multiply-adds where it inlines, and
    // it inlines differently in a shared library (-fPIC) than in a program
    const double close = std::is_same_v<T, double> ? 1e-13 : 1e-6;
    if (want_dq) CHECK(max_abs_diff(got_dq, want.dq) < close);
    CHECK(max_abs_diff(got_dk, want.dk) < close);
    CHECK(max_abs_diff(got_dv, want.dv) < close);
    if (with_sinks)
      for (std::size_t h = 0; h < dsinks.size(); ++h) CHECK(std::abs(dsinks[h] - want.dsinks(h)) < close);
  }
  // 16-bit: the forward's output (and d_out) rounded to 16 bits enter Δ = rowsum(dO ∘ O)
  const double tol = std::is_same_v<T, double> ? 1e-10 : sixteen ? 5e-2 : 2e-4;
  if (want_dq) CHECK(max_abs_diff(got_dq, ref.dq) < tol);
  CHECK(max_abs_diff(got_dk, ref.dk) < tol);
  CHECK(max_abs_diff(got_dv, ref.dv) < tol);
  if (with_sinks)
    for (std::size_t h = 0; h < dsinks.size(); ++h) CHECK(std::abs(dsinks[h] - ref.dsinks[h]) < tol * 10);
}

/// The options one_case draws, as the C++ expression the interface documents for them takes them.
struct documented_options {
  double scale, softcap;
  int causal_kind;  // 0 none, 1 top left, 2 bottom right
  bool windowed;
  std::int64_t left, right;                   // the window's bounds
  const xt::xtensor<std::int64_t, 1>* lens1;  // lengths of rank 1 or 2, or neither
  const xt::xtensor<std::int64_t, 2>* lens2;
  const xt::xtensor<float, 1>* sinks;
};

/// f(e) for that expression over the terms q, k, v: causal(), or one window() when a window bound
/// is set (the causal bound folded into its right side); lengths(lens, masked_rows::zero);
/// softcap(); sinks(). True; with Every false, the expressions with softcap or sinks are not
/// instantiated: for those options f is not called and the result is false.
template <bool Every = true, class Q, class K, class V, class F>
bool with_documented(const documented_options& o, const Q& q, const K& k, const V& v, F&& f) {
  if constexpr (!Every)
    if (o.softcap > 0 || o.sinks) return false;
  const align where = o.causal_kind == 2 ? align::bottom_right : align::top_left;
  const auto finish = [&](const auto& l) {
    if constexpr (Every)
      if (o.sinks) return f(softmax(l, sinks(*o.sinks)) * v);
    f(softmax(l) * v);
  };
  const auto band_masked = [&](const auto& w) {
    if (o.lens1)
      finish(mask(w, lengths(*o.lens1, masked_rows::zero)));
    else if (o.lens2)
      finish(mask(w, lengths(*o.lens2, masked_rows::zero)));
    else
      finish(w);
  };
  const auto run = [&](const auto& s) {
    if (o.windowed)
      band_masked(mask(s, window(o.left, o.causal_kind != 0 ? std::min<std::int64_t>(o.right, 0) : o.right, where)));
    else if (o.causal_kind != 0)
      band_masked(mask(s, causal(where)));
    else
      band_masked(s);
  };
  const auto scores = q * trans(k) * o.scale;
  if constexpr (Every)
    if (o.softcap > 0) {
      run(softcap(scores, o.softcap));
      return true;
    }
  run(scores);
  return true;
}

template <class T, class O>
void one_case(std::uint64_t seed) {
  rng g(seed);
  const std::size_t B = g.size(1, 2), Hkv = g.size(1, 2), Hq = Hkv * g.size(1, 3), Sq = g.size(1, 40),
                    Skv = g.size(1, 70), D = g.size(1, 3) * 16 + (g.coin(0.3) ? 3 : 0), Dv = g.size(1, 40);
  auto q = make<T>(g, {B, Hq, Sq, D}, g.coin(), g.coin(0.3) ? 5 : 0);
  auto k = make<T>(g, {B, Hkv, Skv, D}, g.coin(), 0);
  auto v = make<T>(g, {B, Hkv, Skv, Dv}, g.coin(), g.coin(0.3) ? 2 : 0);
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

  xattn_attention_desc d = xattn_attention_defaults();
  const int causal_kind = int(g.size(0, 2));
  d.causal = xattn_causal(causal_kind);
  const bool windowed = g.coin(0.4);
  if (windowed) {
    d.window_left = std::int64_t(g.size(0, 20));
    d.window_right = g.coin() ? -1 : std::int64_t(g.size(0, 20));
  }
  if (g.coin(0.3)) d.scale = g.uniform(0.05, 0.5);
  if (g.coin(0.4)) d.softcap = g.uniform(0.5, 5);
  xt::xtensor<float, 1> sink_values = g.vector<float>(Hq, -2, 2);
  xattn_tensor sinks_c{sink_values.data(), XATTN_F32, 1, {std::int64_t(Hq)}, {1}};
  const bool with_sinks = g.coin(0.4);
  if (with_sinks) d.sinks = &sinks_c;
  const int lengths_rank = int(g.size(0, 2));
  xt::xtensor<std::int64_t, 2> lens2 = xt::zeros<std::int64_t>({B, Sq});
  xt::xtensor<std::int64_t, 1> lens1 = xt::zeros<std::int64_t>({B});
  for (auto& x : lens2) x = std::int64_t(g.size(0, Skv));
  for (auto& x : lens1) x = std::int64_t(g.size(0, Skv));
  xattn_tensor lens_c =
      lengths_rank == 1
          ? xattn_tensor{lens1.data(), XATTN_I64, 1, {std::int64_t(B)}, {1}}
          : xattn_tensor{lens2.data(), XATTN_I64, 2, {std::int64_t(B), std::int64_t(Sq)}, {std::int64_t(Sq), 1}};
  if (lengths_rank > 0) d.lengths = &lens_c;
  d.threads = int(g.size(1, 2));

  std::vector<O> out(B * Hq * Sq * Dv, O(-7.0f));
  std::vector<Acc> lse(B * Hq * Sq);
  xattn_tensor out_c{out.data(),
                     dtype_of<O>(),
                     4,
                     {std::int64_t(B), std::int64_t(Hq), std::int64_t(Sq), std::int64_t(Dv)},
                     {std::int64_t(Hq * Sq * Dv), std::int64_t(Sq * Dv), std::int64_t(Dv), 1}};
  xattn_tensor lse_c{lse.data(),
                     std::is_same_v<Acc, double> ? XATTN_F64 : XATTN_F32,
                     3,
                     {std::int64_t(B), std::int64_t(Hq), std::int64_t(Sq)},
                     {std::int64_t(Hq * Sq), std::int64_t(Sq), 1}};
  auto qc = q.c(), kc = k.c(), vc = v.c();
  INFO("seed " << seed << " B " << B << " Hq " << Hq << " Hkv " << Hkv << " Sq " << Sq << " Skv " << Skv << " D " << D
               << " Dv " << Dv << " causal " << causal_kind << " window " << d.window_left << "," << d.window_right
               << " lengths rank " << lengths_rank << " softcap " << d.softcap << " sinks " << with_sinks);
  REQUIRE(xattn_forward(&qc, &kc, &vc, &d, &out_c, &lse_c) == XATTN_OK);

  const std::array<std::size_t, 4> out_shape{B, Hq, Sq, Dv};
  const xt::xtensor<O, 4> d_out = xt::cast<O>(g.tensor<float>({out_shape.begin(), out_shape.end()}));
  const documented_options o{d.scale != 0 ? d.scale : 1 / std::sqrt(double(D)),
                             d.softcap,
                             causal_kind,
                             windowed,
                             d.window_left < 0 ? unbounded : d.window_left,
                             d.window_right < 0 ? unbounded : d.window_right,
                             lengths_rank == 1 ? &lens1 : nullptr,
                             lengths_rank == 2 ? &lens2 : nullptr,
                             with_sinks ? &sink_values : nullptr};
  reference_result want;
  reference_gradients want_grad;
  const auto qd = q.widened(), kd = k.widened(), vd = v.widened();
  with_documented(o, qd.term(), kd.term(), vd.term(), [&](const auto& e) {
    want = reference(e);
    want_grad = reference_grad(make_plan(e), xt::xtensor<double, 4>(xt::cast<double>(d_out)));
  });
  const xt::xtensor<O, 4> got = xt::adapt(out, out_shape);
  const xt::xtensor<Acc, 3> got_lse = xt::adapt(lse, std::array<std::size_t, 3>{B, Hq, Sq});
  const double tol = std::is_same_v<T, double>                              ? 1e-12
                     : std::is_same_v<T, float> && std::is_same_v<O, float> ? 2e-5
                                                                            : 2e-2;
  CHECK(max_abs_diff(got, want.output) < tol);
  xt::xtensor<double, 3> lse_ref = want.lse, lse_got = xt::cast<double>(got_lse);
  for (std::size_t n = 0; n < lse_ref.size(); ++n)  // rows seeing nothing: -inf both
    if (std::isinf(lse_ref.flat(n)) && lse_got.flat(n) == lse_ref.flat(n)) lse_ref.flat(n) = lse_got.flat(n) = 0;
  CHECK(max_abs_diff(lse_got, lse_ref) < (std::is_same_v<T, double> ? 1e-12 : 2e-4));
  // bit for bit the C++ fused pass: every option set for float and double; for 16-bit operands
  // those without softcap and sinks, the others against the reference above only (float's cases
  // cover those kernels, and instantiating them for each 16-bit dtype pair cost a third of this
  // test's compile time)
  constexpr bool sixteen = !std::is_same_v<T, Acc>;
  const bool compared = with_documented<!sixteen>(o, q.term(), k.term(), v.term(), [&](const auto& e) {
    schedule sch;  // the same threads: a split of the keys between threads rounds differently
    sch.threads = d.threads;
    const auto fused = eval_with_lse<O>(e, sch);
    CHECK(xattn::testing::bitwise_equal(got, fused.output));
    CHECK(xattn::testing::bitwise_equal(got_lse, fused.lse));
    check_backward<T, O>(g, e, fused, qc, kc, vc, d, out_c, lse_c, with_sinks, d_out, want_grad);
  });
  if constexpr (sixteen)  // check_backward compares with the C++ gradients only for float and double
    if (!compared) check_backward<T, O>(g, 0, 0, qc, kc, vc, d, out_c, lse_c, with_sinks, d_out, want_grad);
}

/// The rarer options (documents, a boolean mask, a bias tensor with its gradient, ALiBi, softcap,
/// sinks, dropout, rotary embeddings, causal, lengths, each present or not) through the
/// runtime-composed expression, against the double reference of the C++ expression a user writes
/// for them: softmax(mask(mask(mask(mask(alibi(softcap(rope(Q) * trans(rope(K)) * scale), slopes)
/// + bias(t), causal), documents(ids)), bool_mask(m)), lengths), sinks) [dropout] * V.
template <class T, class O>
void runtime_case(std::uint64_t seed) {
  rng g(seed);
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const std::size_t B = g.size(1, 2), Hkv = g.size(1, 2), Hq = Hkv * g.size(1, 2), Sq = g.size(1, 30),
                    Skv = Sq + g.size(0, 20), D = g.size(1, 2) * 16, Dv = g.size(1, 20);
  auto q = make<T>(g, {B, Hq, Sq, D}, g.coin(), 0);
  auto k = make<T>(g, {B, Hkv, Skv, D}, g.coin(), 0);
  auto v = make<T>(g, {B, Hkv, Skv, Dv}, false, 0);
  xattn_attention_desc d = xattn_attention_defaults();
  d.threads = int(g.size(1, 2));
  const bool docs = g.coin(), flags = g.coin(), with_bias = g.coin(), with_alibi = g.coin(), capped = g.coin(0.3),
             with_sinks = g.coin(0.3), drop = g.coin(0.3), turned = g.coin(), causal_bound = g.coin(),
             with_lengths = g.coin(0.3);
  xt::xtensor<std::int64_t, 1> lens = xt::zeros<std::int64_t>({B});
  for (auto& x : lens) x = std::int64_t(with_lengths ? g.size(0, Skv) : Skv);
  xattn_tensor lens_c{lens.data(), XATTN_I64, 1, {std::int64_t(B)}, {1}};
  // ids in runs over the keys; the queries are the last Sq keys (aligned at the bottom right)
  xt::xtensor<std::int64_t, 1> kv_ids = xt::zeros<std::int64_t>({Skv}), q_ids = xt::zeros<std::int64_t>({Sq});
  for (std::size_t j = 1; j < Skv; ++j) kv_ids(j) = kv_ids(j - 1) + (g.coin(0.15) ? 1 : 0);
  for (std::size_t i = 0; i < Sq; ++i) q_ids(i) = kv_ids(Skv - Sq + i);
  xattn_tensor q_ids_c{q_ids.data(), XATTN_I64, 1, {std::int64_t(Sq)}, {1}};
  xattn_tensor kv_ids_c{kv_ids.data(), XATTN_I64, 1, {std::int64_t(Skv)}, {1}};
  xt::xtensor<bool, 4> m = xt::zeros<bool>({B, std::size_t(1), Sq, Skv});
  for (auto& x : m) x = g.coin(0.8);
  xattn_tensor m_c{m.data(),
                   XATTN_BOOL,
                   4,
                   {std::int64_t(B), 1, std::int64_t(Sq), std::int64_t(Skv)},
                   {std::int64_t(Sq * Skv), 0, std::int64_t(Skv), 1}};
  xt::xtensor<Acc, 3> bias_t = g.tensor<Acc>({Hq, Sq, Skv});
  xattn_tensor bias_c{bias_t.data(),
                      dtype_of<Acc>(),
                      3,
                      {std::int64_t(Hq), std::int64_t(Sq), std::int64_t(Skv)},
                      {std::int64_t(Sq * Skv), std::int64_t(Skv), 1}};
  std::vector<double> slopes = alibi_op::standard_slopes(Hq);
  xattn_tensor slopes_c{slopes.data(), XATTN_F64, 1, {std::int64_t(Hq)}, {1}};
  xt::xtensor<double, 1> sink_values = g.vector<double>(Hq, -2, 2);
  xattn_tensor sinks_c{sink_values.data(), XATTN_F64, 1, {std::int64_t(Hq)}, {1}};
  if (docs) d.documents = &q_ids_c, d.documents_kv = &kv_ids_c;
  if (flags) d.mask = &m_c;
  if (with_bias) d.bias = &bias_c;
  if (with_alibi) d.alibi = &slopes_c;
  if (capped) d.softcap = 3.0;
  if (with_sinks) d.sinks = &sinks_c;
  if (drop) d.dropout_p = 0.2f, d.seed = seed;
  if (turned) d.rope = XATTN_ROPE_HALF;
  if (causal_bound) d.causal = XATTN_CAUSAL_BOTTOM_RIGHT;
  if (with_lengths) d.lengths = &lens_c;

  std::vector<O> out(B * Hq * Sq * Dv, O(-7.0f));
  std::vector<Acc> lse(B * Hq * Sq);
  const std::array<std::size_t, 4> out_shape{B, Hq, Sq, Dv};
  xattn_tensor out_c{out.data(),
                     dtype_of<O>(),
                     4,
                     {std::int64_t(B), std::int64_t(Hq), std::int64_t(Sq), std::int64_t(Dv)},
                     {std::int64_t(Hq * Sq * Dv), std::int64_t(Sq * Dv), std::int64_t(Dv), 1}};
  xattn_tensor lse_c{lse.data(),
                     dtype_of<Acc>(),
                     3,
                     {std::int64_t(B), std::int64_t(Hq), std::int64_t(Sq)},
                     {std::int64_t(Hq * Sq), std::int64_t(Sq), 1}};
  auto qc = q.c(), kc = k.c(), vc = v.c();
  INFO("seed " << seed << " B " << B << " Hq " << Hq << " Hkv " << Hkv << " Sq " << Sq << " Skv " << Skv << " D " << D
               << " documents " << docs << " mask " << flags << " bias " << with_bias << " alibi " << with_alibi
               << " softcap " << capped << " sinks " << with_sinks << " dropout " << drop << " rope " << turned
               << " causal " << causal_bound << " lengths " << with_lengths);
  REQUIRE(xattn_forward(&qc, &kc, &vc, &d, &out_c, &lse_c) == XATTN_OK);

  // the expression a C++ user writes, every part present: absent ones are neutral (a zero bias,
  // slopes of 0, ids all 0, a mask of ones, sinks of -inf, rotation at positions that are not used);
  // over the inputs' values in double, so that every dtype's cases share its reference
  const double scale = 1 / std::sqrt(double(D));
  const auto qd = q.widened(), kd = k.widened(), vd = v.widened();
  const auto Q = rope(qd.term(), std::int64_t(Skv - Sq)), K = rope(kd.term(), std::int64_t(0));
  const auto plain = [&](const auto& s) {
    const xt::xtensor<double, 3> b = with_bias ? xt::xtensor<double, 3>(xt::cast<double>(bias_t))
                                               : xt::xtensor<double, 3>(xt::zeros<double>(bias_t.shape()));
    const std::vector<double> a = with_alibi ? slopes : std::vector<double>(Hq, 0.0);
    const auto modified = [&](const auto& x) { return alibi(x, a) + bias(b); };
    const xt::xtensor<std::int64_t, 1> qi = docs ? q_ids : xt::xtensor<std::int64_t, 1>(xt::zeros<std::int64_t>({Sq}));
    const xt::xtensor<std::int64_t, 1> ki =
        docs ? kv_ids : xt::xtensor<std::int64_t, 1>(xt::zeros<std::int64_t>({Skv}));
    const xt::xtensor<bool, 4> mm = flags ? m : xt::xtensor<bool, 4>(xt::ones<bool>(m.shape()));
    xt::xtensor<double, 1> sv = sink_values;
    if (!with_sinks) sv.fill(-std::numeric_limits<double>::infinity());
    const auto finish = [&](const auto& x) {
      const auto band = window(unbounded, causal_bound ? 0 : unbounded, align::bottom_right);
      const auto masked = mask(mask(mask(modified(x), band), documents(qi, ki)), bool_mask(mm));
      const auto w = softmax(mask(masked, lengths(lens, masked_rows::zero)), sinks(sv));
      const auto check = [&](const auto& e) {
        const auto ref = reference(e);
        const xt::xtensor<O, 4> got = xt::adapt(out, out_shape);
        const double tol = std::is_same_v<T, double> ? 1e-12 : std::is_same_v<T, float> ? 2e-5 : 3e-2;
        CHECK(max_abs_diff(got, ref.output) < tol);
        if constexpr (std::is_same_v<T, O> && std::is_same_v<T, Acc>) {  // the backward, every gradient
          const xt::xtensor<O, 4> d_out = g.tensor<O>({B, Hq, Sq, Dv});
          xattn_tensor d_out_c = out_c;
          d_out_c.data = const_cast<O*>(d_out.data());
          xt::xtensor<Acc, 4> dq = xt::zeros<Acc>(q.shape), dk = xt::zeros<Acc>(k.shape), dv = xt::zeros<Acc>(v.shape);
          xt::xtensor<Acc, 3> dbias = xt::zeros<Acc>(bias_t.shape());
          const auto c = [](auto& t) {
            xattn_tensor r{t.data(), dtype_of<Acc>(), int(t.dimension()), {}, {}};
            for (std::size_t i = 0; i < t.dimension(); ++i)
              r.shape[i] = std::int64_t(t.shape()[i]), r.strides[i] = std::int64_t(t.strides()[i]);
            return r;
          };
          xattn_tensor dq_c = c(dq), dk_c = c(dk), dv_c = c(dv), dbias_c = c(dbias);
          REQUIRE(xattn_backward(&qc, &kc, &vc, &d, &out_c, &lse_c, &d_out_c, &dq_c, &dk_c, &dv_c, nullptr,
                                 with_bias ? &dbias_c : nullptr) == XATTN_OK);
          const auto r = reference_grad(make_plan(e), xt::xtensor<double, 4>(xt::cast<double>(d_out)));
          const double gtol = std::is_same_v<T, double> ? 1e-10 : 2e-4;
          CHECK(max_abs_diff(dq, r.dq) < gtol);
          CHECK(max_abs_diff(dk, r.dk) < gtol);
          CHECK(max_abs_diff(dv, r.dv) < gtol);
          if (with_bias) CHECK(max_abs_diff(dbias, r.dbias.front()) < gtol);
        }
      };
      if (drop)
        check(dropout(w, 0.2f, seed) * vd.term());
      else
        check(w * vd.term());
    };
    if (capped)
      finish(softcap(s, 3.0));
    else
      finish(s);
  };
  if (turned)
    plain(Q * trans(K) * scale);
  else
    plain(qd.term() * trans(kd.term()) * scale);
}

}  // namespace

TEST_CASE(
    "xattn_forward and xattn_backward: documents, masks, bias, ALiBi, dropout and rope as the C++ expressions "
    "they stand for",
    "[c]") {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    runtime_case<float, float>(600 + seed);
    runtime_case<double, double>(700 + seed);
    runtime_case<bfloat16, bfloat16>(800 + seed);
    runtime_case<float16, float>(900 + seed);
  }
}

TEST_CASE("xattn_forward and xattn_backward: the C++ library's fused passes, bit for bit, on random problems", "[c]") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    one_case<float, float>(seed);
    one_case<double, double>(100 + seed);
    one_case<bfloat16, bfloat16>(200 + seed);
    one_case<bfloat16, float>(300 + seed);
    one_case<float16, float16>(400 + seed);
    one_case<float16, float>(500 + seed);
  }
}

TEST_CASE("xattn_forward and xattn_backward: float queries over bfloat16 or float16 keys and values", "[c]") {
  // decoding from a 16-bit cache: the C++ expression over a float Q and 16-bit K, V runs as it is
  // (bit for bit), the rarer options on widened copies; both against the double reference
  const auto check = [](auto kv_type, std::uint64_t seed, bool rarer) {
    using KV = decltype(kv_type);
    rng g(seed);
    const std::size_t B = 2, Hkv = 2, Hq = 4, Sq = g.size(1, 9), Skv = g.size(10, 70), D = 32, Dv = 24;
    auto q = make<float>(g, {B, Hq, Sq, D}, true, 0);
    auto k = make<KV>(g, {B, Hkv, Skv, D}, g.coin(), 0);
    auto v = make<KV>(g, {B, Hkv, Skv, Dv}, false, 3);
    xattn_attention_desc d = xattn_attention_defaults();
    d.causal = XATTN_CAUSAL_BOTTOM_RIGHT;
    d.threads = 2;
    xt::xtensor<double, 1> slopes = g.vector<double>(Hq, 0.1, 0.5);
    xattn_tensor slopes_c{slopes.data(), XATTN_F64, 1, {std::int64_t(Hq)}, {1}};
    if (rarer) d.alibi = &slopes_c;
    std::vector<float> out(B * Hq * Sq * Dv, -7.0f), lse(B * Hq * Sq);
    xattn_tensor out_c{out.data(),
                       XATTN_F32,
                       4,
                       {std::int64_t(B), std::int64_t(Hq), std::int64_t(Sq), std::int64_t(Dv)},
                       {std::int64_t(Hq * Sq * Dv), std::int64_t(Sq * Dv), std::int64_t(Dv), 1}};
    xattn_tensor lse_c{lse.data(),
                       XATTN_F32,
                       3,
                       {std::int64_t(B), std::int64_t(Hq), std::int64_t(Sq)},
                       {std::int64_t(Hq * Sq), std::int64_t(Sq), 1}};
    auto qc = q.c(), kc = k.c(), vc = v.c();
    INFO("seed " << seed << " Sq " << Sq << " Skv " << Skv << " rarer " << rarer);
    REQUIRE(xattn_forward(&qc, &kc, &vc, &d, &out_c, &lse_c) == XATTN_OK);
    const auto expression = [&](const auto& Q, const auto& K, const auto& V, auto&& f) {
      const auto s = Q * trans(K) * (1 / std::sqrt(double(D)));
      if (rarer)
        f(softmax(mask(alibi(s, std::vector<double>(slopes.begin(), slopes.end())), causal(align::bottom_right))) * V);
      else
        f(softmax(mask(s, causal(align::bottom_right))) * V);
    };
    const std::array<std::size_t, 4> out_shape{B, Hq, Sq, Dv};
    const xt::xtensor<float, 4> got = xt::adapt(out, out_shape);
    const xt::xtensor<float, 4> d_out = g.tensor<float>({B, Hq, Sq, Dv});
    reference_result want;
    reference_gradients want_grad;
    const auto qd = q.widened(), kd = k.widened(), vd = v.widened();
    expression(qd.term(), kd.term(), vd.term(), [&](const auto& e) {
      want = reference(e);
      want_grad = reference_grad(make_plan(e), xt::xtensor<double, 4>(xt::cast<double>(d_out)));
    });
    // bfloat16 values on vdpbf16ps take the probabilities rounded to bf16 (numerics.md): 2^-9 max|V|
    CHECK(max_abs_diff(got, want.output) < (std::is_same_v<KV, bfloat16> && !rarer ? 3e-3 : 2e-5));
    if (!rarer)
      expression(q.term(), k.term(), v.term(), [&](const auto& e) {
        schedule sch;
        sch.threads = 2;
        CHECK(xattn::testing::bitwise_equal(got, eval_with_lse<float>(e, sch).output));
      });
    // the gradients: dq in float, dk in the keys' 16-bit type, dv in float
    std::vector<float> dq(B * Hq * Sq * D, -7.0f), dv(B * Hkv * Skv * Dv, -7.0f);
    std::vector<KV> dk(B * Hkv * Skv * D, KV(-7.0f));
    const auto dense = [](void* p, xattn_dtype t, std::array<std::size_t, 4> n) {
      return xattn_tensor{p,
                          t,
                          4,
                          {std::int64_t(n[0]), std::int64_t(n[1]), std::int64_t(n[2]), std::int64_t(n[3])},
                          {std::int64_t(n[1] * n[2] * n[3]), std::int64_t(n[2] * n[3]), std::int64_t(n[3]), 1}};
    };
    xattn_tensor dq_c = dense(dq.data(), XATTN_F32, {B, Hq, Sq, D}),
                 dk_c = dense(dk.data(), kc.dtype, {B, Hkv, Skv, D}),
                 dv_c = dense(dv.data(), XATTN_F32, {B, Hkv, Skv, Dv}), d_out_c = out_c;
    d_out_c.data = const_cast<float*>(d_out.data());
    REQUIRE(xattn_backward(&qc, &kc, &vc, &d, &out_c, &lse_c, &d_out_c, &dq_c, &dk_c, &dv_c, nullptr, nullptr) ==
            XATTN_OK);
    std::vector<float> dk_wide(dk.size());
    std::transform(dk.begin(), dk.end(), dk_wide.begin(), [](KV x) { return float(x); });
    CHECK(max_abs_diff(xt::xtensor<float, 4>(xt::adapt(dq, std::array<std::size_t, 4>{B, Hq, Sq, D})), want_grad.dq) <
          2e-4);
    CHECK(max_abs_diff(xt::xtensor<float, 4>(xt::adapt(dk_wide, std::array<std::size_t, 4>{B, Hkv, Skv, D})),
                       want_grad.dk) < 2e-2);  // rounded to 16 bits
    CHECK(max_abs_diff(xt::xtensor<float, 4>(xt::adapt(dv, std::array<std::size_t, 4>{B, Hkv, Skv, Dv})),
                       want_grad.dv) < 2e-4);
  };
  for (std::uint64_t seed = 1; seed <= 3; ++seed)
    for (const bool rarer : {false, true}) {
      check(bfloat16{}, 1000 + seed, rarer);
      check(float16{}, 1100 + seed, rarer);
    }
}

TEST_CASE("xattn_forward and xattn_backward: no queries (Sq = 0), with the strides torch gives empty tensors", "[c]") {
  // torch's contiguous (1, 4, 0, 4) has strides (0, 0, 4, 1), and its (1, 4, 0) lse (0, 0, 1): no
  // element shares an address, since there is none
  std::vector<float> k(4 * 5 * 4, 0.25f), v(4 * 5 * 4, 1.0f), dk(k.size(), 7.0f), dv(v.size(), 7.0f);
  float none[1] = {0};
  xattn_tensor Q{none, XATTN_F32, 4, {1, 4, 0, 4}, {0, 0, 4, 1}};
  xattn_tensor K{k.data(), XATTN_F32, 4, {1, 4, 5, 4}, {80, 20, 4, 1}};
  xattn_tensor V{v.data(), XATTN_F32, 4, {1, 4, 5, 4}, {80, 20, 4, 1}};
  xattn_tensor O{none, XATTN_F32, 4, {1, 4, 0, 4}, {0, 0, 4, 1}}, DO = O, DQ = O;
  xattn_tensor L{none, XATTN_F32, 3, {1, 4, 0}, {0, 0, 1}};
  xattn_tensor DK{dk.data(), XATTN_F32, 4, {1, 4, 5, 4}, {80, 20, 4, 1}};
  xattn_tensor DV{dv.data(), XATTN_F32, 4, {1, 4, 5, 4}, {80, 20, 4, 1}};
  xattn_attention_desc d = xattn_attention_defaults();
  d.causal = XATTN_CAUSAL_TOP_LEFT;
  INFO(xattn_last_error());
  REQUIRE(xattn_forward(&Q, &K, &V, &d, &O, &L) == XATTN_OK);
  REQUIRE(xattn_backward(&Q, &K, &V, &d, &O, &L, &DO, &DQ, &DK, &DV, nullptr, nullptr) == XATTN_OK);
  // no query weighs any key: every gradient of K and V is zero
  CHECK(std::all_of(dk.begin(), dk.end(), [](float x) { return x == 0.0f; }));
  CHECK(std::all_of(dv.begin(), dv.end(), [](float x) { return x == 0.0f; }));
}

TEST_CASE("xattn_forward: bad input returns a status and a message, and writes nothing", "[c]") {
  std::vector<float> q(2 * 4 * 3 * 8, 0.5f), k(2 * 2 * 5 * 8, 0.25f), v(2 * 2 * 5 * 6, 1.0f), out(2 * 4 * 3 * 6, -3.0f);
  xattn_tensor Q{q.data(), XATTN_F32, 4, {2, 4, 3, 8}, {96, 24, 8, 1}};
  xattn_tensor K{k.data(), XATTN_F32, 4, {2, 2, 5, 8}, {80, 40, 8, 1}};
  xattn_tensor V{v.data(), XATTN_F32, 4, {2, 2, 5, 6}, {60, 30, 6, 1}};
  xattn_tensor O{out.data(), XATTN_F32, 4, {2, 4, 3, 6}, {72, 18, 6, 1}};
  const std::vector<float> before = out;
  xattn_attention_desc d = xattn_attention_defaults();
  auto refused = [&](xattn_status want, const std::string& words) {
    const xattn_status s = xattn_forward(&Q, &K, &V, &d, &O, nullptr);
    INFO(xattn_last_error());
    CHECK(s == want);
    CHECK_THAT(std::string(xattn_last_error()), Catch::Contains(words));
    CHECK(out == before);
  };
  K.shape[1] = 3;
  refused(XATTN_INVALID_ARGUMENT, "q (2,4,3,8) has 4 heads, not a multiple of k's 3");
  K.shape[1] = 2;
  V.dtype = XATTN_F64;
  refused(XATTN_INVALID_ARGUMENT,
          "q, k and v must share one dtype (or be XATTN_F32 queries over XATTN_BF16 or XATTN_F16 keys and values), got "
          "XATTN_F32, XATTN_F32, XATTN_F64");
  V.dtype = XATTN_BF16;  // float queries over bfloat16 values, but float keys
  refused(XATTN_INVALID_ARGUMENT, "got XATTN_F32, XATTN_F32, XATTN_BF16");
  V.dtype = XATTN_F32;
  O.shape[3] = 5;
  refused(XATTN_INVALID_ARGUMENT, "out has shape (2,4,3,5) but the result is (B, Hq, Sq, Dv) (2,4,3,6)");
  O.shape[3] = 6;
  O.strides[1] = 6;
  refused(XATTN_INVALID_ARGUMENT, "give two elements of shape (2,4,3,6) the same address");
  O.strides[1] = 18;
  O.strides[3] = 0;  // named by the C function and its argument, not the C++ one it calls
  refused(XATTN_INVALID_ARGUMENT,
          "xattn: xattn_forward: out strides (72,18,6,0) give two elements of shape (2,4,3,6) the same address");
  O.strides[3] = 1;
  Q.dtype = xattn_dtype(42);
  refused(XATTN_INVALID_ARGUMENT, "q has dtype code 42 (not an xattn_dtype)");
  Q.dtype = XATTN_F32;
  K.shape[2] = 0;  // k alone without keys: said of k, not of v
  refused(XATTN_INVALID_ARGUMENT, "xattn_forward: k (2,2,0,8) has no keys (Skv = 0)");
  K.shape[2] = 5;
  Q.data = nullptr;
  refused(XATTN_INVALID_ARGUMENT, "q (2,4,3,8) has NULL data");
  Q.data = q.data();
  std::vector<std::int32_t> lens{5, 6};
  xattn_tensor L{lens.data(), XATTN_I32, 1, {2}, {1}};
  d.lengths = &L;
  refused(XATTN_INVALID_ARGUMENT, "xattn_forward: desc.lengths[1] = 6 is outside [0, 5] (Skv, the number of keys)");
  L.shape[0] = 3;
  refused(XATTN_INVALID_ARGUMENT, "desc.lengths has shape (3) but must be (B) or (B, Sq) = (2) or (2,3)");
  d.lengths = nullptr;
  d.window_left = -2;
  refused(XATTN_INVALID_ARGUMENT, "desc.window_left and desc.window_right must be >= 0, or -1 (unbounded)");
  d.window_left = -1;
  d.softcap = -1.0;
  refused(XATTN_INVALID_ARGUMENT, "desc.softcap is -1");
  d.softcap = 0.0;
  std::vector<float> sink(3, 0.0f);
  xattn_tensor S{sink.data(), XATTN_F32, 1, {3}, {1}};
  d.sinks = &S;
  refused(XATTN_INVALID_ARGUMENT, "desc.sinks has shape (3) but must be (Hq) = (4)");
  d.sinks = nullptr;
  d.bias = &S;
  refused(XATTN_INVALID_ARGUMENT,
          "desc.bias has shape (3), which does not broadcast to the scores (B, Hq, Sq, Skv) = (2,4,3,5)");
  xattn_tensor in_out{out.data(), XATTN_F32, 2, {3, 5}, {6, 1}};  // broadcasts, but it is out's memory
  d.bias = &in_out;
  refused(XATTN_INVALID_ARGUMENT, "out overlaps desc.bias; the call reads desc.bias while writing out");
  d.bias = nullptr;
  xattn_tensor slopes_in_out{out.data(), XATTN_F32, 1, {4}, {1}};
  d.alibi = &slopes_in_out;  // any tensor of desc: one rule for all
  refused(XATTN_INVALID_ARGUMENT, "out overlaps desc.alibi; the call reads desc.alibi while writing out");
  d.alibi = nullptr;
  d.bias = nullptr;
  S.dtype = XATTN_I32;
  d.mask = &S;
  refused(XATTN_INVALID_ARGUMENT, "desc.mask has dtype XATTN_I32 but must be XATTN_BOOL or XATTN_F32 or XATTN_F64");
  d.mask = nullptr;
  S.shape[0] = 5;
  d.documents_kv = &S;
  refused(XATTN_INVALID_ARGUMENT, "desc.documents_kv is given but desc.documents is NULL");
  d.documents = &S;
  S.shape[0] = 3;
  refused(XATTN_INVALID_ARGUMENT, "xattn: xattn_forward: desc.documents_kv has shape (3) but must be (5)");
  d.documents = d.documents_kv = nullptr;
  S.dtype = XATTN_F32;
  d.rope = XATTN_ROPE_HALF;
  d.rope_dims = 3;
  refused(XATTN_INVALID_ARGUMENT, "desc.rope_dims is 3; it must be even and at most D = 8");
  d.rope = XATTN_ROPE_NONE;
  d.rope_dims = 0;
  d.dropout_p = 1.0f;
  refused(XATTN_INVALID_ARGUMENT, "desc.dropout_p is 1; it must be in [0, 1)");
  d.dropout_p = 0.0f;
  std::vector<float> w(4 * 8, 0.1f);
  xattn_tensor Wq{w.data(), XATTN_F32, 2, {4, 8}, {8, 1}}, Wk{w.data(), XATTN_F32, 2, {4, 7}, {7, 1}},
      wv{w.data(), XATTN_F32, 1, {4}, {1}};
  xattn_additive additive{&Wq, &Wk, &wv, nullptr, nullptr, nullptr};
  d.additive = &additive;
  refused(XATTN_INVALID_ARGUMENT, "additive{W_q, W_k, w_v}: W_q is (4,8), W_k is (4,7), w_v has 4 entries");
  additive.w_v = nullptr;
  refused(XATTN_INVALID_ARGUMENT, "desc.additive->w_v is NULL");
  d.additive = nullptr;
  auto refused_lse = [&](xattn_tensor lse, const std::string& words) {
    const xattn_status s = xattn_forward(&Q, &K, &V, &d, &O, &lse);
    INFO(xattn_last_error());
    CHECK(s == XATTN_INVALID_ARGUMENT);
    CHECK_THAT(std::string(xattn_last_error()), Catch::Contains(words));
    CHECK(out == before);
  };
  refused_lse({out.data(), XATTN_F32, 3, {2, 4, 3}, {12, 3, 1}}, "lse and out overlap");
  refused_lse({q.data(), XATTN_F32, 3, {2, 4, 3}, {12, 3, 1}}, "lse overlaps q; the call reads q while writing lse");
  std::vector<double> lse64(24);
  refused_lse({lse64.data(), XATTN_F64, 3, {2, 4, 3}, {12, 3, 1}}, "lse has dtype XATTN_F64 but must be XATTN_F32");
  refused_lse({lse64.data(), XATTN_F32, 3, {2, 4, 4}, {16, 4, 1}}, "lse has shape (2,4,4) but must be (B, Hq, Sq)");
  refused_lse({lse64.data(), XATTN_F32, 3, {2, 4, 3}, {12, 3, 0}},
              "xattn: xattn_forward: lse strides (12,3,0) give two elements of shape (2,4,3) the same address");
  REQUIRE(xattn_forward(&Q, &K, &V, &d, &O, nullptr) == XATTN_OK);
  CHECK(std::string(xattn_last_error()).empty());
  CHECK(out[0] == Approx(1.0f));  // every value 1
}

TEST_CASE("xattn_backward: bad input returns a status and a message, and writes nothing", "[c]") {
  rng g(77);
  xt::xtensor<float, 4> q = g.tensor<float>({1, 2, 3, 8}), k = g.tensor<float>({1, 1, 5, 8}),
                        v = g.tensor<float>({1, 1, 5, 4}), out = xt::zeros<float>({1, 2, 3, 4}),
                        d_out = g.tensor<float>({1, 2, 3, 4});
  xt::xtensor<float, 3> lse = xt::zeros<float>({1, 2, 3});
  const auto c = [](auto& t, xattn_dtype dt = XATTN_F32) {
    xattn_tensor r{t.data(), dt, int(t.dimension()), {}, {}};
    for (std::size_t i = 0; i < t.dimension(); ++i)
      r.shape[i] = std::int64_t(t.shape()[i]), r.strides[i] = std::int64_t(t.strides()[i]);
    return r;
  };
  xattn_tensor Q = c(q), K = c(k), V = c(v), O = c(out), L = c(lse), DO = c(d_out);
  xattn_attention_desc d = xattn_attention_defaults();
  d.causal = XATTN_CAUSAL_TOP_LEFT;
  REQUIRE(xattn_forward(&Q, &K, &V, &d, &O, &L) == XATTN_OK);
  xt::xtensor<float, 4> dq = xt::full_like(q, -7.0f), dk = xt::full_like(k, -7.0f), dv = xt::full_like(v, -7.0f);
  xt::xtensor<double, 4> dq64 = xt::zeros<double>({1, 2, 3, 8});
  std::vector<float> dsinks(2, -7.0f);
  xattn_tensor DQ = c(dq), DK = c(dk), DV = c(dv), DS{dsinks.data(), XATTN_F32, 1, {2}, {1}};
  xattn_tensor* dbias = nullptr;
  xattn_tensor* dsinks_arg = nullptr;
  const xattn_tensor* lse_arg = &L;
  auto refused = [&](xattn_status want, const std::string& words) {
    const xattn_status s = xattn_backward(&Q, &K, &V, &d, &O, lse_arg, &DO, &DQ, &DK, &DV, dsinks_arg, dbias);
    INFO(xattn_last_error());
    CHECK(s == want);
    CHECK_THAT(std::string(xattn_last_error()), Catch::Contains(words));
    for (const auto* t : {&dq, &dk, &dv}) CHECK(xt::all(xt::equal(*t, -7.0f)));
  };
  lse_arg = nullptr;
  refused(XATTN_INVALID_ARGUMENT, "xattn_backward: lse is NULL");
  lse_arg = &L;
  DO.shape[3] = 3;
  refused(XATTN_INVALID_ARGUMENT, "d_out has shape (1,2,3,3) but must have out's (1,2,3,4)");
  DO.shape[3] = 4;
  DQ = c(dq64, XATTN_F64);
  refused(XATTN_INVALID_ARGUMENT, "dq has dtype XATTN_F64 but must be XATTN_F32 for q of XATTN_F32");
  DQ = c(dq);
  DK.shape[2] = 4;
  refused(XATTN_INVALID_ARGUMENT, "dk has shape (1,1,4,8) but must have k's (1,1,5,8)");
  DK.shape[2] = 5;
  DV.data = q.data();
  refused(XATTN_INVALID_ARGUMENT, "dv overlaps q");
  DV.data = dk.data();
  refused(XATTN_INVALID_ARGUMENT, "dv and dk overlap");
  DV.data = dv.data();
  DQ.strides[2] = 0;
  refused(XATTN_INVALID_ARGUMENT, "dq strides (0,24,0,1) give two elements");
  DQ = c(dq);
  dsinks_arg = &DS;
  refused(XATTN_INVALID_ARGUMENT, "dsinks is given but desc.sinks is NULL");
  std::vector<float> sink_logits(2, 0.0f);
  xattn_tensor sinks_c{sink_logits.data(), XATTN_F32, 1, {2}, {1}};
  d.sinks = &sinks_c;
  DS.data = sink_logits.data();  // the gradient written over the logits it reads
  refused(XATTN_INVALID_ARGUMENT, "dsinks overlaps desc.sinks; the call reads desc.sinks while writing dsinks");
  DS.data = dsinks.data();
  xattn_tensor sinks_in_dq{dq.data(), XATTN_F32, 1, {2}, {1}};
  d.sinks = &sinks_in_dq;
  refused(XATTN_INVALID_ARGUMENT, "dq overlaps desc.sinks; the call reads desc.sinks while writing dq");
  d.sinks = nullptr;
  dsinks_arg = nullptr;
  dbias = &DS;
  refused(XATTN_INVALID_ARGUMENT, "dbias is given but desc.bias is NULL");
  std::vector<float> bias_values(5, 0.0f);
  xattn_tensor bias_c{bias_values.data(), XATTN_F32, 1, {5}, {1}};
  d.bias = &bias_c;
  refused(XATTN_INVALID_ARGUMENT, "dbias has shape (2) but must have desc.bias's (5)");
  DS.data = bias_values.data(), DS.shape[0] = 5;
  refused(XATTN_INVALID_ARGUMENT, "dbias overlaps desc.bias; the call reads desc.bias while writing dbias");
  DS.data = dsinks.data(), DS.shape[0] = 2;
  dbias = nullptr;
  xattn_tensor in_dv{dv.data(), XATTN_F32, 1, {5}, {1}};
  d.bias = &in_dv;
  refused(XATTN_INVALID_ARGUMENT, "dv overlaps desc.bias; the call reads desc.bias while writing dv");
  d.bias = nullptr;
  dbias = nullptr;
  d.causal = XATTN_CAUSAL_NONE;  // another expression than the forward's: its lse does not fit
  CHECK(xattn_backward(&Q, &K, &V, &d, &O, &L, &DO, &DQ, &DK, &DV, nullptr, nullptr) == XATTN_INVALID_ARGUMENT);
  CHECK_THAT(std::string(xattn_last_error()),
             Catch::Contains("xattn: xattn_backward: lse does not belong to these inputs and options") &&
                 Catch::Contains("out and lse must be what xattn_forward wrote for these inputs and options"));
  CHECK(xt::all(xt::equal(dv, 0.0f)));  // zeroed, not half written
  d.causal = XATTN_CAUSAL_TOP_LEFT;
  REQUIRE(xattn_backward(&Q, &K, &V, &d, &O, &L, &DO, &DQ, &DK, &DV, nullptr, nullptr) == XATTN_OK);
  // query i sees keys j <= i (top left): keys 3 and 4 of 5 get no gradient, the others do
  CHECK(xt::all(xt::equal(xt::view(dk, 0, 0, xt::range(3, 5)), 0.0f)));
  CHECK(xt::all(xt::equal(xt::view(dv, 0, 0, xt::range(3, 5)), 0.0f)));
  CHECK(xt::all(xt::not_equal(xt::view(dv, 0, 0, xt::range(0, 3)), 0.0f)));
}
