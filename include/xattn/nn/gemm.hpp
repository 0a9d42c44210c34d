#pragma once
// The one dense product the modules need: Y (m, n) = X (m, k) · Wᵀ, with W stored (n, k) as
// PyTorch and equinox store Linear weights. OpenBLAS does it through CBLAS; linking: BLAS::BLAS
// (target xattn::nn). Rows may be padded (leading dimensions); nothing is copied.
#include "../error.hpp"

#include <cblas.h>

#include <climits>
#include <cstddef>

namespace xattn::nn {

namespace detail {

inline int blas_int(std::size_t n, const char* what) {
  if (n > std::size_t(INT_MAX)) xattn::fail("nn: ", what, " = ", n, " exceeds the BLAS index range");
  return int(n);
}

}  // namespace detail

/// y[i * ldy + j] = sum_c x[i * ldx + c] * w[j * ldw + c], for i < m, j < n.
inline void gemm_nt(std::size_t m, std::size_t n, std::size_t k, const float* x, std::size_t ldx, const float* w,
                    std::size_t ldw, float* y, std::size_t ldy) {
  if (m == 0 || n == 0) return;
  using detail::blas_int;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(m, "rows"), blas_int(n, "outputs"),
              blas_int(k, "inputs"), 1.0f, x, blas_int(ldx, "ldx"), w, blas_int(ldw, "ldw"), 0.0f, y,
              blas_int(ldy, "ldy"));
}

inline void gemm_nt(std::size_t m, std::size_t n, std::size_t k, const double* x, std::size_t ldx, const double* w,
                    std::size_t ldw, double* y, std::size_t ldy) {
  if (m == 0 || n == 0) return;
  using detail::blas_int;
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(m, "rows"), blas_int(n, "outputs"),
              blas_int(k, "inputs"), 1.0, x, blas_int(ldx, "ldx"), w, blas_int(ldw, "ldw"), 0.0, y,
              blas_int(ldy, "ldy"));
}

}  // namespace xattn::nn
