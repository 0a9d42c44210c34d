// The C interface from C11: d2l's masked_softmax worked example (queries and keys of ones, values
// arange(40) per batch, valid lengths 2 and 6: prints 2 3 4 5 10 11 12 13), its backward, then
// errors: each call with bad input returns its status and message and leaves out as it was.
#include <xattn.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s (last error: %s)\n", what, xattn_last_error());
    ++failures;
  }
}

static xattn_tensor tensor4(void* data, xattn_dtype t, int64_t b, int64_t h, int64_t s, int64_t d) {
  xattn_tensor x = {data, t, 4, {b, h, s, d}, {h * s * d, s * d, d, 1}};
  return x;
}

int main(void) {
  float q[2 * 1 * 1 * 2], k[2 * 1 * 10 * 2], v[2 * 1 * 10 * 4], out[2 * 4], lse[2];
  int32_t lens[2] = {2, 6};
  for (int i = 0; i < 4; ++i) q[i] = 1.0f;
  for (int i = 0; i < 40; ++i) k[i] = 1.0f;
  for (int i = 0; i < 80; ++i) v[i] = (float)(i % 40);
  // [snippet forward]
  // (B, H, S, D) tensors in caller memory: data, dtype, rank, shape, strides in elements
  xattn_tensor Q = {q, XATTN_F32, 4, {2, 1, 1, 2}, {2, 2, 2, 1}};
  xattn_tensor K = {k, XATTN_F32, 4, {2, 1, 10, 2}, {20, 20, 2, 1}};
  xattn_tensor V = {v, XATTN_F32, 4, {2, 1, 10, 4}, {40, 40, 4, 1}};
  xattn_tensor O = {out, XATTN_F32, 4, {2, 1, 1, 4}, {4, 4, 4, 1}};
  xattn_tensor LSE = {lse, XATTN_F32, 3, {2, 1, 1}, {1, 1, 1}};  // or NULL
  xattn_tensor L = {lens, XATTN_I32, 1, {2}, {1}};               // valid keys per batch row
  xattn_attention_desc d = xattn_attention_defaults();           // scale 0: 1/sqrt(D)
  d.lengths = &L;
  xattn_status s = xattn_forward(&Q, &K, &V, &d, &O, &LSE);
  if (s != XATTN_OK) fprintf(stderr, "%s\n", xattn_last_error());
  // [end forward]
  expect(s == XATTN_OK, "xattn_forward returns XATTN_OK");
  for (int i = 0; i < 8; ++i) printf("%g ", out[i]);
  printf("\n");
  /* every score is 2/sqrt(2): lse = sqrt(2) + log(valid keys) */
  expect(fabs(lse[0] - (sqrt(2.0) + log(2.0))) < 1e-5 && fabs(lse[1] - (sqrt(2.0) + log(6.0))) < 1e-5,
         "lse = scale * 2 + log(valid keys)");

  /* the backward of sum(out): every valid key has weight 1/n, so dv = 1/n on its rows (0 past
   * the length); the keys are equal, so the query's gradient is 0 */
  float d_out[8], dq[4], dk[40], dv[80];
  for (int i = 0; i < 8; ++i) d_out[i] = 1.0f;
  // [snippet backward]
  xattn_tensor dO = {d_out, XATTN_F32, 4, {2, 1, 1, 4}, {4, 4, 4, 1}};
  xattn_tensor dQ = {dq, XATTN_F32, 4, {2, 1, 1, 2}, {2, 2, 2, 1}};  // the shapes of q, k, v
  xattn_tensor dK = {dk, XATTN_F32, 4, {2, 1, 10, 2}, {20, 20, 2, 1}};
  xattn_tensor dV = {dv, XATTN_F32, 4, {2, 1, 10, 4}, {40, 40, 4, 1}};
  s = xattn_backward(&Q, &K, &V, &d, &O, &LSE, &dO, &dQ, &dK, &dV, NULL, NULL);  // NULL: not wanted
  // [end backward]
  expect(s == XATTN_OK, "xattn_backward returns XATTN_OK");
  expect(fabs(dv[0] - 0.5) < 1e-6 && fabs(dv[7] - 0.5) < 1e-6 && dv[8] == 0.0f, "dv of batch 0: 1/2 on 2 keys");
  expect(fabs(dv[40] - 1.0 / 6) < 1e-6 && fabs(dv[40 + 23] - 1.0 / 6) < 1e-6 && dv[40 + 24] == 0.0f,
         "dv of batch 1: 1/6 on 6 keys");
  expect(fabs(dq[0]) < 1e-5 && fabs(dq[3]) < 1e-5, "equal keys: dq = 0");

  float before[8];
  memcpy(before, out, sizeof out);
  xattn_tensor bad = tensor4(k, XATTN_F32, 2, 1, 10, 3); /* head size 3, q has 2 */
  s = xattn_forward(&Q, &bad, &V, &d, &O, NULL);
  expect(s == XATTN_INVALID_ARGUMENT, "a k of another head size is XATTN_INVALID_ARGUMENT");
  expect(strstr(xattn_last_error(), "differ in head size") != NULL, "the message names the head size");
  printf("error: %s\n", xattn_last_error());

  int32_t too_long[2] = {2, 11};
  xattn_tensor L2 = {too_long, XATTN_I32, 1, {2}, {1}};
  d.lengths = &L2;
  s = xattn_forward(&Q, &K, &V, &d, &O, NULL);
  expect(s == XATTN_INVALID_ARGUMENT && strstr(xattn_last_error(), "11") != NULL, "a length past Skv is refused");
  d.lengths = &L;
  s = xattn_forward(&Q, &K, &V, &d, &O, &O);
  expect(s == XATTN_INVALID_ARGUMENT && strstr(xattn_last_error(), "lse has rank 4") != NULL, "an lse of rank 4");
  d.dropout_p = 1.0f;
  s = xattn_forward(&Q, &K, &V, &d, &O, NULL);
  expect(s == XATTN_INVALID_ARGUMENT && strstr(xattn_last_error(), "desc.dropout_p is 1") != NULL,
         "a dropout probability of 1");
  d.dropout_p = 0.0f;
  s = xattn_forward(&Q, &K, &V, &d, &V, NULL); /* out over v: the wrong shape first */
  expect(s == XATTN_INVALID_ARGUMENT, "out of v's shape is refused");
  xattn_tensor alias = tensor4(v, XATTN_F32, 2, 1, 1, 4); /* out aliasing v */
  s = xattn_forward(&Q, &K, &V, &d, &alias, NULL);
  expect(s == XATTN_INVALID_ARGUMENT && strstr(xattn_last_error(), "overlaps") != NULL, "out overlapping v");
  expect(memcmp(before, out, sizeof out) == 0 && v[0] == 0.0f && v[4] == 4.0f, "failed calls wrote nothing");
  s = xattn_forward(&Q, &K, &V, &d, &O, NULL);
  expect(s == XATTN_OK && xattn_last_error()[0] == '\0', "a good call clears the message");
  if (failures == 0) printf("all checks passed\n");
  return failures == 0 ? 0 : 1;
}
