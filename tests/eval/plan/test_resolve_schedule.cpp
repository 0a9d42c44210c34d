// Every "how" decision of a run comes from resolve_schedule: block sizes from the head sizes and
// the L2 cache (block_k) and from the tasks per thread (block_q), threads as the user set them or
// by the small-work rule, keys packed or read in place, the decoding split. The machine is an
// argument, so the exact values are checked for any L2 size; the output of a chosen schedule equals
// that of the same schedule written out, bitwise.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

using namespace xattn;

namespace {
problem shape(std::size_t b, std::size_t h, std::size_t sq, std::size_t skv, std::size_t d, std::size_t dv,
              std::size_t hkv = 0) {
  problem pr;
  pr.batch = b, pr.q_heads = h, pr.kv_heads = hkv ? hkv : h, pr.q_len = sq, pr.kv_len = skv, pr.q_dim = d, pr.k_dim = d,
  pr.v_dim = dv;
  return pr;
}
path_facts path(bool dot_product, bool in_place_ok, std::size_t n, std::size_t bytes = 4) {
  path_facts f;
  f.dot_product = dot_product, f.keys_in_place_ok = in_place_ok, f.width = n, f.acc_bytes = bytes, f.lanes = 64 / bytes;
  return f;
}
path_facts dot_path(std::size_t n, std::size_t bytes = 4) { return path(true, true, n, bytes); }
machine cores(int threads, std::size_t l2 = std::size_t(1) << 20) { return {l2, threads, true}; }
forward_schedule resolved(const schedule& s, const problem& pr, const path_facts& f, const machine& m,
                          pass_kind k = pass_kind::attention) {
  return resolve_schedule(s, pr, {f, {}}, k, m).forward;
}
/// The backward's schedule for rows of n features, lanes and strip as the kernel has them.
backward_schedule backward(const schedule& s, const problem& pr, std::size_t n, std::size_t lanes, std::size_t strip,
                           std::size_t bytes, const machine& m) {
  path_facts f = path(true, true, n, bytes);
  f.lanes = lanes, f.strip = strip;
  return resolve_schedule(s, pr, {f, {}}, pass_kind::attention, m).backward;
}
}  // namespace

TEST_CASE("resolve_schedule: block_k is the largest of 512, 256, 128, 64 whose key and value block fits L2") {
  for (std::size_t l2 : {std::size_t(256) << 10, std::size_t(1) << 20, std::size_t(2) << 20})
    for (std::size_t d : {16, 64, 128, 256, 512, 1024})
      for (std::size_t bytes : {4, 8}) {
        const auto s = resolved({}, shape(1, 8, 4096, 4096, d, d), dot_path(d, bytes), cores(1, l2));
        INFO("D " << d << ", " << bytes << "-byte elements, L2 " << l2);
        std::size_t want = 512;
        while (want > 64 && want * 2 * d * bytes > l2) want /= 2;
        REQUIRE(s.block_k == want);
      }
  // 1 MiB of L2, fp32
  REQUIRE(resolved({}, shape(1, 8, 2048, 2048, 128, 128), dot_path(128), cores(1)).block_k == 512);
  REQUIRE(resolved({}, shape(1, 8, 2048, 2048, 512, 512), dot_path(512), cores(1)).block_k == 256);
  REQUIRE(resolved({}, shape(1, 8, 2048, 2048, 1024, 1024), dot_path(1024), cores(1)).block_k == 128);
  // the weights pass holds no values: only the keys count
  REQUIRE(resolved({}, shape(1, 8, 2048, 2048, 1024, 1024), dot_path(1024), cores(1), pass_kind::weights).block_k ==
          256);
}

TEST_CASE("resolve_schedule: block_q shrinks in 6-row steps until every thread has 4 tasks") {
  REQUIRE(resolved({}, shape(1, 8, 2048, 2048, 64, 64), dot_path(64), cores(2)).block_q == 60);
  // one head of 256 queries on 2 threads: 60 rows give 5 tasks, 36 rows the 8 wanted
  REQUIRE(resolved({}, shape(1, 1, 256, 256, 64, 64), dot_path(64), cores(2)).block_q == 36);
  REQUIRE(resolved({}, shape(1, 1, 256, 256, 64, 64), dot_path(64), cores(1)).block_q == 60);
  REQUIRE(resolved({}, shape(1, 1, 10, 256, 64, 64), dot_path(64), cores(2)).block_q ==
          6);  // cannot reach 8: stops at 6
}

