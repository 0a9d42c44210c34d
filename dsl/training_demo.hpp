#pragma once
// The training part of `make demo`, written as a user would: (1) d2l's Nadaraya-Watson regression
// with a learnable Gaussian width, trained by SGD on g.dscore.d_sigma; (2) d2l's AdditiveAttention
// module learning which keys a query should read (a synthetic lookup task) by Adam on its three
// weight matrices; (3) a user modifier's learnable table, relative position biases, recovered
// from a teacher's outputs by SGD on g.dmodify. tests/dsl/test_training_demo.cpp checks all three.
#include "training_examples.hpp"

#include <xattn/nn/nn.hpp>
#include <xattn/xattn.hpp>

#include <xtensor/xrandom.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace dsl::training {

struct nadaraya_watson_run {
  std::vector<double> losses, sigmas;  // before each step
  double sigma = 0;                    // after the last step
};

/// d2l's setup: 50 training points x in [0, 5), y = 2 sin x + x^0.8 + N(0, 0.5); every training
/// point predicts itself from the others (its own key masked), the loss is 0.5·Σ(ŷ - y)².
inline nadaraya_watson_run fit_nadaraya_watson(double sigma, int steps, double lr, std::uint64_t seed = 0) {
  using namespace xattn;
  xt::random::seed(seed);
  const std::size_t n = 50;
  xt::xtensor<double, 3> x = xt::xtensor<double, 3>::from_shape({1, n, 1}), y = x;
  xt::xtensor<double, 1> xs = xt::sort(xt::eval(xt::random::rand<double>({n}) * 5.0));
  const xt::xtensor<double, 1> noise = xt::random::randn<double>({n}, 0.0, 0.5);
  for (std::size_t i = 0; i < n; ++i) {
    x(0, i, 0) = xs(i);
    y(0, i, 0) = 2 * std::sin(xs(i)) + std::pow(xs(i), 0.8) + noise(i);
  }
  nadaraya_watson_run run;
  // [snippet learn_sigma]
  const auto not_self = predicate([](std::size_t, std::size_t, std::size_t i, std::size_t j) { return i != j; });
  for (int step = 0; step < steps; ++step) {
    const auto e = softmax(mask(score(gaussian{sigma}, ref(x), ref(x)), not_self)) * ref(y);
    const auto f = eval_with_lse(e);
    const xt::xtensor<double, 3> d_out = f.output - y;  // d loss / d prediction
    run.losses.push_back(0.5 * xt::sum(d_out * d_out)());
    run.sigmas.push_back(sigma);
    const auto g = grad(e, f, d_out);
    sigma -= lr * g.dscore.d_sigma;  // SGD on the kernel width
  }
  // [end learn_sigma]
  run.sigma = sigma;
  return run;
}

/// A lookup task for additive attention: each query names one of 4 types (one-hot, size 4); each
/// of 12 keys has a type (one-hot plus noise, size 6: queries and keys of different sizes) and a
/// value; the target is the mean value of the valid keys of the query's type (valid lengths 8-12).
struct lookup_batch {
  xt::xtensor<float, 3> queries, keys, values, targets;  // (B, 4, 4), (B, 12, 6), (B, 12, 1), (B, 4, 1)
  xt::xtensor<int, 1> lens;                              // (B)
};

inline lookup_batch make_lookup_batch(std::size_t batch, bool sorted_types = false) {
  const std::size_t types = 4, sq = 4, skv = 12;
  lookup_batch lb;
  lb.queries = xt::zeros<float>({batch, sq, types});
  lb.keys = xt::random::randn<float>({batch, skv, std::size_t(6)}, 0.0f, 0.1f);
  lb.values = xt::random::randn<float>({batch, skv, std::size_t(1)});
  lb.targets = xt::zeros<float>({batch, sq, std::size_t(1)});
  lb.lens = xt::random::randint<int>({batch}, 8, 13);
  for (std::size_t b = 0; b < batch; ++b) {
    // key j has type tp(j mod 4) for a random relabelling tp (the first 8 keys hold every type
    // twice); sorted: types 0 0 0 1 1 1 ... and all 12 keys valid (for the heatmap)
    const auto tp = xt::random::permutation<std::size_t>(types);
    auto type_of = [&](std::size_t j) { return sorted_types ? j / 3 : tp(j % types); };
    if (sorted_types) lb.lens(b) = int(skv);
    for (std::size_t j = 0; j < skv; ++j) lb.keys(b, j, type_of(j)) += 1.0f;
    for (std::size_t i = 0; i < sq; ++i) {
      lb.queries(b, i, i) = 1.0f;  // query i asks for type i
      float sum = 0;
      int count = 0;
      for (std::size_t j = 0; j < std::size_t(lb.lens(b)); ++j)
        if (type_of(j) == i) sum += lb.values(b, j, 0), ++count;
      lb.targets(b, i, 0) = sum / float(count);
    }
  }
  return lb;
}

