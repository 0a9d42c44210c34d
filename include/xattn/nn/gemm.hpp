#pragma once
// The dense products the modules need: Y (m, n) = X (m, k) · Wᵀ, with W stored (n, k) as PyTorch
// and equinox store Linear weights (forward), and for the backward dX = dY · W and dW += dYᵀ · X.
// OpenBLAS does them through CBLAS; linking: BLAS::BLAS (target xattn::nn). Rows may be padded
// (leading dimensions); nothing is copied.
#include "../error.hpp"

#include <cblas.h>

#include <climits>
#include <cstddef>
#include <type_traits>

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

/// C (m, n) = op(A) · op(B) + beta · C, row-major, op = transpose where asked (float or double).
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  using detail::blas_int;
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const int M = blas_int(m, "rows"), N = blas_int(n, "columns"), K = blas_int(k, "inner size");
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, blas_int(lda, "lda"), b, blas_int(ldb, "ldb"), beta, c,
                blas_int(ldc, "ldc"));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a, blas_int(lda, "lda"), b, blas_int(ldb, "ldb"), beta, c,
                blas_int(ldc, "ldc"));
}

}  // namespace xattn::nn