TEST_CASE("resolve_schedule: a short head's queries are one task") {
  // Sq <= 128 and Sq x block_k <= 60 x 512: the encoder-sized batch takes a task per head
  const auto enc = resolved({}, shape(32, 12, 128, 128, 64, 64), dot_path(64), cores(2));
  REQUIRE(enc.block_q == 128);
  REQUIRE(enc.q_blocks == 1);
  REQUIRE(enc.tasks == 32 * 12);
  REQUIRE(resolved({}, shape(2, 4, 100, 300, 64, 64), dot_path(64), cores(2)).block_q == 100);  // 100 x 304
  REQUIRE(resolved({}, shape(2, 4, 100, 400, 64, 64), dot_path(64), cores(2)).block_q == 60);   // 100 x 400
  REQUIRE(resolved({}, shape(4, 16, 256, 256, 64, 64), dot_path(64), cores(2)).block_q == 60);  // Sq > 128
  // fewer heads than 4 tasks per thread: 6 rows fewer at a time
  REQUIRE(resolved({}, shape(1, 2, 128, 128, 64, 64), dot_path(64), cores(2)).block_q == 38);  // 4 blocks each
}

TEST_CASE("resolve_schedule: the user's values are kept, clamped to the problem") {
  const auto s = resolved({24, 100, 2}, shape(1, 2, 50, 80, 64, 64), dot_path(64), cores(2));
  REQUIRE(s.block_q == 24);
  REQUIRE(s.block_k == 80);
  REQUIRE(s.threads == 2);
  REQUIRE(s.q_blocks == 3);
  REQUIRE(s.tasks == 6);
  REQUIRE(resolved({1000, 0, 0}, shape(1, 2, 50, 80, 64, 64), dot_path(64), cores(2)).block_q == 50);
}

TEST_CASE("resolve_schedule: a thread count the user sets is honoured, even for tiny work") {
  const problem tiny = shape(1, 1, 8, 8, 4, 4);
  const auto asked = resolved({.threads = 2}, tiny, dot_path(4), cores(2));
  REQUIRE(asked.threads == 2);
  REQUIRE(asked.threads_reason == "as requested");
  const auto automatic = resolved({}, tiny, dot_path(4), cores(2));
  REQUIRE(automatic.threads == 1);  // 2 · 8 · 8 · 8 flop: below the default cut-off
  REQUIRE(automatic.threads_reason.find("below serial_below_flop") != std::string::npos);
  const problem big = shape(1, 8, 1024, 1024, 64, 64);  // 2^30 flop
  REQUIRE(resolved({}, big, dot_path(64), cores(2)).threads == 2);
  REQUIRE(resolved({.serial_below_flop = 1e12}, big, dot_path(64), cores(2)).threads == 1);  // a module's cut-off
  REQUIRE(resolved({.threads = -3}, big, dot_path(64), cores(2)).threads == 2);              // negative: the default
  REQUIRE(resolved({.threads = 4}, big, dot_path(64), machine{std::size_t(1) << 20, 2, false}).threads == 1);
}

