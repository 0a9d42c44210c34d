#pragma once
// A paged key/value cache for decoding and serving (vLLM's PagedAttention layout): each sequence
// is a list of pages of page_size tokens; a page holds every head's rows of its tokens. Pages come
// from one pool, are shared between forks by reference count, and never move once written, so
// appending to one sequence leaves every other (and every stored row) in place. Keys quantized per
// channel over a page (q4c) are the exception within their own sequence: the cache keeps the float
// rows of each sequence's partial page and quantizes that page again as rows arrive.
#include "../kernel/hadamard.hpp"
#include "../kernel/rows.hpp"
#include "cache_ref.hpp"
#include "options.hpp"
#include "page_format.hpp"
#include "page_pool.hpp"
#include "row_source.hpp"

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace xattn {

template <class KT, class VT = KT>
class kv_cache {
  static_assert(is_cache_element_v<KT> && is_cache_element_v<VT>,
                "xattn: kv_cache<K, V> elements are the page formats listed in xattn/cache/formats.hpp");
  static_assert(!per_channel_v<VT>,
                "xattn: kv_cache<K, V>: V quantized per channel; store keys per channel (q4c) and values per token "
                "(q4, int8), as KIVI does");
  static constexpr bool per_channel_keys = per_channel_v<KT>;

 public:
  using key_type = KT;
  using value_type = VT;

  explicit kv_cache(const kv_cache_options& o)
      : opt_((detail::check_cache_options(o), o)),
        kf_{o.head_dim, o.page_size, true},
        vf_{o.head_dim, o.page_size},
        pool_(o.kv_heads * (kf_.head_bytes() + vf_.head_bytes()), (o.max_tokens + o.page_size - 1) / o.page_size) {
    pool_.reserve_free();
    if (o.rope) inv_freq_ = rotary{{}, 0, *o.rope}.inverse_frequencies(o.head_dim);
  }

  const kv_cache_options& options() const noexcept { return opt_; }
  std::size_t free_pages() const noexcept { return pool_.free_pages(); }
  std::size_t max_pages() const noexcept { return pool_.max_pages(); }

  /// Allocates the pool's memory for `tokens` tokens of pages now (a server's startup, as vLLM's):
  /// otherwise the pool grows in 64 MiB slabs as pages are first used, and the first touch of a
  /// slab's memory (its page faults) falls in the append that needs it.
  void reserve(std::size_t tokens) {
    const std::size_t pages = (tokens + opt_.page_size - 1) / opt_.page_size;
    if (pages > pool_.max_pages())
      fail("kv_cache.reserve: ", tokens, " tokens need ", pages, " pages but the pool holds ", pool_.max_pages(),
           " (max_tokens ", opt_.max_tokens, ", page_size ", opt_.page_size, ")");
    pool_.reserve(pages);
  }

  /// A new, empty sequence.
  sequence_id add_sequence() {
    const sequence_id id = new_slot();
    slots_[id.slot].live = true;
    return id;
  }

  /// A sequence holding a's tokens, sharing its pages (a prefix shared between continuations or
  /// beams); whichever of them appends first into the shared partial page copies it.
  sequence_id fork(sequence_id a) {
    check(a, "kv_cache.fork");
    auto pages = slots_[a.slot].pages;  // copied before a new slot may move slots_
    auto shadow = slots_[a.slot].shadow;
    const std::size_t len = slots_[a.slot].length;
    const sequence_id id = new_slot();
    slot& s = slots_[id.slot];
    s.pages = std::move(pages);
    s.shadow = std::move(shadow);
    s.length = len;
    s.live = true;
    for (const auto p : s.pages) pool_.retain(p);
    return id;
  }

  /// Its pages go back to the pool (those no fork still holds); the id is invalid from now on.
  void release(sequence_id a) {
    check(a, "kv_cache.release");
    slot& s = slots_[a.slot];
    for (const auto p : s.pages) pool_.release(p);
    s = slot{{}, 0, s.generation + 1, false, {}};
    free_slots_.push_back(a.slot);
  }

  std::size_t length(sequence_id a) const {
    check(a, "kv_cache.length");
    return slots_[a.slot].length;
  }

  /// Keeps a's first `length` tokens (speculative decoding's rollback of rejected draft tokens):
  /// the pages past them go back to the pool, those a fork still holds stay with it, and a shared
  /// page that keeps some of a's tokens is copied by a's next append (copy on write, as after
  /// fork). A length beyond a's throws and changes nothing. Like release, it ends the use of a
  /// keys()/values() snapshot of a: the next append may overwrite rows that snapshot reads. Keys
  /// quantized per channel that end in a page already quantized whole continue from their stored
  /// values: that page's next quantization takes them as they decode.
  void truncate(sequence_id a, std::size_t length) {
    check(a, "kv_cache.truncate");
    slot& s = slots_[a.slot];
    if (length > s.length)
      fail("kv_cache.truncate: length ", length, " is beyond the sequence's ", s.length, " tokens");
    const std::size_t ps = opt_.page_size, keep = (length + ps - 1) / ps;
    if constexpr (per_channel_keys)
      if (length % ps != 0 && (s.length % ps == 0 || s.length / ps != length / ps)) {  // no float rows of that page
        s.shadow.resize(shadow_size());  // the only allocation, before anything changes
        for (std::size_t h = 0; h < opt_.kv_heads; ++h)
          for (std::size_t r = 0; r < length % ps; ++r)
            for (std::size_t d = 0; d < opt_.head_dim; ++d)
              s.shadow[(h * ps + r) * opt_.head_dim + d] = key_page(s.pages[length / ps], h).at(r, d);
      }
    for (std::size_t p = keep; p < s.pages.size(); ++p) pool_.release(s.pages[p]);
    s.pages.resize(keep);
    s.length = length;
  }

  /// Keeps only a's tokens at `positions` (sorted, each below a's length), in that order: token
  /// positions[i] becomes token i (eviction: H2O's heavy hitters, StreamingLLM's sinks and window).
  /// Rows move within a's own pages, as stored (no requantization; keys quantized per channel are
  /// quantized again in each page a row moves into, from their stored values); a page a fork
  /// shares is copied before it is written, and the pages past the new length go back to the pool
  /// unless a fork holds them. Bad positions, a full pool, or a cache that stores its keys rotated
  /// (.rope: a kept key would stay turned to its old position) throw and change nothing. Like
  /// truncate, it ends the use of a keys()/values() snapshot of a.
  void keep(sequence_id a, const std::vector<std::size_t>& positions) {
    const char* who = "kv_cache.keep";
    check(a, who);
    slot& s = slots_[a.slot];
    if (opt_.rope)
      fail(who,
           ": the cache stores its keys rotated at their positions (.rope), which keep would move; construct it "
           "without .rope and turn keys and queries with rope() at the positions you keep");
    for (std::size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] >= s.length)
        fail(who, ": positions[", i, "] = ", positions[i], " is not below the sequence's ", s.length, " tokens");
      if (i > 0 && positions[i] <= positions[i - 1])
        fail(who, ": positions must increase: positions[", i - 1, "] = ", positions[i - 1], ", positions[", i,
             "] = ", positions[i]);
    }
    const std::size_t ps = opt_.page_size, n = positions.size(), kept_pages = (n + ps - 1) / ps;
    // the kept pages a fork shares and that a moved row would write: copied first (the only allocation)
    std::vector<std::size_t> shared;
    for (std::size_t p = 0; p < kept_pages; ++p) {
      bool moves = false;
      for (std::size_t i = p * ps; i < std::min(n, (p + 1) * ps) && !moves; ++i) moves = positions[i] != i;
      if (moves && pool_.refs(s.pages[p]) > 1) shared.push_back(p);
    }
    std::vector<float> rows(per_channel_keys ? shadow_size() : 0);  // a page's kept keys, as floats
    auto got = pool_.acquire(shared.size(), who);                   // the last call that can fail
    for (std::size_t c = 0; c < shared.size(); ++c) {
      const std::uint32_t old = s.pages[shared[c]], mine = got[c];
      for (std::size_t h = 0; h < opt_.kv_heads; ++h) {
        std::memcpy(key_head(mine, h), key_head(old, h), kf_.head_bytes());
        std::memcpy(value_head(mine, h), value_head(old, h), vf_.head_bytes());
      }
      pool_.release(old);
      s.pages[shared[c]] = mine;
    }
    // forward, in place: positions[i] >= i, so no row is overwritten before it is read
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t from = positions[i];
      if (from == i) continue;
      const std::uint32_t src = s.pages[from / ps], dst = s.pages[i / ps];
      for (std::size_t h = 0; h < opt_.kv_heads; ++h) {
        if constexpr (!per_channel_keys) kf_.copy_row(key_head(dst, h), i % ps, key_head(src, h), from % ps);
        vf_.copy_row(value_head(dst, h), i % ps, value_head(src, h), from % ps);
      }
    }
    if constexpr (per_channel_keys) keep_keys(s, positions, rows);
    for (std::size_t p = kept_pages; p < s.pages.size(); ++p) pool_.release(s.pages[p]);
    s.pages.resize(kept_pages);
    s.length = n;
  }

  /// Appends n tokens: k_rows (kv_heads, n, head_dim) and v_rows likewise, converted (or
  /// quantized) as they are written. On any error nothing changes.
  template <class KR, class VR>
  void append(sequence_id a, const KR& k_rows, const VR& v_rows) {
    const char* who = "kv_cache.append";
    check(a, who);
    const auto k = detail::rows_to_append(k_rows, "kv_cache.append: k_rows");
    const auto v = detail::rows_to_append(v_rows, "kv_cache.append: v_rows");
    check_rows(k.view.at.shape, "k_rows");
    check_rows(v.view.at.shape, "v_rows");
    const std::size_t n = k.view.at.shape[1];
    if (v.view.at.shape[1] != n)
      fail(who, ": k_rows ", shape_str(k.view.at.shape), " and v_rows ", shape_str(v.view.at.shape),
           " hold different numbers of tokens");
    if constexpr (page_format<KT>::quantized) check_finite<KT>(k.view, "k_rows");
    if constexpr (page_format<VT>::quantized) check_finite<VT>(v.view, "v_rows");
    if (n == 0) return;

    slot& s = slots_[a.slot];
    if constexpr (per_channel_keys) s.shadow.resize(shadow_size());  // allocated before anything changes
    const std::size_t ps = opt_.page_size, used = s.length % ps, room = used ? ps - used : 0;
    const bool copy_last = used && pool_.refs(s.pages.back()) > 1;
    const std::size_t fresh = n > room ? (n - room + ps - 1) / ps : 0;
    s.pages.reserve(s.pages.size() + fresh);
    rotation turn(opt_, inv_freq_);
    auto got = pool_.acquire(fresh + (copy_last ? 1 : 0), who);  // the last call that can fail
    if (copy_last) {  // copy on write: the partial page is shared with a fork
      const std::uint32_t mine = got.back();
      got.pop_back();
      for (std::size_t h = 0; h < opt_.kv_heads; ++h) {
        std::memcpy(key_head(mine, h), key_head(s.pages.back(), h), kf_.head_bytes());
        std::memcpy(value_head(mine, h), value_head(s.pages.back(), h), vf_.head_bytes());
      }
      pool_.release(s.pages.back());
      s.pages.back() = mine;
    }
    s.pages.insert(s.pages.end(), got.begin(), got.end());
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t pos = s.length + t;
      const std::uint32_t page = s.pages[pos / ps];
      turn.at(pos);
      for (std::size_t h = 0; h < opt_.kv_heads; ++h) {
        if constexpr (per_channel_keys) {  // into the page's float rows; the page is quantized below
          float* row = &s.shadow[(h * ps + pos % ps) * opt_.head_dim];
          if (turn.turns())
            std::copy_n(turn.row(k.view.data + k.view.at(h, t, 0), k.view.inner_stride()), opt_.head_dim, row);
          else
            kernel::scaled_copy(k.view.data + k.view.at(h, t, 0), k.view.inner_stride(), opt_.head_dim, 1.0f, row, 1);
        } else if (turn.turns()) {
          kf_.write(key_head(page, h), pos % ps, turn.row(k.view.data + k.view.at(h, t, 0), k.view.inner_stride()), 1);
        } else {
          kf_.write(key_head(page, h), pos % ps, k.view.data + k.view.at(h, t, 0), k.view.inner_stride());
        }
        vf_.write(value_head(page, h), pos % ps, v.view.data + v.view.at(h, t, 0), v.view.inner_stride());
      }
      if constexpr (per_channel_keys)
        if (pos % ps == ps - 1 || t + 1 == n)  // the page is full, or holds the sequence's last row
          for (std::size_t h = 0; h < opt_.kv_heads; ++h)
            kf_.write_page(key_head(page, h), &s.shadow[h * ps * opt_.head_dim], pos % ps + 1);
    }
    s.length += n;
  }

  /// The pages of a sequence, in token order (the last may be partly filled).
  const std::vector<std::uint32_t>& pages(sequence_id a) const {
    check(a, "kv_cache.pages");
    return slots_[a.slot].pages;
  }
  /// Head h's key (value) rows in page p.
  page_rows<KT> key_page(std::uint32_t p, std::size_t h) const noexcept { return kf_.view(key_head(p, h)); }
  page_rows<VT> value_page(std::uint32_t p, std::size_t h) const noexcept { return vf_.view(value_head(p, h)); }

  /// The sequences of `batch` as the keys (values) of an attention expression: (B, kv_heads, the
  /// longest length, head_dim), read from the pages in place; each batch row's keys end at its
  /// sequence's length. A snapshot: later appends are not seen (except in keys quantized per
  /// channel, whose partial page an append quantizes again), and it must not outlive a release of
  /// its sequences (their pages may then hold another sequence's tokens).
  cache_ref<KT> keys(const std::vector<sequence_id>& batch) const { return terminal<KT>(batch, true); }
  cache_ref<VT> values(const std::vector<sequence_id>& batch) const { return terminal<VT>(batch, false); }

  /// The positions of each sequence's newest n tokens, (B, n): length - n + i. For rope() of the
  /// queries that attend a batch of sequences (each at its own positions).
  xt::xtensor<std::int64_t, 2> positions(const std::vector<sequence_id>& batch, std::size_t n) const {
    xt::xtensor<std::int64_t, 2> pos = xt::xtensor<std::int64_t, 2>::from_shape({batch.size(), n});
    for (std::size_t b = 0; b < batch.size(); ++b) {
      const std::size_t len = length_in(batch[b], "kv_cache.positions");
      if (n > len)
        fail("kv_cache.positions: sequence ", b, " of the batch holds ", len, " tokens, fewer than the ", n,
             " asked for");
      for (std::size_t i = 0; i < n; ++i) pos(b, i) = std::int64_t(len - n + i);
    }
    return pos;
  }

  /// A sequence's keys (values) as stored, dequantized to float: (kv_heads, length, head_dim); keys
  /// turned back from their Hadamard rotation (options.rotate), not from their rope.
  xt::xtensor<float, 3> stored_keys(sequence_id a) const { return gather(a, true); }
  xt::xtensor<float, 3> stored_values(sequence_id a) const { return gather(a, false); }

 private:
  /// Key rows turned by their rotary embedding at a position (options.rope), with the functions
  /// rope() uses: the same float angles, and rows rotated in float before they are stored; then by
  /// the Hadamard rotation (options.rotate).
  struct rotation {
    const kv_cache_options& opt;
    const std::vector<float>& inv;
    std::vector<float> cos, sin, out;
    rotation(const kv_cache_options& o, const std::vector<float>& inv_freq)
        : opt(o), inv(inv_freq), cos(inv_freq.size()), sin(inv_freq.size()), out(turns() ? o.head_dim : 0) {}
    bool turns() const noexcept { return opt.rope || opt.rotate; }
    void at(std::size_t pos) noexcept {
      if (opt.rope) kernel::rope_angles(std::int64_t(pos), inv.data(), inv.size(), cos.data(), sin.data());
    }
    template <class X>
    const float* row(const X* x, std::ptrdiff_t xs) noexcept {
      if (opt.rope)
        kernel::rope_row(x, xs, opt.head_dim, 2 * inv.size(), opt.rope->style, cos.data(), sin.data(), 1.0f,
                         out.data());
      else
        kernel::scaled_copy(x, xs, opt.head_dim, 1.0f, out.data(), 1);
      if (opt.rotate) kernel::hadamard_row(out.data(), opt.head_dim, kernel::hadamard_block(opt.head_dim));
      return out.data();
    }
  };

  struct slot {
    std::vector<std::uint32_t> pages;
    std::size_t length = 0;
    std::uint32_t generation = 0;
    bool live = false;
    std::vector<float> shadow;  // keys quantized per channel: the partial page's rows, (kv_heads, page_size, head_dim)
  };

  std::size_t shadow_size() const noexcept { return opt_.kv_heads * opt_.page_size * opt_.head_dim; }

  /// keep() for keys quantized per channel: each page a kept row moves into is quantized again
  /// from its kept rows' stored values (the partial page's from its float rows), and the new
  /// partial page's rows become the float rows. Rows of page p come from pages p and later
  /// (positions[i] >= i), so pages are rewritten in order, each gathered before it is written.
  void keep_keys(slot& s, const std::vector<std::size_t>& positions, std::vector<float>& rows) noexcept {
    const std::size_t ps = opt_.page_size, n = positions.size(), dim = opt_.head_dim;
    const bool partial = s.length % ps != 0;  // s.shadow holds the rows of page s.length / ps
    for (std::size_t p = 0; p * ps < n; ++p) {
      const std::size_t lo = p * ps, hi = std::min(n, lo + ps);
      bool moves = false;
      for (std::size_t i = lo; i < hi; ++i) moves = moves || positions[i] != i;
      const bool last = hi == n && n % ps != 0;
      if (!moves && !last) continue;
      for (std::size_t h = 0; h < opt_.kv_heads; ++h)
        for (std::size_t i = lo; i < hi; ++i) {
          const std::size_t from = positions[i];
          float* row = &rows[(h * ps + i - lo) * dim];
          if (partial && from / ps == s.length / ps)
            std::copy_n(&s.shadow[(h * ps + from % ps) * dim], dim, row);
          else
            for (std::size_t d = 0; d < dim; ++d) row[d] = key_page(s.pages[from / ps], h).at(from % ps, d);
        }
      if (moves)
        for (std::size_t h = 0; h < opt_.kv_heads; ++h)
          kf_.write_page(key_head(s.pages[p], h), &rows[h * ps * dim], hi - lo);
      if (last) s.shadow.swap(rows);
    }
  }

  std::size_t length_in(sequence_id a, const char* who) const {
    check(a, who);
    return slots_[a.slot].length;
  }

  template <class T>
  cache_ref<T> terminal(const std::vector<sequence_id>& batch, bool keys) const {
    const char* who = keys ? "kv_cache.keys" : "kv_cache.values";
    if (batch.empty()) fail(who, ": the batch holds no sequences");
    cache_ref<T> t;
    std::size_t longest = 0;
    const T* filler = nullptr;  // any stored page: the rows past a sequence's end point there (and are excluded)
    for (const auto a : batch) {
      t.lengths.push_back(length_in(a, who));
      longest = std::max(longest, t.lengths.back());
      if (!filler && t.lengths.back() > 0) filler = head_rows<T>(slots_[a.slot].pages[0], keys);
    }
    const std::size_t ps = opt_.page_size, per_row = std::max<std::size_t>(1, (longest + ps - 1) / ps),
                      head = keys ? kf_.head_bytes() : vf_.head_bytes();
    auto table = std::make_shared<std::vector<const T*>>(batch.size() * per_row, filler);
    for (std::size_t b = 0; b < batch.size(); ++b) {
      const auto& own = slots_[batch[b].slot].pages;
      for (std::size_t p = 0; p < own.size(); ++p) (*table)[b * per_row + p] = head_rows<T>(own[p], keys);
    }
    paged_view<T>& v = t.view;
    v.at = {{batch.size(), opt_.kv_heads, longest, opt_.head_dim}, {0, 0, std::ptrdiff_t(opt_.head_dim), 1}};
    v.pages = table->data();
    v.data = v.pages[0];
    v.per_row = per_row;
    v.idx = page_index(ps);
    const auto in = [&](const auto& f) { return page_rows_at<T>{f.layout(), std::ptrdiff_t(f.rows_bytes())}; };
    v.in = keys ? in(kf_) : in(vf_);
    v.head_stride = std::ptrdiff_t(pool_.part_stride(head) / sizeof(T));
    v.page_elements = ((opt_.kv_heads - 1) * pool_.part_stride(head) + head) / sizeof(T);
    t.owned = std::move(table);
    t.rotated = keys && opt_.rope;
    t.hadamard = keys && opt_.rotate ? kernel::hadamard_block(opt_.head_dim) : 0;
    return t;
  }

  /// Head 0's key (value) rows of page p.
  template <class T>
  const T* head_rows(std::uint32_t p, bool keys) const noexcept {
    return reinterpret_cast<const T*>(keys ? key_head(p, 0) : value_head(p, 0));
  }

  // A page is kv_heads key parts then kv_heads value parts (page_pool::part).
  std::byte* key_head(std::uint32_t p, std::size_t h) noexcept {
    return pool_.part(p, h * kf_.head_bytes(), kf_.head_bytes());
  }
  const std::byte* key_head(std::uint32_t p, std::size_t h) const noexcept {
    return pool_.part(p, h * kf_.head_bytes(), kf_.head_bytes());
  }
  std::byte* value_head(std::uint32_t p, std::size_t h) noexcept {
    return pool_.part(p, opt_.kv_heads * kf_.head_bytes() + h * vf_.head_bytes(), vf_.head_bytes());
  }
  const std::byte* value_head(std::uint32_t p, std::size_t h) const noexcept {
    return pool_.part(p, opt_.kv_heads * kf_.head_bytes() + h * vf_.head_bytes(), vf_.head_bytes());
  }

  sequence_id new_slot() {
    if (free_slots_.empty()) {
      if (slots_.size() >= UINT32_MAX) fail("kv_cache.add_sequence: 2^32 - 1 sequences are live");
      slots_.emplace_back();
      free_slots_.reserve(slots_.capacity());  // so that release never allocates
      return {std::uint32_t(slots_.size() - 1), 0};
    }
    const std::uint32_t i = free_slots_.back();
    free_slots_.pop_back();
    return {i, slots_[i].generation};
  }

  void check(sequence_id a, const char* who) const {
    if (a.slot >= slots_.size() || !slots_[a.slot].live || slots_[a.slot].generation != a.generation)
      fail(who, ": sequence ", a.slot, " (generation ", a.generation, ") is not in this cache or was released");
  }

  void check_rows(const std::array<std::size_t, 3>& sh, const char* what) const {
    if (sh[0] != opt_.kv_heads || sh[2] != opt_.head_dim)
      fail("kv_cache.append: ", what, " has shape ", shape_str(sh), " but the cache holds (kv_heads, n, head_dim) = (",
           opt_.kv_heads, ", n, ", opt_.head_dim, ")");
  }

  /// Rows quantized to format F must be finite (a scale of inf or NaN would spoil their group).
  template <class F, class T>
  static void check_finite(const strided_view<const T, 3>& x, const char* what) {
    for (std::size_t h = 0; h < x.at.shape[0]; ++h)
      for (std::size_t t = 0; t < x.at.shape[1]; ++t)
        for (std::size_t d = 0; d < x.at.shape[2]; ++d)
          if (!std::isfinite(double(x(h, t, d))))
            fail("kv_cache.append: ", what, "(", h, ", ", t, ", ", d, ") = ", double(x(h, t, d)),
                 " cannot be quantized to ", cache_format<F>::name);
  }

  xt::xtensor<float, 3> gather(sequence_id a, bool keys) const {
    check(a, keys ? "kv_cache.stored_keys" : "kv_cache.stored_values");
    const slot& s = slots_[a.slot];
    xt::xtensor<float, 3> out = xt::xtensor<float, 3>::from_shape({opt_.kv_heads, s.length, opt_.head_dim});
    for (std::size_t h = 0; h < opt_.kv_heads; ++h)
      for (std::size_t t = 0; t < s.length; ++t) {
        const std::uint32_t p = s.pages[t / opt_.page_size];
        for (std::size_t d = 0; d < opt_.head_dim; ++d)
          out(h, t, d) = keys ? key_page(p, h).at(t % opt_.page_size, d) : value_page(p, h).at(t % opt_.page_size, d);
        if (keys && opt_.rotate)  // the rotation is its own inverse
          kernel::hadamard_row(&out(h, t, 0), opt_.head_dim, kernel::hadamard_block(opt_.head_dim));
      }
    return out;
  }

  kv_cache_options opt_;
  std::vector<float> inv_freq_;  // options.rope's frequencies
  page_format<KT> kf_;
  page_format<VT> vf_;
  detail::page_pool pool_;
  std::vector<slot> slots_;
  std::vector<std::uint32_t> free_slots_;
};

}  // namespace xattn
