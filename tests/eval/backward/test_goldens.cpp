// Gradients against PyTorch autograd on d2l's own code (tests/data/goldens, made by
// tools/goldens/make_grad_goldens.py in float64): masked_softmax's d_X through the reference
// backward, DotProductAttention's d_queries, d_keys, d_values through grad() in double and float.
//
// Tolerances. double: both sides compute the same sums of O(10) terms of size O(1) in another
// order, so they agree to a few ulp of the largest gradient; 1e-12 leaves a 1000x margin yet fails
// on any formula error (the smallest non-zero gradients are ~1e-3). float: inputs rounded to float
// (relative 6e-8) through the softmax and two products of at most 10 terms: 1e-5 relative to the
// largest gradient of the case (of any input).
#include "support/goldens.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <xtensor/xview.hpp>

#include <cmath>

using namespace xattn;

namespace {

using testing::golden_tensor;
using testing::read_golden;
using testing::worst_flat;

double largest(const xt::xarray<double>& a) { return xt::amax(xt::abs(a))(); }

template <class T>
void check_dot_product_case(const nlohmann::json& c, double rel_tol) {
  const xt::xtensor<T, 3> q = golden_tensor<T>(c["queries"]), k = golden_tensor<T>(c["keys"]),
                          v = golden_tensor<T>(c["values"]);
  const xt::xtensor<T, 3> d_out = golden_tensor<T>(c["d_output"]);
  const xt::xarray<int> lens = golden_tensor<int>(c["valid_lens"]);
  const T scale = T(1) / std::sqrt(T(q.shape()[2]));
  auto run = [&](const auto& L) {
    const auto e = softmax(mask(ref(q) * trans(ref(k)) * scale, L)) * ref(v);
    const auto f = eval_with_lse(e);
    INFO(c["name"].get<std::string>());
    CHECK(worst_flat(f.output, golden_tensor<double>(c["output"])) <=
          rel_tol * largest(golden_tensor<double>(c["output"])));
    const auto g = grad(e, f, d_out);
    double scale = 0;  // the case's largest gradient (d2l's example has d_queries = 0 exactly: keys all equal)
    for (const char* name : {"d_queries", "d_keys", "d_values"})
      scale = std::max(scale, largest(golden_tensor<double>(c[name])));
    for (const char* name : {"d_queries", "d_keys", "d_values"}) {
      const auto want = golden_tensor<double>(c[name]);
      const auto& got = name[2] == 'q' ? g.dq : name[2] == 'k' ? g.dk : g.dv;
      INFO(name << ": worst " << worst_flat(got, want) << ", the case's largest gradient " << scale);
      CHECK(worst_flat(got, want) <= rel_tol * scale);
    }
  };
  if (lens.dimension() == 1)
    run(lengths(xt::xtensor<int, 1>(lens)));
  else
    run(lengths(xt::xtensor<int, 2>(lens)));
}

}  // namespace

TEST_CASE("goldens: d2l masked_softmax's input gradient (PyTorch autograd) by the reference backward") {
  const auto file = read_golden("d2l_masked_softmax.json");
  REQUIRE(file["cases"].size() == 3);
  for (const auto& c : file["cases"]) {
    INFO(c["name"].get<std::string>());
    const xt::xtensor<double, 3> x = golden_tensor<double>(c["X"]);
    const xt::xarray<int> lens = golden_tensor<int>(c["valid_lens"]);
    auto check = [&](const auto& L) {
      const auto e = softmax(mask(ref(x), L));
      CHECK(worst_flat(eval(e), golden_tensor<double>(c["weights"])) < 1e-15);
      const xt::xtensor<double, 3> d_w = golden_tensor<double>(c["d_weights"]);
      const auto g = reference_grad(make_plan(e), xt::xtensor<double, 4>(xt::view(d_w, xt::all(), xt::newaxis())));
      CHECK(worst_flat(g.dx, golden_tensor<double>(c["d_X"])) < 1e-12);
    };
    if (lens.dimension() == 1)
      check(lengths(xt::xtensor<int, 1>(lens)));
    else
      check(lengths(xt::xtensor<int, 2>(lens)));
  }
}

TEST_CASE("goldens: d2l DotProductAttention's gradients (PyTorch autograd) by grad()") {
  const auto file = read_golden("d2l_dot_product_attention.json");
  REQUIRE(file["cases"].size() == 3);
  for (const auto& c : file["cases"]) {
    check_dot_product_case<double>(c, 1e-12);
    check_dot_product_case<float>(c, 1e-5);
  }
}

