#pragma once
// A Linear layer as equinox and PyTorch define it: weight (out, in), optional bias (out), both
// initialised uniform(±1/sqrt(in)); y = x Wᵀ + b on whole row blocks with one GEMM. Gradients
// accumulate (as PyTorch's .grad does) until zero_grad().
#include "gemm.hpp"
#include "seeding.hpp"

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace xattn::nn {

template <class T>
class linear {
 public:
  linear() = default;
  /// `name` (e.g. "multihead_attention.query_proj") prefixes every error about this layer.
  linear(std::size_t in, std::size_t out, bool use_bias, std::uint64_t seed, std::uint32_t stream, std::string name)
      : name_(std::move(name)), use_bias_(use_bias) {
    weight_ = xt::xtensor<T, 2>::from_shape({out, in});
    bias_ = xt::xtensor<T, 1>::from_shape({use_bias ? out : 0});
    const double bound = 1 / std::sqrt(double(in));
    uniform_init(weight_.data(), weight_.size(), bound, seed, 2 * stream);
    uniform_init(bias_.data(), bias_.size(), bound, seed, 2 * stream + 1);
    zero_grad();
  }

  std::size_t in_features() const noexcept { return weight_.shape()[1]; }
  std::size_t out_features() const noexcept { return weight_.shape()[0]; }
  bool has_bias() const noexcept { return use_bias_; }
  const xt::xtensor<T, 2>& weight() const noexcept { return weight_; }
  /// Empty (shape (0)) when the layer has no bias.
  const xt::xtensor<T, 1>& bias() const noexcept { return bias_; }
  const std::string& name() const noexcept { return name_; }
  /// dL/dW and dL/db summed over every backward since the last zero_grad(), in W's and b's shapes.
  const xt::xtensor<T, 2>& weight_grad() const noexcept { return weight_grad_; }
  const xt::xtensor<T, 1>& bias_grad() const noexcept { return bias_grad_; }
  void zero_grad() {
    weight_grad_ = xt::zeros<T>(weight_.shape());
    bias_grad_ = xt::zeros<T>(bias_.shape());
  }
  /// Adds a backward's gradients (dw in W's shape; db in b's, or empty).
  template <class DW, class DB = xt::xtensor<T, 1>>
  void accumulate_grad(const DW& dw, const DB& db = {}) {
    if (dw.size() != weight_grad_.size() || (db.size() && db.size() != bias_grad_.size()))
      xattn::fail(name_, ".accumulate_grad: gradients of shapes ", xattn::shape_str(dw.shape()), " and ",
                  xattn::shape_str(db.shape()), " for a layer of weight ", xattn::shape_str(weight_.shape()));
    std::transform(weight_grad_.begin(), weight_grad_.end(), dw.begin(), weight_grad_.begin(),
                   [](T a, auto b) { return T(a + b); });
    if (db.size())
      std::transform(bias_grad_.begin(), bias_grad_.end(), db.begin(), bias_grad_.begin(),
                     [](T a, auto b) { return T(a + b); });
  }

  template <class E>
  void set_weight(const E& w) {
    if (w.dimension() != 2 || w.shape()[0] != out_features() || w.shape()[1] != in_features())
      xattn::fail(name_, ".set_weight: weight has shape ", xattn::shape_str(w.shape()), " but must be (",
                  out_features(), ",", in_features(), ") [out, in]");
    weight_ = w;
  }

  template <class E>
  void set_bias(const E& b) {
    if (!use_bias_)
      xattn::fail(name_, ".set_bias: this layer was built without a bias (its use_*_bias option is false)");
    if (b.dimension() != 1 || b.shape()[0] != out_features())
      xattn::fail(name_, ".set_bias: bias has shape ", xattn::shape_str(b.shape()), " but must be (", out_features(),
                  ") [out]");
    bias_ = b;
  }

  /// The backward of apply over `rows` rows: dW += dyᵀ·x, db += Σ_r dy[r], and dx = dy·W (when
  /// dx is not null; dx rows are in_features() apart).
  void backward(const T* x, std::size_t rows, std::size_t ldx, const T* dy, std::size_t ldy, T* dx) {
    gemm<T>(true, false, out_features(), in_features(), rows, dy, ldy, x, ldx, T(1), weight_grad_.data(),
            in_features());
    if (use_bias_)
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t o = 0; o < out_features(); ++o) bias_grad_(o) += dy[r * ldy + o];
    if (dx)
      gemm<T>(false, false, rows, in_features(), out_features(), dy, ldy, weight_.data(), in_features(), T(0), dx,
              in_features());
  }

  /// y[r * ldy + o] = sum_c x[r * ldx + c] * W[o, c] + b[o], for r < rows.
  void apply(const T* x, std::size_t rows, std::size_t ldx, T* y, std::size_t ldy) const {
    gemm_nt(rows, out_features(), in_features(), x, ldx, weight_.data(), in_features(), y, ldy);
    if (!use_bias_) return;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < out_features(); ++o) y[r * ldy + o] += bias_(o);
  }

 private:
  std::string name_;
  bool use_bias_ = false;
  xt::xtensor<T, 2> weight_;
  xt::xtensor<T, 1> bias_;
  xt::xtensor<T, 2> weight_grad_;
  xt::xtensor<T, 1> bias_grad_;
};

}  // namespace xattn::nn
