/* xattn's C interface: fused attention (forward with each row's log-sum-exp, and its backward) on
 * caller memory.
 * C11, no C++ in it. Every call returns a status; on error xattn_last_error() (per thread) says
 * which argument is wrong and why, and nothing has been written to the outputs. */
#ifndef XATTN_H
#define XATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define XATTN_API __attribute__((visibility("default")))
#else
#define XATTN_API
#endif

#define XATTN_VERSION_MAJOR 0
#define XATTN_VERSION_MINOR 2
#define XATTN_MAX_RANK 4

typedef enum xattn_dtype {
  XATTN_F32 = 0,
  XATTN_F64 = 1,
  XATTN_BF16 = 2, /* bfloat16 bits in uint16_t */
  XATTN_F16 = 3,  /* IEEE half bits in uint16_t */
  XATTN_I32 = 4,
  XATTN_I64 = 5,
  XATTN_BOOL = 6,     /* one byte, 0 or 1 */
  XATTN_Q8_0 = 7,     /* a cache's format only: int8 codes with a float scale per 32 features (llama.cpp's q8_0) */
  XATTN_FP8_E4M3 = 8, /* a cache's format only: OCP E4M3 codes with a float scale per 32 features */
  XATTN_Q4_0 = 9,     /* a cache's format only: 4-bit codes, two to a byte, a float scale per 32 (llama.cpp's q4_0) */
  XATTN_Q4C = 10      /* a cache's keys only, with XATTN_Q4_0 values: 4-bit codes, a float step and minimum per
                         feature over a page's tokens (KIVI's keys) */
} xattn_dtype;

/* A strided tensor in caller memory: shape[i] elements along axis i, strides in elements (any
 * order); axes past rank are ignored. */
typedef struct xattn_tensor {
  void* data;
  xattn_dtype dtype;
  int32_t rank;
  int64_t shape[XATTN_MAX_RANK];
  int64_t strides[XATTN_MAX_RANK];
} xattn_tensor;

typedef enum xattn_status {
  XATTN_OK = 0,
  XATTN_INVALID_ARGUMENT = 1, /* a shape, dtype, stride, overlap or value the call cannot take */
  XATTN_UNSUPPORTED = 2,      /* a valid combination this build does not run (the message says which) */
  XATTN_OUT_OF_MEMORY = 3,
  XATTN_INTERNAL = 4
} xattn_status;

typedef enum xattn_causal {
  XATTN_CAUSAL_NONE = 0,
  XATTN_CAUSAL_TOP_LEFT = 1,    /* query i sees keys j <= i (PyTorch SDPA's is_causal) */
  XATTN_CAUSAL_BOTTOM_RIGHT = 2 /* query i sees keys j <= i + Skv - Sq (decoding, FlashAttention) */
} xattn_causal;

typedef enum xattn_rope {
  XATTN_ROPE_NONE = 0,
  XATTN_ROPE_HALF = 1,       /* features (k, k + dims/2) turned together: LLaMA, GPT-NeoX */
  XATTN_ROPE_INTERLEAVED = 2 /* features (2k, 2k + 1): GPT-J */
} xattn_rope;

/* Additive (Bahdanau) scoring, d2l's AdditiveAttention, in place of the dot product:
 * score(q, k) = w_v . tanh(W_q q + W_k k), W_q (h, D), W_k (h, Dk), w_v (h), F32 or F64; q and k
 * may differ in size (D, Dk). xattn_backward writes the weights' gradients into d_w_q, d_w_k,
 * d_w_v (the weights' shapes, F32 or F64; NULL: not wanted). */
typedef struct xattn_additive {
  const xattn_tensor* w_q;
  const xattn_tensor* w_k;
  const xattn_tensor* w_v;
  xattn_tensor* d_w_q;
  xattn_tensor* d_w_k;
  xattn_tensor* d_w_v;
} xattn_additive;

/* What to compute besides softmax(Q K^T * scale) V. Start from xattn_attention_defaults().
 * The score of query i and key j is
 *   s = softcap(scale * rope(q_i) . rope(k_j)) + mask_ij + bias_ij - alibi_h * |i + Skv - Sq - j|
 * (each term only when set), then every mask below hides keys, sinks join the softmax, and
 * dropout zeroes weights. Dense, causal, window, lengths, softcap, sinks and rope run the fused
 * code the C++ DSL compiles for them; documents, mask, bias, alibi, dropout and the additive
 * scorer run one expression per accumulator type in which those parts are chosen at run time
 * (docs/c.md). */