TEST_CASE("goldens: attention with learned sinks as gpt-oss computes it (PyTorch autograd), dsinks included") {
  const auto file = read_golden("gpt_oss_sinks.json");
  REQUIRE(file["cases"].size() == 2);
  for (const auto& c : file["cases"]) {
    INFO(c["name"].get<std::string>());
    // gpt-oss's layouts -- Q (T, Hkv, G, D), K and V (T, Hkv, D), out (T, Hkv, G, D) -- as (1, H, T, D)
    const xt::xarray<double> Q = golden_tensor<double>(c["Q"]), dQ_want = golden_tensor<double>(c["d_Q"]);
    const std::size_t T = Q.shape()[0], Hkv = Q.shape()[1], G = Q.shape()[2], D = Q.shape()[3];
    const auto heads_first = [&](const xt::xarray<double>& x, std::size_t h) {
      xt::xarray<double> r = xt::reshape_view(x, {T, h, D});
      return xt::xtensor<double, 4>(xt::view(xt::transpose(r, {1, 0, 2}), xt::newaxis(), xt::all()));
    };
    const xt::xtensor<double, 4> q = heads_first(Q, Hkv * G), k = heads_first(golden_tensor<double>(c["K"]), Hkv),
                                 v = heads_first(golden_tensor<double>(c["V"]), Hkv),
                                 d_out = heads_first(golden_tensor<double>(c["d_output"]), Hkv * G);
    const xt::xtensor<double, 1> s = golden_tensor<double>(c["S"]);
    const int window_size = c["sliding_window"].get<int>();
    const auto scores = ref(q) * trans(ref(k)) / std::sqrt(double(D));
    auto check = [&](const auto& e) {
      const auto f = eval_with_lse(e);
      CHECK(worst_flat(f.output, heads_first(golden_tensor<double>(c["output"]), Hkv * G)) < 1e-13);
      const auto g = grad(e, f, d_out);
      CHECK(worst_flat(g.dq, heads_first(dQ_want, Hkv * G)) < 1e-12);
      CHECK(worst_flat(g.dk, heads_first(golden_tensor<double>(c["d_K"]), Hkv)) < 1e-12);
      CHECK(worst_flat(g.dv, heads_first(golden_tensor<double>(c["d_V"]), Hkv)) < 1e-12);
      CHECK(worst_flat(g.dsinks, golden_tensor<double>(c["d_S"])) < 1e-12);
    };
    if (window_size > 0)  // gpt-oss's sliding_window = W keeps keys i - W < j <= i
      check(softmax(mask(scores, window(window_size - 1, 0)), sinks(s)) * ref(v));
    else
      check(softmax(mask(scores, causal()), sinks(s)) * ref(v));
  }
}

TEST_CASE("goldens: attention over HF rotary embeddings (PyTorch autograd): output, dQ and dK of the unrotated rows") {
  const auto file = read_golden("hf_rope_attention.json");
  REQUIRE(file["cases"].size() == 2);
  for (const auto& c : file["cases"]) {
    INFO(c["name"].get<std::string>());
    const xt::xtensor<double, 4> q = golden_tensor<double>(c["Q"]), k = golden_tensor<double>(c["K"]),
                                 v = golden_tensor<double>(c["V"]), d_out = golden_tensor<double>(c["d_output"]);
    const xt::xtensor<std::int64_t, 1> qpos = golden_tensor<std::int64_t>(c["q_positions"]),
                                       kpos = golden_tensor<std::int64_t>(c["k_positions"]);
    const rope_options o{.base = float(c["base"].get<double>()),
                         .dims = c["dims"].get<std::size_t>(),
                         .style = c["style"].get<std::string>() == "half" ? rope_style::half : rope_style::interleaved};
    REQUIRE(c["causal"].get<bool>());
    const auto e = softmax(mask(rope(ref(q), qpos, o) * trans(rope(ref(k), kpos, o)) / std::sqrt(double(q.shape()[3])),
                                causal(align::bottom_right))) *
                   ref(v);
    // Both sides take float32 cosines and sines and compute in double; torch's float cos and sin and
    // glibc's sincosf used here (each within an ulp) may differ in the last bit (6e-8 relative),
    // which moves values of size O(1) by up to ~1e-7. A wrong pairing, sign or angle moves them by
    // O(0.1).
    const double tol = 5e-7;
    const auto f = eval_with_lse(e);
    CHECK(worst_flat(f.output, golden_tensor<double>(c["output"])) < tol);
    const auto g = grad(e, f, d_out);
    CHECK(worst_flat(g.dq, golden_tensor<double>(c["d_Q"])) < tol);
    CHECK(worst_flat(g.dk, golden_tensor<double>(c["d_K"])) < tol);
    CHECK(worst_flat(g.dv, golden_tensor<double>(c["d_V"])) < tol);
    // the reference (the oracle of test_rope.cpp) agrees with PyTorch as closely
    CHECK(worst_flat(reference(e).output, golden_tensor<double>(c["output"])) < tol);
  }
}

