// Build cost: one translation unit with five different pipelines. bench/run.sh times compiling it
// at -O2 (target: under 10 s) and reports the number with the benchmark table.
#include <xattn/xattn.hpp>

using namespace xattn;

xt::xtensor<float, 3> dot_lengths(const xt::xtensor<float, 3>& q, const xt::xtensor<float, 3>& k,
                                  const xt::xtensor<float, 3>& v, const xt::xtensor<int, 1>& lens) {
  auto Q = ref(q), K = ref(k), V = ref(v);
  return eval(softmax(mask(Q * trans(K) / 8.0f, lengths(lens))) * V);
}

xt::xtensor<float, 3> additive_scores(const xt::xtensor<float, 3>& q, const xt::xtensor<float, 3>& k,
                                      const xt::xtensor<float, 3>& v, const additive& a) {
  auto Q = ref(q), K = ref(k), V = ref(v);
  return eval(softmax(score(a, Q, K)) * V);
}

xt::xtensor<float, 4> causal_alibi_softcap(const xt::xtensor<float, 4>& q, const xt::xtensor<float, 4>& k,
                                           const xt::xtensor<float, 4>& v, std::vector<double> slopes) {
  auto Q = ref(q), K = ref(k), V = ref(v);
  return eval(softmax(mask(softcap(alibi(Q * trans(K), std::move(slopes)), 30.0), causal())) * V);
}

xt::xtensor<float, 4> bilinear_window(const xt::xtensor<float, 4>& q, const xt::xtensor<float, 4>& k,
                                      const xt::xtensor<float, 4>& v, const bilinear& w) {
  auto Q = ref(q), K = ref(k), V = ref(v);
  return eval(softmax(mask(score(w, Q, K), window(64, 0))) * V);
}

xt::xtensor<float, 3> gaussian_bool_mask(const xt::xtensor<float, 3>& q, const xt::xtensor<float, 3>& k,
                                         const xt::xtensor<float, 3>& v, const xt::xtensor<bool, 2>& m) {
  auto Q = ref(q), K = ref(k), V = ref(v);
  return eval(softmax(mask(score(gaussian{1.0}, Q, K), bool_mask(m))) * V);
}