TEST_CASE("resolve_schedule: decoding reads keys in place and splits long key ranges") {
  // 1 query row per key head: keys in place; 4096 keys: 4 chunks of 1024 (block_k 512)
  const auto d = resolved({}, shape(1, 32, 1, 4096, 128, 128), dot_path(128), cores(2));
  REQUIRE((d.keys == key_reads::in_place));
  REQUIRE(d.keys != key_reads::panels);
  REQUIRE(d.key_chunks == 4);
  REQUIRE(d.chunk_keys == 1024);
  REQUIRE(d.tasks == 32 * 4);
  // GQA with 4 query heads per key head and 5 rows each: 20 rows > 16, packed; Sq <= 16 still splits,
  // and the group's 20 rows are one tile, its keys packed per head as each task reaches them
  const auto g = resolved({}, shape(1, 8, 5, 4096, 64, 64, 2), dot_path(64), cores(2));
  REQUIRE(g.keys != key_reads::in_place);
  REQUIRE((g.keys == key_reads::per_head));
  REQUIRE(g.key_chunks == 4);
  REQUIRE(g.group_rows == 4);
  REQUIRE(g.block_q == 20);
  REQUIRE(g.tasks == 2 * 4);
  // a group too large to be one tile (MQA over 2 x 160 rows): every query head apart, keys packed once
  const auto m = resolved({}, shape(1, 160, 2, 4096, 64, 64, 1), dot_path(64), cores(2));
  REQUIRE(m.group_rows == 0);
  REQUIRE((m.keys == key_reads::panels));
  // keys not contiguous: packed even when decoding; weights are never split
  REQUIRE(resolved({}, shape(1, 32, 1, 4096, 128, 128), path(true, false, 128), cores(2)).keys == key_reads::panels);
  REQUIRE(resolved({}, shape(1, 32, 1, 4096, 128, 128), dot_path(128), cores(2), pass_kind::weights).key_chunks == 1);
  // pair paths never pack
  const auto p = resolved({}, shape(1, 8, 256, 256, 64, 64), path(false, false, 64), cores(2));
  REQUIRE(p.keys != key_reads::panels);
  REQUIRE(p.keys != key_reads::in_place);
  // few keys: no split
  REQUIRE(resolved({}, shape(1, 32, 1, 2047, 128, 128), dot_path(128), cores(2)).key_chunks == 1);
}

TEST_CASE("resolve_schedule: a short sequence's keys are packed per head, by the thread using them") {
  // one head's packed keys: Skv x D x 4 bytes, against a quarter of L2 (1 MiB: 256 KiB)
  const auto enc = resolved({}, shape(32, 12, 128, 128, 64, 64), dot_path(64), cores(2));
  REQUIRE((enc.keys == key_reads::per_head));
  REQUIRE(enc.keys != key_reads::panels);
  REQUIRE(resolved({}, shape(1, 8, 1023, 1023, 64, 64), dot_path(64), cores(2)).keys == key_reads::per_head);
  const auto at = resolved({}, shape(1, 8, 1024, 1024, 64, 64), dot_path(64), cores(2));  // 256 KiB: not less
  REQUIRE(at.keys != key_reads::per_head);
  REQUIRE((at.keys == key_reads::panels));
  REQUIRE(resolved({}, shape(1, 8, 1024, 1024, 64, 64), dot_path(64), cores(2, std::size_t(2) << 20)).keys ==
          key_reads::per_head);
  REQUIRE(resolved({}, shape(1, 8, 512, 512, 64, 64), dot_path(64, 8), cores(2)).keys ==
          key_reads::panels);  // double: 256 KiB
  // as requested
  REQUIRE(resolved({.pack_per_head_below = 1}, shape(32, 12, 128, 128, 64, 64), dot_path(64), cores(2)).keys !=
          key_reads::per_head);
  REQUIRE(
      resolved({.pack_per_head_below = std::size_t(1) << 30}, shape(1, 8, 2048, 2048, 64, 64), dot_path(64), cores(2))
          .keys == key_reads::per_head);
  // read in place (decoding), or no score microkernel: never packed
  const auto d = resolved({}, shape(1, 32, 1, 512, 128, 128), dot_path(128), cores(2));
  REQUIRE(((d.keys == key_reads::in_place) && d.keys != key_reads::per_head && d.keys != key_reads::panels));
  const auto p = resolved({}, shape(1, 8, 128, 128, 64, 64), path(false, false, 64), cores(2));
  REQUIRE((p.keys != key_reads::per_head && p.keys != key_reads::panels));
}