TEST_CASE("goldens: DeepSeek's multi-head latent attention (PyTorch autograd), training and absorbed decoding") {
  const auto file = read_golden("deepseek_mla.json");
  REQUIRE(file["cases"].size() == 2);
  const auto& t = file["cases"][0];
  {
    INFO(t["name"].get<std::string>());
    const xt::xtensor<double, 4> qn = golden_tensor<double>(t["q_nope"]), qp = golden_tensor<double>(t["q_pe"]),
                                 kn = golden_tensor<double>(t["k_nope"]), kp = golden_tensor<double>(t["k_pe"]),
                                 v = golden_tensor<double>(t["v"]), d_out = golden_tensor<double>(t["d_output"]);
    const xt::xtensor<std::int64_t, 1> pos = golden_tensor<std::int64_t>(t["positions"]);
    const auto s = ref(qn) * trans(ref(kn)) + rope(ref(qp), pos) * trans(rope(ref(kp), pos));
    const auto e = softmax(mask(s / std::sqrt(double(qn.shape()[3] + qp.shape()[3])), causal())) * ref(v);
    const double tol = 5e-7;  // float32 cosines and sines, as in the rotary goldens
    const auto f = eval_with_lse(e);
    CHECK(worst_flat(f.output, golden_tensor<double>(t["output"])) < tol);
    const auto g = grad(e, f, d_out);
    CHECK(worst_flat(g.dq, golden_tensor<double>(t["d_q_nope"])) < tol);
    CHECK(worst_flat(g.dk, golden_tensor<double>(t["d_k_nope"])) < tol);
    CHECK(worst_flat(g.dq2, golden_tensor<double>(t["d_q_pe"])) < tol);
    CHECK(worst_flat(g.dk2, golden_tensor<double>(t["d_k_pe"])) < tol);
    CHECK(worst_flat(g.dv, golden_tensor<double>(t["d_v"])) < tol);
  }
  const auto& d = file["cases"][1];
  {
    INFO(d["name"].get<std::string>());
    const xt::xtensor<double, 4> qc = golden_tensor<double>(d["q_c"]), qp = golden_tensor<double>(d["q_pe"]),
                                 c = golden_tensor<double>(d["c_kv"]), kp = golden_tensor<double>(d["k_pe"]),
                                 d_latent = golden_tensor<double>(d["d_latent"]);
    const xt::xtensor<double, 3> w_uv = golden_tensor<double>(d["w_uv"]);
    const double scale = 1 / std::sqrt(double(golden_tensor<double>(d["q_nope"]).shape()[3] + qp.shape()[3]));
    const auto C = ref(c);
    const auto e = softmax(ref(qc) * trans(C) * scale + ref(qp) * trans(ref(kp)) * scale) * C;
    const auto f = eval_with_lse(e);
    CHECK(worst_flat(f.output, golden_tensor<double>(d["latent_output"])) < 1e-13);
    // the latent output times each head's W_uv is the naive attention's output
    const std::size_t H = qc.shape()[1], L = c.shape()[3], Dv = w_uv.shape()[2];
    xt::xtensor<double, 4> out = xt::zeros<double>({std::size_t(1), H, std::size_t(1), Dv});
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t n = 0; n < Dv; ++n) out(0, h, 0, n) += f.output(0, h, 0, l) * w_uv(h, l, n);
    CHECK(worst_flat(out, golden_tensor<double>(d["naive_output"])) < 1e-13);
    const auto g = grad(e, f, d_latent);
    CHECK(worst_flat(g.dq, golden_tensor<double>(d["d_q_c"])) < 1e-12);
    CHECK(worst_flat(g.dq2, golden_tensor<double>(d["d_q_pe"])) < 1e-12);
    CHECK(worst_flat(g.dk2, golden_tensor<double>(d["d_k_pe"])) < 1e-12);
    const xt::xtensor<double, 4> dc = g.dk + g.dv;  // C is both the first term's keys and the values
    CHECK(worst_flat(dc, golden_tensor<double>(d["d_c_kv"])) < 1e-12);
  }
}
