#pragma once
// The page formats a kv_cache stores (cache/format.hpp says what a format is): float, bfloat16
// and float16 as they are, and the quantized formats, one file each.
#include "format.hpp"
#include "formats/float8_e4m3.hpp"
#include "formats/int8.hpp"
#include "formats/q4.hpp"
#include "formats/q4c.hpp"