struct additive_run {
  std::vector<double> losses;     // mean 0.5·(ŷ - t)² before each step
  xt::xtensor<float, 3> weights;  // the trained model's attention weights on a sorted example (1, 4, 12)
};

/// d2l's AdditiveAttention (8 hiddens) trained by Adam on fresh batches of the lookup task.
inline additive_run fit_additive_lookup(int steps, float lr, std::uint64_t seed = 0) {
  using namespace xattn;
  xt::random::seed(seed);
  additive_run run;
  nn::additive_attention<float> model(/*key_size*/ 6, /*query_size*/ 4, /*num_hiddens*/ 8, /*dropout*/ 0.0f, seed);
  // Adam's moments for W_q, W_k, w_v
  std::vector<xt::xtensor<float, 2>> m, v;
  for (const auto* layer : {&model.w_q(), &model.w_k(), &model.w_v()}) {
    m.push_back(xt::zeros_like(layer->weight()));
    v.push_back(xt::zeros_like(layer->weight()));
  }
  const float b1 = 0.9f, b2 = 0.999f;
  for (int step = 1; step <= steps; ++step) {
    const lookup_batch lb = make_lookup_batch(32);
    // [snippet adam_step]
    model.zero_grad();
    const auto y = model.forward(lb.queries, lb.keys, lb.values, lb.lens, /*training=*/true);
    const xt::xtensor<float, 3> d_out = (y - lb.targets) / float(y.size());  // d mean(0.5·(y - t)²) / dy
    run.losses.push_back(0.5 * xt::sum((y - lb.targets) * (y - lb.targets))() / double(y.size()));
    model.backward(d_out);  // adds dW_q, dW_k, dw_v to the layers' weight_grad()
    std::vector<xt::xtensor<float, 2>> w;
    std::size_t n = 0;
    for (const auto* layer : {&model.w_q(), &model.w_k(), &model.w_v()}) {
      const auto& g = layer->weight_grad();
      m[n] = b1 * m[n] + (1 - b1) * g;
      v[n] = b2 * v[n] + (1 - b2) * g * g;
      const float c1 = 1 - std::pow(b1, float(step)), c2 = 1 - std::pow(b2, float(step));
      w.push_back(layer->weight() - lr * (m[n] / c1) / (xt::sqrt(v[n] / c2) + 1e-8f));
      ++n;
    }
    model.set_weights(w[0], w[1], w[2]);
    // [end adam_step]
  }
  const lookup_batch show = make_lookup_batch(1, /*sorted_types=*/true);
  model.keep_weights(true);
  model.forward(show.queries, show.keys, show.values, show.lens);
  run.weights = model.last_weights();
  return run;
}

struct relative_bias_run {
  std::vector<double> losses;            // before each step
  std::vector<double> teacher, learned;  // per head, buckets j - i = -R..0, relative to j = i
};

/// Causal attention (2 heads, 24 tokens) whose scores get a teacher's relative position biases:
/// head 0 favours the previous token, head 1 the distant past. A student table starting at zero
/// learns it from the outputs alone by SGD (fit_relative_bias, training_examples.hpp).
inline relative_bias_run fit_relative_bias_demo(int steps, double lr, std::uint64_t seed = 0) {
  using namespace xattn;
  constexpr std::size_t H = 2, S = 24, R = 4, W = 2 * R + 1;
  xt::random::seed(seed);
  const xt::xtensor<float, 4> q = xt::random::rand<float>({std::size_t(4), H, S, std::size_t(16)}, -1, 1),
                              k = xt::random::rand<float>({std::size_t(4), H, S, std::size_t(16)}, -1, 1),
                              v = xt::random::rand<float>({std::size_t(4), H, S, std::size_t(8)}, -2, 2);
  const double favour[H][R + 1] = {{0, 0, 0, 2.5, 0}, {2.0, 1.0, 0, 0, 0}};  // buckets j - i = -4..0
  dsl::relative_bias teacher{{}, std::int64_t(R)}, student{{}, std::int64_t(R)};
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t b = 0; b < W; ++b) {
      teacher.table.push_back(b <= R ? favour[h][b] : 0.0);  // buckets after the query are hidden
      student.table.push_back(0.0);
    }
  const xt::xtensor<float, 4> target =
      eval(softmax(mask(modify(ref(q) * trans(ref(k)) / 4.0f, teacher), causal())) * ref(v));
  relative_bias_run run;
  run.losses = fit_relative_bias(student, q, k, v, target, steps, lr);
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t b = 0; b <= R; ++b) {
      run.teacher.push_back(teacher.table[h * W + b].value - teacher.table[h * W + R].value);
      run.learned.push_back(student.table[h * W + b].value - student.table[h * W + R].value);
    }
  return run;
}

}  // namespace dsl::training