typedef struct xattn_attention_desc {
  double scale;                     /* 0: 1/sqrt(D) */
  xattn_causal causal;              /* also aligns the window: at the bottom right when XATTN_CAUSAL_BOTTOM_RIGHT */
  int64_t window_left;              /* query at position p sees keys [p - left, p + right]; -1 = unbounded */
  int64_t window_right;             /* (with causal, min(right, 0)) */
  const xattn_tensor* lengths;      /* key lengths (B) or (B, Sq), XATTN_I32 or XATTN_I64, or NULL */
  const xattn_tensor* documents;    /* document ids (Sq) or (B, Sq), I32 or I64: query i sees key j iff their
                                       ids are equal; or NULL */
  const xattn_tensor* documents_kv; /* the keys' ids (Skv) or (B, Skv) when Sq != Skv; NULL: documents */
  const xattn_tensor* mask;         /* broadcast to (B, Hq, Sq, Skv) (right-aligned, each axis equal or 1):
                                       XATTN_BOOL (1 = attend) or F32/F64 added to the scores (-inf hides) */
  const xattn_tensor* bias;         /* F32 or F64 broadcast as mask, added to the scores; has a gradient */
  const xattn_tensor* alibi;        /* slopes (Hq), F32 or F64, or NULL */
  double softcap;                   /* > 0: scores become softcap * tanh(scores / softcap); 0: off */
  const xattn_tensor* sinks;        /* one logit per query head (Hq), XATTN_F32 or XATTN_F64, or NULL */
  double dropout_p;                 /* in [0, 1): training-mode dropout on the weights (Philox keyed by seed) */
  uint64_t seed;
  int32_t threads;                      /* 0: OpenMP's default */
  xattn_rope rope;                      /* rotary embeddings of q and k: float angles (as transformers' are), the
                                           rotation in the inputs' type */
  double rope_base;                     /* 10000 by default */
  int64_t rope_dims;                    /* the first rope_dims features turn; 0: all D */
  const xattn_tensor* rope_q_positions; /* (Sq) or (B, Sq), I32 or I64; NULL: i + Skv - Sq */
  const xattn_tensor* rope_k_positions; /* (Skv) or (B, Skv); NULL: j */
  const xattn_additive* additive;       /* the additive scorer (scale 0 then means 1), or NULL */
} xattn_attention_desc;

/* scale 0, no causal, unbounded window, no masks, softcap 0, no sinks, no dropout, threads 0, no rope
 * (base 10000, all features). */
XATTN_API xattn_attention_desc xattn_attention_defaults(void);

/* out = attention(q, k, v): q (B, Hq, Sq, D), k (B, Hkv, Skv, D), v (B, Hkv, Skv, Dv) with Hq a
 * multiple of Hkv (grouped-query attention), all of one dtype (F32, F64, BF16 or F16), or F32 q
 * over BF16 (or F16) k and v; out
 * (B, Hq, Sq, Dv) of that dtype or F32; lse (B, Hq, Sq) F32 (F64 for F64 inputs) or NULL: each
 * row's log-sum-exp of its scores (what a backward needs). A row that sees no key (its length
 * 0, or causal or window hiding every key) outputs 0 and its lse is -inf. */
XATTN_API xattn_status xattn_forward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                     const xattn_attention_desc* desc, xattn_tensor* out, xattn_tensor* lse);

/* The gradients of sum(d_out * out) for out = attention(q, k, v) with these desc options, given
 * out and lse as xattn_forward wrote them (lse is required) and d_out (out's shape, and out's
 * dtype or F32). dq, dk, dv take q's, k's and v's shapes, in F32 (F64 for F64 inputs) or the
 * inputs' 16-bit dtype (rounded from float gradients); dsinks (Hq) F32 or F64 with desc.sinks;
 * dbias in desc.bias's shape, F32 or F64, with desc.bias (summed over its broadcast axes). NULL
 * for a gradient not wanted. No gradient may overlap
 * an input or another gradient. If lse does not belong to these inputs (its rows' probabilities
 * do not sum to 1) the call fails after the pass, leaving the F32/F64 gradients zeroed. */
XATTN_API xattn_status xattn_backward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                      const xattn_attention_desc* desc, const xattn_tensor* out,
                                      const xattn_tensor* lse, const xattn_tensor* d_out, xattn_tensor* dq,
                                      xattn_tensor* dk, xattn_tensor* dv, xattn_tensor* dsinks, xattn_tensor* dbias);

/* A paged key/value cache for decoding (vLLM's layout; docs/caches.md): sequences of tokens whose
 * keys and values are stored in pages of page_size tokens from one pool of max_tokens tokens,
 * shared between forks. Opaque; not thread-safe (one thread at a time per cache). */
typedef struct xattn_kv_cache xattn_kv_cache;

/* A sequence of a cache. The id of a released sequence stays invalid. */
typedef uint64_t xattn_sequence;

