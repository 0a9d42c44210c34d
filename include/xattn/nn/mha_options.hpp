#pragma once
// The options of equinox.nn.MultiheadAttention (plus kv_heads for grouped-query attention),
// written as C++20 designated initialisers in equinox's order:
//   multihead_attention mha({.num_heads = 4, .query_size = 64, .use_output_bias = true, .seed = 7});
// Unset optionals take equinox's defaults; mha_config is the resolved, checked set.
#include "../error.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace xattn::nn {

struct mha_options {
  std::size_t num_heads = 0;
  std::size_t query_size = 0;
  std::optional<std::size_t> key_size{};     // default query_size
  std::optional<std::size_t> value_size{};   // default query_size
  std::optional<std::size_t> output_size{};  // default query_size
  std::optional<std::size_t> qk_size{};      // per head; default query_size / num_heads
  std::optional<std::size_t> vo_size{};      // per head; default query_size / num_heads
  bool use_query_bias = false;
  bool use_key_bias = false;
  bool use_value_bias = false;
  bool use_output_bias = false;
  float dropout_p = 0.0f;
  bool inference = false;                 // true: dropout off whatever dropout_p says
  std::uint64_t seed = 0;                 // equinox's key=: parameter init, and the dropout calls
  std::optional<std::size_t> kv_heads{};  // not in equinox: key/value heads, num_heads % kv_heads == 0
};

struct mha_config {
  std::size_t num_heads, kv_heads, query_size, key_size, value_size, output_size, qk_size, vo_size;
  bool use_query_bias, use_key_bias, use_value_bias, use_output_bias;
  float dropout_p;
  bool inference;
  std::uint64_t seed;
};

/// Equinox's defaults filled in; every impossible combination throws std::invalid_argument.
inline mha_config resolve(const mha_options& o) {
  using xattn::fail;
  const char* who = "multihead_attention";
  if (o.num_heads == 0) fail(who, ": num_heads must be > 0");
  if (o.query_size == 0) fail(who, ": query_size must be > 0");
  if ((!o.qk_size || !o.vo_size) && o.query_size % o.num_heads != 0)
    fail(who, ": query_size (", o.query_size, ") is not divisible by num_heads (", o.num_heads, "), so the default ",
         !o.qk_size ? "qk_size" : "vo_size",
         " = query_size / num_heads is not whole; pass qk_size and vo_size explicitly");
  mha_config c{};
  c.num_heads = o.num_heads;
  c.kv_heads = o.kv_heads.value_or(o.num_heads);
  c.query_size = o.query_size;
  c.key_size = o.key_size.value_or(o.query_size);
  c.value_size = o.value_size.value_or(o.query_size);
  c.output_size = o.output_size.value_or(o.query_size);
  c.qk_size = o.qk_size.value_or(o.query_size / o.num_heads);
  c.vo_size = o.vo_size.value_or(o.query_size / o.num_heads);
  c.use_query_bias = o.use_query_bias;
  c.use_key_bias = o.use_key_bias;
  c.use_value_bias = o.use_value_bias;
  c.use_output_bias = o.use_output_bias;
  c.dropout_p = o.dropout_p;
  c.inference = o.inference;
  c.seed = o.seed;
  if (c.kv_heads == 0 || c.num_heads % c.kv_heads != 0)
    fail(who, ": num_heads (", c.num_heads, ") must be a multiple of kv_heads (", c.kv_heads,
         ") for grouped-query attention");
  if (c.key_size == 0 || c.value_size == 0 || c.output_size == 0 || c.qk_size == 0 || c.vo_size == 0)
    fail(who, ": key_size (", c.key_size, "), value_size (", c.value_size, "), output_size (", c.output_size,
         "), qk_size (", c.qk_size, ") and vo_size (", c.vo_size, ") must be > 0");
  if (!(c.dropout_p >= 0.0f && c.dropout_p < 1.0f)) fail(who, ": dropout_p must be in [0, 1), got ", c.dropout_p);
  return c;
}

}  // namespace xattn::nn
