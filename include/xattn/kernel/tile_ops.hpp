#pragma once
// The tile operations the fused kernel is built from, each small and tested alone
// (tests/kernel/test_tile_ops.cpp). Tiles are row-major with explicit leading dimensions; key-axis
// tiles are padded to whole SIMD batches.
#include "backward.hpp"
#include "merge.hpp"
#include "pack.hpp"
#include "pv.hpp"
#include "qk.hpp"
#include "qk_q4.hpp"
#include "qk_q8.hpp"
#include "rows.hpp"
