// dsl/modules/decoder_attention.hpp, the LLaMA-style and gpt-oss-style layers written in the DSL:
// every gradient (input, the four projections with their biases, the sinks) against central
// finite differences of a scalar loss in double, and the forward against an unfused composition
// (the rotation by the double reference's rows, the window and sinks by hand).
#include "modules/decoder_attention.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <vector>

namespace {

using layer = dsl::decoder_attention<double>;

/// L = Σ y ∘ w for the layer's output y.
double loss(layer& m, const xt::xtensor<double, 3>& x, const xt::xtensor<std::int64_t, 1>& pos,
            const xt::xtensor<double, 3>& w) {
  return xt::sum(m.forward(x, pos) * w)();
}

/// The largest |analytic − central difference| over a few entries of a parameter, relative to 1 + |analytic|.
template <class P, class G>
double worst_fd(layer& m, P& param, const G& analytic, const xt::xtensor<double, 3>& x,
                const xt::xtensor<std::int64_t, 1>& pos, const xt::xtensor<double, 3>& w, xattn::testing::rng& r) {
  double worst = 0;
  for (int n = 0; n < 6; ++n) {
    const std::size_t k = r.size(0, param.size() - 1);
    const double keep = param.flat(k), h = 1e-5;
    param.flat(k) = keep + h;
    const double up = loss(m, x, pos, w);
    param.flat(k) = keep - h;
    const double down = loss(m, x, pos, w);
    param.flat(k) = keep;
    worst =
        std::max(worst, std::abs((up - down) / (2 * h) - double(analytic.flat(k))) / (1 + std::abs(analytic.flat(k))));
  }
  return worst;
}

}  // namespace

TEST_CASE("dsl decoder_attention: LLaMA-style and gpt-oss-style gradients against finite differences") {
  xattn::testing::rng r(61);
  for (auto o : {dsl::llama_style(), dsl::gpt_oss_style()}) {
    o.window = o.window == xattn::unbounded ? o.window : 5;  // a window shorter than the sequence
    INFO("bias " << o.bias << ", window " << o.window << ", sinks " << o.sinks);
    layer m(o);
    if (o.sinks) m.sink_logits() = r.vector<double>(o.heads, -1, 1);
    const std::size_t B = 2, S = 11;
    const xt::xtensor<double, 3> x = r.tensor<double>({B, S, o.dim}), w = r.tensor<double>({B, S, o.dim});
    const xt::xtensor<std::int64_t, 1> pos = xt::arange<std::int64_t>(3, 3 + std::int64_t(S));
    m.zero_grad();
    m.forward(x, pos);
    const xt::xtensor<double, 3> dx = m.backward(w, pos);
    xt::xtensor<double, 3> xv = x;
    CHECK(worst_fd(m, xv, dx, xv, pos, w, r) < 1e-7);
    // the projections' weights (their weight_grad) and biases, through set_weight/set_bias
    for (auto* p : {&m.q_proj(), &m.k_proj(), &m.v_proj(), &m.o_proj()}) {
      xt::xtensor<double, 2> wt = p->weight();
      const xt::xtensor<double, 2> g = p->weight_grad();
      double worst = 0;
      const auto at = [&](std::size_t k, double value) {
        wt.flat(k) = value;
        p->set_weight(wt);
        return loss(m, x, pos, w);
      };
      for (int n = 0; n < 6; ++n) {
        const std::size_t k = r.size(0, wt.size() - 1);
        const double keep = wt.flat(k), up = at(k, keep + 1e-5), down = at(k, keep - 1e-5);
        at(k, keep);
        worst = std::max(worst, std::abs((up - down) / 2e-5 - g.flat(k)) / (1 + std::abs(g.flat(k))));
      }
      INFO(p->name());
      CHECK(worst < 1e-7);
      if (p->has_bias()) {
        xt::xtensor<double, 1> b = p->bias();
        const xt::xtensor<double, 1> gb = p->bias_grad();
        double worst_b = 0;
        for (int n = 0; n < 4; ++n) {
          const std::size_t k = r.size(0, b.size() - 1);
          const double keep = b(k);
          b(k) = keep + 1e-5, p->set_bias(b);
          const double up = loss(m, x, pos, w);
          b(k) = keep - 1e-5, p->set_bias(b);
          const double down = loss(m, x, pos, w);
          b(k) = keep, p->set_bias(b);
          worst_b = std::max(worst_b, std::abs((up - down) / 2e-5 - gb(k)) / (1 + std::abs(gb(k))));
        }
        CHECK(worst_b < 1e-7);
      }
    }
    if (o.sinks) CHECK(worst_fd(m, m.sink_logits(), m.sink_grad(), x, pos, w, r) < 1e-7);
  }
}

TEST_CASE("dsl decoder_attention: the forward is the unfused composition") {
  xattn::testing::rng r(62);
  dsl::decoder_attention_options o = dsl::gpt_oss_style();
  o.window = 4;
  layer m(o);
  m.sink_logits() = r.vector<double>(o.heads, -1, 1);
  const std::size_t S = 9, D = o.head_dim, G = o.heads / o.kv_heads;
  const xt::xtensor<double, 3> x = r.tensor<double>({1, S, o.dim});
  const xt::xtensor<std::int64_t, 1> pos = xt::arange<std::int64_t>(std::int64_t(S));
  const xt::xtensor<double, 3> y = m.forward(x, pos);
  // by hand: projections, rotated rows (the reference's rotation), windowed softmax with the sink, output
  const auto proj = [&](const xattn::nn::linear<double>& p) {
    xt::xtensor<double, 2> out = xt::xtensor<double, 2>::from_shape({S, p.out_features()});
    p.apply(x.data(), S, o.dim, out.data(), p.out_features());
    return out;
  };
  const auto q = proj(m.q_proj()), k = proj(m.k_proj()), v = proj(m.v_proj());
  const auto rotated = [&](const xt::xtensor<double, 2>& t, std::size_t h, std::size_t i) {
    xt::xtensor<double, 3> one = xt::view(t, xt::newaxis(), xt::all(), xt::all());
    return xattn::detail::operand_row<double>(xattn::rope(xattn::heads(one, t.shape()[1] / D), pos, o.rope), 0, h, i);
  };
  xt::xtensor<double, 2> att = xt::zeros<double>({S, o.heads * D});
  for (std::size_t h = 0; h < o.heads; ++h)
    for (std::size_t i = 0; i < S; ++i) {
      const auto qi = rotated(q, h, i);
      std::vector<double> p(S, 0.0);
      double l = std::exp(m.sink_logits()(h));
      for (std::size_t j = 0; j < S; ++j) {
        if (j > i || j + std::size_t(o.window) <= i) continue;
        const auto kj = rotated(k, h / G, j);
        double s = 0;
        for (std::size_t d = 0; d < D; ++d) s += qi[d] * kj[d];
        p[j] = std::exp(s / std::sqrt(double(D)));
        l += p[j];
      }
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t d = 0; d < D; ++d) att(i, h * D + d) += p[j] / l * v(j, (h / G) * D + d);
    }
  xt::xtensor<double, 2> want = xt::xtensor<double, 2>::from_shape({S, o.dim});
  m.o_proj().apply(att.data(), S, o.heads * D, want.data(), o.dim);
  CHECK(xt::amax(xt::abs(xt::view(y, 0) - want))() < 1e-12);
}