TEST_CASE("keys packed per head or once per evaluation give the same bits") {
  testing::rng r(8);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 4, 50, 40}), v = r.tensor<float>({2, 2, 300, 24});
  xt::xtensor<bfloat16, 4> k16 = xt::xtensor<bfloat16, 4>::from_shape({2, 2, 300, 40});
  for (auto& x : k16) x = bfloat16(float(r.uniform(-1, 1)));  // widened when packed
  const xt::xtensor<float, 4> k = xt::cast<float>(k16);
  auto Q = ref(q), V = ref(v);
  const auto same_bits = [](const auto& e, double tol) {
    const schedule once{.block_k = 128, .pack_per_head_below = 1},
        per_head{.block_k = 128, .pack_per_head_below = 1u << 30};
    REQUIRE(explain(e, once).schedule.forward.keys == key_reads::panels);
    REQUIRE(explain(e, per_head).schedule.forward.keys == key_reads::per_head);
    const xt::xtensor<float, 4> a = eval(e, once), b = eval(e, per_head);
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    REQUIRE(testing::max_abs_diff(b, reference(e).output) < tol);
  };
  // GQA, causal over three key blocks (the last partial), D = 40 (not a whole SIMD width)
  same_bits(softmax(mask(Q * trans(ref(k)) / 6.0f, causal(align::bottom_right))) * V, 2e-6);
  same_bits(softmax(mask(Q * trans(ref(k16)) / 6.0f, causal(align::bottom_right))) * V, 2e-6);
  // the projected-features path: Gaussian kernel scores
  same_bits(softmax(score(gaussian{3.0}, Q, ref(k))) * V, 2e-6);
}

TEST_CASE("a short head's task, its values in place and the prefetching give the long sequences' bits") {
  testing::rng r(11);
  const xt::xtensor<float, 4> q = r.tensor<float>({3, 4, 100, 64}), k = r.tensor<float>({3, 2, 100, 64}),
                              v = r.tensor<float>({3, 2, 100, 32});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto same_bits = [](const auto& e) {
    const schedule chosen{.threads = 2};
    const forward_schedule fs = explain(e, chosen).schedule.forward;
    REQUIRE(fs.block_q == 100);
    REQUIRE(fs.values == value_reads::in_place);
    REQUIRE(fs.prefetch_next);
    // panels once per evaluation, values in strips, 60-row tasks: no prefetching
    const schedule long_form{.block_q = 60, .threads = 2, .pack_per_head_below = 1};
    REQUIRE(!explain(e, long_form).schedule.forward.prefetch_next);
    REQUIRE(explain(e, long_form).schedule.forward.values == value_reads::strips);
    const xt::xtensor<float, 4> a = eval(e, chosen), b = eval(e, long_form);
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    REQUIRE(testing::max_abs_diff(a, reference(e).output) < 2e-6);
  };
  same_bits(softmax(Q * trans(K) / 8.0f) * V);  // GQA
  same_bits(softmax(mask(Q * trans(K) / 8.0f, causal(align::bottom_right))) * V);
}

TEST_CASE("a chosen schedule gives the bits of the same schedule written out") {
  testing::rng r(5);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 300, 64}), k = r.tensor<float>({1, 2, 1500, 64}),
                              v = r.tensor<float>({1, 2, 1500, 64});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) / 8.0, causal(align::bottom_right))) * V;
  const std::size_t bk = explain(e).schedule.forward.block_k;
  const xt::xtensor<float, 4> chosen = eval(e), written = eval(e, {60, bk, 1});
  REQUIRE(std::memcmp(chosen.data(), written.data(), chosen.size() * sizeof(float)) == 0);
  REQUIRE(testing::max_abs_diff(chosen, reference(e).output) < 2e-6);
}

// The backward's blocks: block_k whole 6-row register blocks and whole strips of the score
// microkernel (16 floats wide with AVX2, 64 with AVX-512; doubles: 8 and 32), block_q halved while
// the transposed products' strip (block_q rows of the strip width) exceeds 24 KiB, dividing block_k.
TEST_CASE("resolve_backward: blocks of whole register blocks and strips, block_q's strip within L1") {
  struct arch {
    std::size_t lanes, strip, bytes, block_k, block_q;
  };
  for (const arch a :
       {arch{8, 16, 4, 144, 144}, arch{16, 64, 4, 192, 96}, arch{4, 8, 8, 144, 144}, arch{8, 32, 8, 192, 96}}) {
    INFO("lanes " << a.lanes << ", strip " << a.strip << ", " << a.bytes << "-byte elements");
    const auto s = backward({}, shape(1, 8, 2048, 2048, 64, 64), 64, a.lanes, a.strip, a.bytes, cores(1));
    REQUIRE(s.block_k == a.block_k);
    REQUIRE(s.block_q == a.block_q);
    REQUIRE(s.block_k % 6 == 0);
    REQUIRE(s.block_k % a.strip == 0);
    REQUIRE(s.block_k % s.block_q == 0);
    // the user's values are kept; block_q follows a requested block_k
    REQUIRE(
        backward({.block_q = 30}, shape(1, 8, 2048, 2048, 64, 64), 64, a.lanes, a.strip, a.bytes, cores(1)).block_q ==
        30);
    const auto r = backward({.block_k = 120}, shape(1, 8, 2048, 2048, 64, 64), 64, a.lanes, a.strip, a.bytes, cores(1));
    REQUIRE(r.block_k == (120 + a.lanes - 1) / a.lanes * a.lanes);
    REQUIRE(r.block_k % r.block_q == 0);
    // short sequences: no larger than the problem
    const auto t = backward({}, shape(1, 1, 20, 50, 64, 64), 64, a.lanes, a.strip, a.bytes, cores(1));
    REQUIRE(t.block_q == 20);
    REQUIRE(t.block_k == (50 + a.lanes - 1) / a.lanes * a.lanes);
  }
}

