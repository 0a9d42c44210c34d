#pragma once
// xattn: attention as a lazy expression, evaluated in one fused, tiled, SIMD, multithreaded pass.
//   auto e = softmax(mask(Q * trans(K) / std::sqrt(float(d)), lengths(lens))) * V;
//   auto out = eval(e);
#include "eval/entry/eval.hpp"
#include "eval/entry/explain.hpp"
#include "eval/entry/grad.hpp"
#include "eval/entry/key_mass.hpp"
#include "eval/oracle/reference.hpp"  // xattn::reference(e): the one header outside the oracle that includes it
#include "expr/operators.hpp"
#include "expr/tensor_ref.hpp"
#include "policy/additive.hpp"
#include "policy/bilinear.hpp"
#include "policy/cosine.hpp"
#include "policy/dot.hpp"
#include "policy/gaussian.hpp"
#include "policy/masks/block_mask.hpp"
#include "policy/masks/bool_mask.hpp"
#include "policy/masks/causal.hpp"
#include "policy/masks/documents.hpp"
#include "policy/masks/lengths.hpp"
#include "policy/masks/maybe.hpp"
#include "policy/masks/predicate.hpp"
#include "policy/masks/tree.hpp"
#include "policy/masks/window.hpp"
#include "schedule.hpp"
#include "select.hpp"
