#pragma once
// The page formats a kv_cache stores (cache/format.hpp says what a format is): float, bfloat16
// and float16 as they are, and the quantized formats, one file each.
#include "format.hpp"
#include "formats/int8.hpp"
