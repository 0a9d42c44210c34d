#pragma once
// A Linear layer as equinox and PyTorch define it: weight (out, in), optional bias (out), both
// initialised uniform(±1/sqrt(in)); y = x Wᵀ + b on whole row blocks with one GEMM.
#include "gemm.hpp"
#include "seeding.hpp"

#include <xtensor/xtensor.hpp>

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
  }

  std::size_t in_features() const noexcept { return weight_.shape()[1]; }
  std::size_t out_features() const noexcept { return weight_.shape()[0]; }
  bool has_bias() const noexcept { return use_bias_; }
  const xt::xtensor<T, 2>& weight() const noexcept { return weight_; }
  /// Empty (shape (0)) when the layer has no bias.
  const xt::xtensor<T, 1>& bias() const noexcept { return bias_; }
  const std::string& name() const noexcept { return name_; }

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
};

}  // namespace xattn::nn
