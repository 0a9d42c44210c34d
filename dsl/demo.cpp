// `make demo`: the seeds' pipelines and the catalogue, each printed next to what its source expects.
// GCC 12 sometimes reports a false -Wrestrict inside std::string::insert once xtensor's printer
// (xio.hpp) is inlined (GCC PR 105651; seen on one CI build of this file, not reproducible on the
// next): ignored for the whole file, before the standard headers, where the diagnostic points.
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "catalogue/band_mask.hpp"
#include "catalogue/causal_alibi.hpp"
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/nadaraya_watson.hpp"
#include "catalogue/vector_sum.hpp"
#include "d2l_additive_attention.hpp"
#include "d2l_dot_product_attention.hpp"
#include "d2l_masked_softmax.hpp"
#include "decode_loop.hpp"
#include "eviction.hpp"
#include "modules/d2l_modules.hpp"
#include "modules/equinox_mha.hpp"
#include "modules/fused_vs_unfused.hpp"
#include "seeds_example.hpp"
#include "sparse_attention.hpp"
#include "speculative_decoding.hpp"
#include "training_demo.hpp"

#include <xattn/viz/heatmap.hpp>
#include <xattn/viz/line_plot.hpp>

#include <xtensor/xio.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xview.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <unistd.h>

namespace {

void section(const char* title) { std::cout << "\n== " << title << " ==\n"; }

// Heatmaps go to <build>/demo (set by dsl/CMakeLists.txt), or to the directory given as argv[1].
std::filesystem::path output_dir(int argc, char** argv) {
  std::filesystem::path dir = argc > 1 ? argv[1] : XATTN_DEMO_DIR;
  std::filesystem::create_directories(dir);
  return std::filesystem::absolute(dir);
}

// One status line, rewritten in place on a terminal; one line per step otherwise (logs).
void progress(int done, int total, const std::string& what) {
  static const bool tty = isatty(fileno(stdout));
  std::printf(tty ? "\r  [%2d/%2d] %-20s" : "  [%2d/%2d] %s\n", done, total, what.c_str());
  if (tty && done == total) std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace xattn;
  const auto start = std::chrono::steady_clock::now();
  const auto out_dir = output_dir(argc, argv);
  xt::random::seed(0);
  std::cout << std::fixed;
  std::cout.precision(4);

  section("d2l masked_softmax, X = rand(2, 2, 4)");
  xt::xtensor<float, 3> x = xt::random::rand<float>({2, 2, 4});
  std::cout << "valid_lens [2, 3]:\n" << dsl::masked_softmax(x, xt::xtensor<int, 1>{2, 3}) << "\n";
  std::cout << "valid_lens [[1, 3], [2, 4]]:\n" << dsl::masked_softmax(x, xt::xtensor<int, 2>{{1, 3}, {2, 4}}) << "\n";
  std::cout << "(d2l: zeros beyond each length, each row sums to 1)\n";

  const dsl::seeds_example ex;
  section("d2l DotProductAttention, worked example");
  std::cout << dsl::dot_product_attention(ex.dot_queries, ex.keys, ex.values, ex.valid_lens) << "\n";
  std::cout << "d2l expects: [[[ 2,  3,  4,  5]], [[10, 11, 12, 13]]]\n";

  section("d2l AdditiveAttention (query size 20, key size 2, 8 hidden), worked example");
  const xt::xtensor<float, 2> w_q = xt::random::randn<float>({8, 20}), w_k = xt::random::randn<float>({8, 2});
  const xt::xtensor<float, 1> w_v = xt::random::randn<float>({8});
  std::cout << dsl::additive_attention(ex.add_queries, ex.keys, ex.values, ex.valid_lens, w_q, w_k, w_v) << "\n";
  std::cout << "d2l expects: [[[ 2,  3,  4,  5]], [[10, 11, 12, 13]]] (equal keys: uniform over the valid ones)\n";

  section("catalogue: cosine scores with temperature 0.1 (a user policy)");
  xt::xtensor<float, 3> q = xt::random::randn<float>({1, 2, 3}), k = xt::random::randn<float>({1, 5, 3});
  auto cq = ref(q), ck = ref(k);
  std::cout << eval(softmax(score(dsl::cosine_with_temperature{0.1}, cq, ck))) << "\n";

  section("catalogue: vector-sum scores ignore the query (d2l exercise)");
  std::cout << eval(softmax(score(dsl::vector_sum{}, cq, ck))) << "\n(both rows are equal)\n";

  section("catalogue: band mask |i - j| <= 1 on 5 x 5 (a user mask)");
  xt::xtensor<float, 3> s = xt::zeros<float>({1, 5, 5});
  std::cout << eval(softmax(mask(ref(s), dsl::band_mask{1}))) << "\n";

  section("catalogue: causal + ALiBi, 2 heads, 4 tokens: weights of head 0");
  xt::xtensor<float, 4> q4 = xt::zeros<float>({1, 2, 4, 8});
  auto z = ref(q4);
  std::cout << xt::view(eval(softmax(mask(alibi(z * trans(z), alibi_op::standard_slopes(2)), causal()))), 0, 0) << "\n";

  section("catalogue: Nadaraya-Watson regression with a Gaussian kernel (sigma = 0.5)");
  xt::xtensor<float, 3> xt_train = xt::xtensor<float, 3>::from_shape({1, 50, 1}), yt = xt_train;
  for (std::size_t i = 0; i < 50; ++i) {
    xt_train(0, i, 0) = float(i) / 10;
    yt(0, i, 0) = 2 * std::sin(xt_train(0, i, 0)) + std::pow(xt_train(0, i, 0), 0.8f);
  }
  xt::xtensor<float, 3> xq = {{{1.0f}, {2.5f}, {4.0f}}};
  std::cout << "f(x) at x = 1, 2.5, 4: " << dsl::nadaraya_watson(xq, xt_train, yt, 0.5) << "\n";
  std::cout << "truth:                 " << 2 * std::sin(1.0) + 1.0 << ", " << 2 * std::sin(2.5) + std::pow(2.5, 0.8)
            << ", " << 2 * std::sin(4.0) + std::pow(4.0, 0.8) << "\n";

  section("xattn::nn: d2l's DotProductAttention and AdditiveAttention modules, worked example");
  const auto d2l = dsl::d2l_modules_example();
  std::cout << "DotProductAttention:\n" << d2l.dot_output << "\nAdditiveAttention:\n" << d2l.additive_output << "\n";
  std::cout << "d2l expects: [[[ 2,  3,  4,  5]], [[10, 11, 12, 13]]] for both\n";
  viz::heatmap_options d2l_opt;  // d2l: show_heatmaps(attention_weights.reshape((1, 1, 2, 10)))
  d2l_opt.range = {{0.0, 1.0}};
  d2l_opt.cell = 32;
  const auto d2l_png = out_dir / "d2l_dot_product_weights.png";
  viz::write_heatmap(d2l_png, xt::xtensor<float, 2>(xt::view(d2l.dot_weights, xt::all(), 0, xt::all())), d2l_opt);
  std::cout << "weights heatmap: " << d2l_png.string() << "\n";

  section("xattn::nn: equinox-style MultiheadAttention, 4 heads, 12 tokens of size 32, causal mask");
  const auto eqx = dsl::equinox_mha_example();
  std::cout << "output (12, 32), token 11, first 6 features:\n  training (dropout 0.1, key 0): "
            << xt::view(eqx.train_output, 11, xt::range(0, 6))
            << "\n  inference:                     " << xt::view(eqx.inference_output, 11, xt::range(0, 6)) << "\n";
  viz::heatmap_options mha_opt;
  mha_opt.titles = {"head 0", "head 1", "head 2", "head 3"};
  mha_opt.range = {{0.0, 1.0}};
  const auto mha_png = out_dir / "equinox_mha_head_weights.png";
  viz::write_heatmap(mha_png, eqx.weights, mha_opt);
  std::cout << "per-head weights heatmap (zero above the diagonal: causal): " << mha_png.string() << "\n";

  section("training: Nadaraya-Watson with a learnable kernel width (d2l), SGD on g.dscore.d_sigma");
  const auto nw = dsl::training::fit_nadaraya_watson(/*sigma*/ 2.0, /*steps*/ 30, /*lr*/ 0.02);
  for (std::size_t n = 0; n < nw.losses.size(); n += 5)
    std::printf("  step %2zu  loss %8.4f  sigma %.4f\n", n, nw.losses[n], nw.sigmas[n]);
  std::printf("  learned sigma %.4f (leave-one-out loss 0.5*sum (y_hat - y)^2 over 50 points)\n", nw.sigma);

  section("training: d2l AdditiveAttention learns a lookup task (queries of size 4, keys of size 6), Adam");
  const auto add = dsl::training::fit_additive_lookup(/*steps*/ 200, /*lr*/ 0.05f);
  for (std::size_t n = 0; n < add.losses.size(); n += 40) std::printf("  step %3zu  loss %.5f\n", n, add.losses[n]);
  std::printf("  step %3zu  loss %.5f\n", add.losses.size() - 1, add.losses.back());

  section(
      "training: a user modifier's learnable table (relative position bias), SGD on g.dmodify, no derivative written");
  const auto rb = dsl::training::fit_relative_bias_demo(/*steps*/ 200, /*lr*/ 0.015);
  for (std::size_t n = 0; n < rb.losses.size(); n += 50) std::printf("  step %3zu  loss %.6f\n", n, rb.losses[n]);
  std::printf("  step %3zu  loss %.6f\n", rb.losses.size() - 1, rb.losses.back());
  for (std::size_t h = 0; h < 2; ++h) {
    std::printf("  head %zu, bias at j - i = -4..0 (relative to j = i): teacher", h);
    for (std::size_t b = 0; b < 5; ++b) std::printf(" %5.2f", rb.teacher[h * 5 + b]);
    std::printf(", learned");
    for (std::size_t b = 0; b < 5; ++b) std::printf(" %5.2f", rb.learned[h * 5 + b]);
    std::printf("\n");
  }
  const auto loss_png = out_dir / "training_loss.png";
  viz::line_plot_options loss_opt;
  loss_opt.log_y = true;
  loss_opt.title = "training loss";
  viz::write_line_plot(loss_png, {{"Nadaraya-Watson", nw.losses}, {"additive lookup", add.losses}}, loss_opt);
  const auto rb_png = out_dir / "relative_bias_loss.png";
  loss_opt.title = "relative position bias: training loss";
  viz::write_line_plot(rb_png, {{"relative position bias", rb.losses}}, loss_opt);
  viz::heatmap_options add_opt;
  add_opt.range = {{0.0, 1.0}};
  add_opt.cell = 32;
  const auto add_png = out_dir / "additive_learned_weights.png";
  viz::write_heatmap(add_png, xt::xtensor<float, 2>(xt::view(add.weights, 0)), add_opt);
  std::cout << "loss curves: " << loss_png.string() << ", " << rb_png.string()
            << "\nlearned weights (query i reads keys 3i..3i+2, its type): " << add_png.string() << "\n";

  section("decoding from a kv_cache: a toy attention layer, 2 prompts x 2 continuations, 256 tokens each, bfloat16");
  {
    const auto m = dsl::decoding::make_toy_model(/*vocab*/ 64, /*q_heads*/ 8, /*kv_heads*/ 2, /*head_dim*/ 64, 3);
    std::vector<int> long_prompt(300);
    for (std::size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = int(i * 7 % 64);
    const auto run = dsl::decoding::generate<xattn::bfloat16>(m, {{1, 2, 3, 4, 5, 6, 7, 8}, long_prompt}, 2, 256);
    std::printf(
        "  %zu tokens in %.3f s: %.0f tokens/s (attention alone: %.0f tokens/s; the rest is the toy model's\n"
        "  scalar projections); the forks share %zu of their prompts' pages\n",
        run.generated, run.seconds, double(run.generated) / run.seconds, double(run.generated) / run.attention_seconds,
        run.shared);
    std::printf("  first tokens of the continuations (prompt 1, 1, 2, 2):");
    for (std::size_t b = 0; b < run.tokens.size(); ++b)
      std::printf(" %d", run.tokens[b][b < 2 ? 8 : long_prompt.size()]);
    std::printf("\n");
  }

  section("speculative decoding: a noisy draft's trees of 22 tokens verified with tree_mask, float");
  {
    const auto target = dsl::decoding::make_toy_model(/*vocab*/ 64, /*q_heads*/ 8, /*kv_heads*/ 2, /*head_dim*/ 64, 3);
    const std::vector<std::vector<int>> prompts{{1, 2, 3, 4, 5, 6, 7, 8}, {5, 9, 2, 7, 30, 41, 12, 3, 60, 1}};
    const std::size_t steps = 64;
    const auto greedy = dsl::decoding::generate<float>(target, prompts, 1, steps);
    for (float noise : {0.5f, 1.0f}) {
      const auto draft = dsl::speculative::make_draft(target, noise, 5);
      const auto run = dsl::speculative::generate<float>(target, draft, prompts, steps, {3, 2, 1, 1});
      std::printf(
          "  draft noise %.1f: %zu tokens per sequence in %zu verifying passes (%.1f tokens per pass, %zu\n"
          "  drafted tokens accepted); the same tokens as greedy decoding: %s\n",
          noise, steps, run.verifications, double(steps) / double(run.verifications), run.accepted,
          run.tokens == greedy.tokens ? "yes" : "NO");
    }
  }

  section("eviction within a budget: StreamingLLM and H2O against the full cache, 512 tokens, float");
  {
    using dsl::eviction::policy;
    const auto m = dsl::decoding::make_toy_model(/*vocab*/ 64, /*q_heads*/ 8, /*kv_heads*/ 2, /*head_dim*/ 64, 3);
    std::vector<int> tokens(512);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * i * 7 + i * 3 + 1) % 64);
    const auto full = dsl::eviction::run(m, tokens, policy::full, 0, 0);
    std::printf("  %8s  %22s  %22s\n", "budget", "StreamingLLM drift", "H2O drift");
    for (std::size_t budget : {64, 128, 256}) {
      const auto s = dsl::eviction::run(m, tokens, policy::streaming, budget, 4, &full);
      const auto h = dsl::eviction::run(m, tokens, policy::h2o, budget, 4, &full);
      std::printf("  %8zu  %22.4f  %22.4f\n", budget, s.drift, h.drift);
    }
    std::cout << "(drift: each step's |out - out(full cache)| / |out(full cache)|, averaged over the steps;\n"
                 " StreamingLLM keeps 4 sink tokens and the newest, H2O the newest half and the most attended)\n";
  }

