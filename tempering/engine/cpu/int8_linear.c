/* y = x @ (w * scale).T + bias with w int8 [N, K] and one float scale per output row: the engine's
   weight-only int8 linear layers (int8_weights.py). Activations stay float32; each weight is widened
   to float as it is loaded, so a step reads a quarter of float32's weight bytes and the sums are
   float32 sums of exactly the dequantized weights. Work is tiled 4 input rows x 4 output rows
   (16 vector accumulators stay in registers); a call covers output rows [n0, n1), so the caller
   splits N over threads. */
#include <stdint.h>
#include <string.h>

#include "vec.h"

#if defined(__AVX512F__) && W == 16
#include <immintrin.h>
/* 16 int8 -> 16 floats: one sign extension and one conversion (the vector extensions' generic
   conversion is done a byte at a time) */
static inline vf widen(const int8_t *p) {
  return (vf)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
#elif defined(__AVX2__) && W == 8
#include <immintrin.h>
static inline vf widen(const int8_t *p) {
  return (vf)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
#else
typedef int8_t vb __attribute__((vector_size(W)));
static inline vf widen(const int8_t *p) {
  vb b;
  memcpy(&b, p, sizeof b);
  return __builtin_convertvector(b, vf);
}
#endif

typedef struct {
  const float *x;     /* [m, k] */
  const int8_t *w;    /* [n, k] */
  const float *scale; /* [n] */
  const float *bias;  /* [n], or NULL */
  float *y;           /* [m, n] */
  int64_t m, k, n;
} Args;

/* rows [m0, m0 + MT) of y, columns [n0, n0 + NT); MT and NT are constants where it is inlined */
static inline __attribute__((always_inline)) void tile(const Args *a, int64_t m0, int MT, int64_t n0, int NT) {
  const int64_t k = a->k, vk = k / W * W;
  vf acc[4][4];
  for (int i = 0; i < MT; i++)
    for (int j = 0; j < NT; j++) acc[i][j] = (vf){0};
  const float *x = a->x + m0 * k;
  const int8_t *w = a->w + n0 * k;
  for (int64_t e = 0; e < vk; e += W) {
    vf wv[4];
    for (int j = 0; j < NT; j++) wv[j] = widen(w + j * k + e);
    for (int i = 0; i < MT; i++) {
      vf xv = ld(x + i * k + e);
      for (int j = 0; j < NT; j++) acc[i][j] += xv * wv[j];
    }
  }
  for (int i = 0; i < MT; i++)
    for (int j = 0; j < NT; j++) {
      float s = vsum(acc[i][j]);
      for (int64_t e = vk; e < k; e++) s += x[i * k + e] * (float)w[j * k + e];
      s *= a->scale[n0 + j];
      a->y[(m0 + i) * a->n + n0 + j] = a->bias ? s + a->bias[n0 + j] : s;
    }
}

int int8_linear(const Args *a, void *scratch, int64_t n0, int64_t n1) {
  (void)scratch;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    int64_t m = 0;
    for (; m + 4 <= a->m; m += 4) tile(a, m, 4, n, 4);
    for (; m < a->m; m++) tile(a, m, 1, n, 4);
  }
  for (; n < n1; n++) {
    int64_t m = 0;
    for (; m + 4 <= a->m; m += 4) tile(a, m, 4, n, 1);
    for (; m < a->m; m++) tile(a, m, 1, n, 1);
  }
  return 0;
}