// The backward's chunks: at least 8 when batch x key heads is smaller, up to 8 of whole key blocks
// (11 blocks in 8 chunks take 2 each: 6 chunks), never depending on the thread count (the dQ
// partials are summed in chunk order); then a task per key block.
TEST_CASE("resolve_backward: key chunks by the shape only, a task per key block") {
  struct want {
    std::size_t batch, kv_heads, kv_len, key_chunks;
  };
  for (const want w : {want{1, 8, 2048, 1}, want{1, 4, 2048, 2}, want{1, 3, 2048, 3}, want{1, 1, 32768, 8},
                       want{1, 1, 2048, 6}, want{1, 1, 300, 2}, want{1, 1, 100, 1}}) {
    INFO("batch " << w.batch << ", key heads " << w.kv_heads << ", keys " << w.kv_len);
    const auto shp = shape(w.batch, w.kv_heads, 2048, w.kv_len, 64, 64);
    const auto one = backward({}, shp, 64, 16, 64, 4, cores(1));
    REQUIRE(one.key_chunks == w.key_chunks);
    REQUIRE(one.chunk_keys % one.block_k == 0);
    REQUIRE((w.key_chunks - 1) * one.chunk_keys < w.kv_len);
    // a task per key block of each chunk (slots past a short last chunk idle): for 1, 2 and 3
    // threads, every block once, and each after the block before it in its chunk
    const std::size_t per_chunk = one.chunk_keys / one.block_k, heads = w.batch * w.kv_heads;
    REQUIRE(one.tasks == heads * w.key_chunks * per_chunk);
    for (int threads : {1, 2, 3}) {
      const auto s = backward({.threads = threads}, shp, 64, 16, 64, 4, cores(threads));
      REQUIRE(s.tasks == one.tasks);
      std::vector<std::size_t> seen(heads * w.key_chunks * per_chunk, 0), next(heads * w.key_chunks, 0);
      std::size_t blocks = 0;
      for (std::size_t t = 0; t < s.tasks; ++t) {
        const auto [head, chunk, block, id] = backward_task_at(t, s);
        REQUIRE(head < heads);
        REQUIRE(chunk < w.key_chunks);
        REQUIRE(block == next[chunk * heads + head]++);
        REQUIRE(id == (chunk * heads + head) * per_chunk + block);  // the same for every thread count
        ++seen[id];
        blocks += chunk * s.chunk_keys + block * s.block_k < std::min(w.kv_len, (chunk + 1) * s.chunk_keys);
      }
      REQUIRE(std::all_of(seen.begin(), seen.end(), [](std::size_t n) { return n == 1; }));
      REQUIRE(blocks == heads * ((w.kv_len + s.block_k - 1) / s.block_k));
    }
    const auto two = backward({.threads = 2}, shp, 64, 16, 64, 4, cores(2));
    REQUIRE(two.key_chunks == one.key_chunks);
    REQUIRE(two.chunk_keys == one.chunk_keys);
  }
}