  section("top-k sparse attention: an indexer's k keys per query, from a cache of 4096 tokens, bfloat16");
  {
    // keys of a few topics: a query is close to the keys of its own topic, which a good indexer finds
    const std::size_t Hkv = 2, Hq = 8, D = 64, len = 4096, topics = 64;
    xt::random::seed(9);
    const xt::xtensor<float, 2> centre = xt::random::randn<float>({topics, D});
    xt::xtensor<float, 3> keys = xt::random::randn<float>({Hkv, len, D}) * 0.5f;
    for (std::size_t h = 0; h < Hkv; ++h)
      for (std::size_t j = 0; j < len; ++j)
        for (std::size_t d = 0; d < D; ++d) keys(h, j, d) += centre((j * 7 + h) % topics, d);
    xattn::kv_cache<xattn::bfloat16> cache({.kv_heads = Hkv, .head_dim = D, .page_size = 16, .max_tokens = len});
    const std::vector<xattn::sequence_id> batch{cache.add_sequence()};
    cache.append(batch[0], keys, xt::xtensor<float, 3>(xt::random::randn<float>({Hkv, len, D})));
    xt::xtensor<float, 4> q = xt::random::randn<float>({std::size_t(1), Hq, std::size_t(1), D}) * 0.3f;
    for (std::size_t h = 0; h < Hq; ++h)
      for (std::size_t d = 0; d < D; ++d) q(0, h, 0, d) += centre(h / (Hq / Hkv) * 5 % topics, d);
    const auto dense = dsl::sparse::attend_all(cache, batch, q);
    std::printf("  %6s  %14s  %14s\n", "k", "index dims 8", "index dims 64");
    for (std::size_t k : {64, 256, 1024}) {
      const double e8 = dsl::sparse::relative_error(dsl::sparse::attend_top_k(cache, batch, q, k, 8).first, dense);
      const double e64 = dsl::sparse::relative_error(dsl::sparse::attend_top_k(cache, batch, q, k, 64).first, dense);
      std::printf("  %6zu  %14.4f  %14.4f\n", k, e8, e64);
    }
    std::cout << "(|sparse - dense| / |dense| of one decoding step; the indexer scores tokens on its first\n"
                 " 8 or all 64 features and keeps the k best: select() reads only those from the pages)\n";
  }

  section("fused xattn vs unfused (sgemm, scalar-exp softmax, sgemm), (1, 8, S, 64), float, 2 threads each");
  const auto rows = dsl::fused_vs_unfused({256, 512, 1024, 2048}, 8, 64, 3, progress);
  std::printf("  %6s  %14s  %14s  %8s  %16s  %10s\n", "S", "fused ms (GF/s)", "unfused ms (GF/s)", "speedup",
              "unfused scores", "max |diff|");
  for (const auto& r : rows)
    std::printf("  %6zu  %7.2f (%5.1f)  %8.2f (%5.1f)  %7.2fx  %12.1f MiB  %10.1e\n", r.seq, 1e3 * r.fused_s,
                r.gflops_fused, 1e3 * r.unfused_s, r.gflops_unfused, r.unfused_s / r.fused_s, r.scores_mib, r.max_diff);
  std::cout << "(the fused pass never allocates the scores; medians of 3 runs on a shared machine)\n";

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\ndemo finished in " << seconds << " s; files are in " << out_dir.string() << "\n";
  return 0;
}
