#pragma once
// A load transform: a linear map T(b, i) of row i of sequence b of Q or K (rotary embeddings are
// one), applied by the score path as it loads queries and packs keys, so no transformed copy of
// the operand is made; the gradients at the transformed rows go back through T(b, i)ᵀ. The score
// paths, the oracle, the size checks and explain read a transform only through this protocol, so
// a new one is one type: `transformed(X, t)` applies it (rope(X, ...) is transformed(X, rotary)).
#include <concepts>
#include <cstddef>
#include <string>

namespace xattn {

// clang-format off
/// What transformed(X, t) needs of t (S is float or double; rows hold n features):
///   check(batch, seq, d, who)       throws std::invalid_argument unless it fits `batch` sequences
///                                   of `seq` rows of d features (`who` names the operand)
///   row(x, xs, n, b, i, c, out)     out[0, n) = c · T(b, i) x, x's n features xs apart
///   row_transposed(g, gs, n, b, i)  g = T(b, i)ᵀ g in place, g's n features gs apart
///   name()                          explain's word
/// and, optionally, `template <class Acc> class table` built once per evaluation for the kernel:
/// table(t, batch, seq, d), build(t) (an orphaned `omp for`), and load and transpose as row and
/// row_transposed with t first. Without a table the kernel calls row and row_transposed.
template <class T>
concept load_transform = requires(const T& t, std::size_t n, const char* who, const double* x, double* y,
                                  const float* xf, float* yf) {
  t.check(n, n, n, who);
  t.row(x, std::ptrdiff_t(1), n, n, n, 1.0, y);
  t.row(xf, std::ptrdiff_t(1), n, n, n, 1.0f, yf);
  t.row_transposed(y, std::ptrdiff_t(1), n, n, n);
  t.row_transposed(yf, std::ptrdiff_t(1), n, n, n);
  { t.name() } -> std::convertible_to<std::string>;
};
// clang-format on

template <class T, class Acc>
concept has_transform_table = requires {
  typename T::template table<Acc>;
};

}  // namespace xattn