// How V is read, whether dQ accumulates in place, whether the epilogues apply, and the exact
// rescan's pass: decisions of the schedule too, not of the workers.
TEST_CASE("resolve_schedule: values, dQ in place, the epilogues and the rescan are the schedule's") {
  const auto with = [](value_facts v, bool modifiers = false, bool dropout = false, path_facts f = dot_path(64)) {
    return plan_facts{f, v, modifiers, dropout};
  };
  const problem dense = shape(1, 8, 2048, 2048, 64, 64), decode = shape(1, 32, 1, 4096, 64, 64);
  const auto values = [&](const problem& pr, value_facts v) {
    return resolve_schedule({}, pr, with(v), pass_kind::attention, cores(2)).forward.values;
  };
  REQUIRE(values(dense, {}) == value_reads::strips);
  REQUIRE(values(dense, {.bf16_pairs = true}) == value_reads::bf16_pairs);
  REQUIRE(values(decode, {.bf16_pairs = true, .in_place_ok = true}) == value_reads::in_place);
  REQUIRE(values(decode, {.in_place_ok = false, .same_type = true}) == value_reads::copied_per_task);
  REQUIRE(values(decode, {.in_place_ok = false, .same_type = false}) == value_reads::widened_per_head);
  // keys packed per head (short sequences): values of the accumulator type read in place
  const problem enc = shape(32, 12, 128, 128, 64, 64);
  REQUIRE(values(enc, {.in_place_ok = true}) == value_reads::in_place);
  REQUIRE(values(enc, {.in_place_ok = false}) == value_reads::strips);
  REQUIRE(values(enc, {.in_place_ok = true, .same_type = false}) == value_reads::strips);  // 16-bit: widened once
  REQUIRE(values(dense, {.in_place_ok = true}) == value_reads::strips);                    // panels: long keys
  // the next task's operands prefetched where keys are packed per head, not when decoding
  const auto prefetch = [&](const problem& pr) {
    return resolve_schedule({}, pr, with({}), pass_kind::attention, cores(2)).forward.prefetch_next;
  };
  REQUIRE(prefetch(enc));
  REQUIRE(!prefetch(dense));
  REQUIRE(!prefetch(decode));
  const problem mqa = shape(1, 128, 1, 512, 64, 64, 1);  // 128 query heads as one task's rows
  REQUIRE(resolve_schedule({}, mqa, with({}), pass_kind::attention, cores(2)).forward.group_rows == 128);
  REQUIRE(!prefetch(mqa));
  REQUIRE(!resolve_schedule({}, enc, with({}), pass_kind::weights, cores(2)).forward.prefetch_next);

  path_facts dense_rows = dot_path(64);
  dense_rows.query_grads_dense = dense_rows.plain_products = true;
  const auto bwd = [&](const problem& pr, plan_facts f) {
    return resolve_schedule({}, pr, f, pass_kind::attention, cores(2)).backward;
  };
  REQUIRE(bwd(dense, with({}, false, false, dense_rows)).dq_in_place);  // one chunk (8 heads)
  REQUIRE(!bwd(shape(1, 1, 2048, 2048, 64, 64), with({}, false, false, dense_rows)).dq_in_place);  // 6 chunks
  path_facts odd = dense_rows;
  odd.width = 40;  // rows not whole batches
  REQUIRE(!bwd(dense, with({}, false, false, odd)).dq_in_place);
  REQUIRE(!bwd(dense, with({}, false, false, dot_path(64))).dq_in_place);  // rows not dense
  REQUIRE(bwd(dense, with({}, false, false, dense_rows)).fused_epilogues);
  REQUIRE(!bwd(dense, with({}, true, false, dense_rows)).fused_epilogues);     // modifiers
  REQUIRE(!bwd(dense, with({}, false, true, dense_rows)).fused_epilogues);     // dropout
  REQUIRE(!bwd(dense, with({}, false, false, dot_path(64))).fused_epilogues);  // not plain products
  // the rescan is the scores pass: no values, no chunks
  const auto rescan = bwd(decode, with({}, false, false, dense_rows)).rescan;
  REQUIRE(rescan.kind == pass_kind::scores);
  REQUIRE(rescan.key_chunks == 1);
  REQUIRE(rescan.tasks == 32);
  // weights and scores passes have no backward
  REQUIRE(resolve_schedule({}, dense, with({}), pass_kind::weights, cores(2)).backward.tasks == 0);
}