typedef struct xattn_cache_options {
  int64_t kv_heads;        /* > 0 */
  int64_t head_dim;        /* > 0: the features of a key and of a value */
  int64_t page_size;       /* tokens per page; 16 by default */
  int64_t max_tokens;      /* the pool: max_tokens / page_size pages (rounded up), allocated as used */
  xattn_dtype key_dtype;   /* XATTN_F32, XATTN_BF16, XATTN_F16, XATTN_Q8_0, XATTN_FP8_E4M3, XATTN_Q4_0 or XATTN_Q4C */
  xattn_dtype value_dtype; /* likewise but XATTN_Q4C; keys and values may differ, except that FP8_E4M3 and Q4_0
                              keys and values go together, and Q4C keys take Q4_0 values */
  xattn_rope rope;         /* keys stored rotated at their positions in their sequence, and queries rotated at
                              theirs by xattn_cache_attention (as vLLM and llama.cpp); XATTN_ROPE_NONE by default */
  double rope_base;        /* 10000 by default */
  int64_t rope_dims;       /* the first rope_dims features turn; 0: all */
  int rotate;              /* nonzero: keys stored turned by a Hadamard rotation (spreads outlier channels before
                              a quantized format's scales; queries turn alike at attention); 0 by default */
} xattn_cache_options;

/* kv_heads 0 and head_dim 0 (to set), page_size 16, max_tokens 65536, F32 keys and values, no rope
 * (base 10000, all features). */
XATTN_API xattn_cache_options xattn_cache_defaults(void);

/* A new cache, or NULL (xattn_last_error says why). Free it with xattn_cache_destroy. */
XATTN_API xattn_kv_cache* xattn_cache_create(const xattn_cache_options* options);
XATTN_API void xattn_cache_destroy(xattn_kv_cache* cache); /* NULL: nothing */

/* A new, empty sequence. */
XATTN_API xattn_status xattn_cache_add_sequence(xattn_kv_cache* cache, xattn_sequence* id);
/* Appends n tokens: k_rows and v_rows (kv_heads, n, head_dim), F32, F64, BF16 or F16, any strides,
 * converted (or quantized) as they are written. A full pool is XATTN_OUT_OF_MEMORY. */
XATTN_API xattn_status xattn_cache_append(xattn_kv_cache* cache, xattn_sequence id, const xattn_tensor* k_rows,
                                          const xattn_tensor* v_rows);
/* A sequence holding id's tokens, sharing its pages (copied on the first append into a shared page). */
XATTN_API xattn_status xattn_cache_fork(xattn_kv_cache* cache, xattn_sequence id, xattn_sequence* fork);
/* Its pages go back to the pool (those no fork holds); the id is invalid from now on. */
XATTN_API xattn_status xattn_cache_release(xattn_kv_cache* cache, xattn_sequence id);
/* Keeps id's first `length` tokens (speculative decoding's rollback): the pages past them go back to
 * the pool, those a fork holds stay with it. A length beyond id's is XATTN_INVALID_ARGUMENT and
 * changes nothing. */
XATTN_API xattn_status xattn_cache_truncate(xattn_kv_cache* cache, xattn_sequence id, int64_t length);
/* Keeps only id's tokens at positions[0, n) (increasing, each below id's length), in that order
 * (eviction: heavy hitters, attention sinks and a window). Rows move as stored; pages a fork shares
 * are copied before they are written, the pages past the new length go back to the pool unless a
 * fork holds them. Bad positions (XATTN_INVALID_ARGUMENT), a full pool (XATTN_OUT_OF_MEMORY) or a
 * cache storing its keys rotated (options.rope) change nothing. positions may be NULL when n is 0. */
XATTN_API xattn_status xattn_cache_keep(xattn_kv_cache* cache, xattn_sequence id, const int64_t* positions, int64_t n);
XATTN_API xattn_status xattn_cache_length(const xattn_kv_cache* cache, xattn_sequence id, int64_t* length);
/* Allocates the pool's memory for `tokens` tokens now (otherwise it grows as pages are used). */
XATTN_API xattn_status xattn_cache_reserve(xattn_kv_cache* cache, int64_t tokens);

/* out = attention(q, the keys and values of the n sequences seq_ids): q (n, Hq, Sq, head_dim), Hq a
 * multiple of kv_heads, F32, F64, BF16 or F16; out (n, Hq, Sq, head_dim) of q's dtype or F32; lse
 * (n, Hq, Sq) F32 or NULL. Row b attends sequence seq_ids[b] as it is now (its length), its Sq
 * queries being the sequence's newest tokens: XATTN_CAUSAL_BOTTOM_RIGHT and the window bounds
 * are aligned at each sequence's own end (decoding, a chunk of prefill), as ALiBi is; masks,
 * bias, lengths and documents see key j of row b as token j of its sequence (Skv: the longest).
 * desc takes every option of xattn_forward but dropout, rope (the cache's option: queries turn
 * at their positions) and the additive scorer, which are XATTN_UNSUPPORTED, as are a bias with a
 * float mask and top-left causal. On failure out and lse are as they were. */
XATTN_API xattn_status xattn_cache_attention(const xattn_kv_cache* cache, const xattn_sequence* seq_ids, int64_t n,
                                             const xattn_tensor* q, const xattn_attention_desc* desc, xattn_tensor* out,
                                             xattn_tensor* lse);

/* The calling thread's message for the last call that failed ("" if none). */
XATTN_API const char* xattn_last_error(void);

/* "0.3.0" */
XATTN_API const char* xattn_version(void);

#ifdef __cplusplus
}
#endif

#endif /* XATTN_H */
