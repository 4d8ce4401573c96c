/* Vectors of W floats for the engine's C kernels (paged_decode.c, sampler.c): GCC/Clang vector
   extensions, which the compiler maps to what the machine has (AVX-512, AVX2, NEON), and the
   few operations on them the kernels share: an unaligned load, exp of non-positive numbers, and
   a vector's largest lane and sum. */
#ifndef TEMPERING_VEC_H
#define TEMPERING_VEC_H
#include <stdint.h>

/* W floats per vector: 16 where the machine has AVX-512 (32 registers of 16), else 8 (AVX2's
   16 registers of 8; NEON's 32 of 4). */
#ifndef W /* -DW=8 or -DW=16 picks one (the tests build both) */
#if defined(__AVX512F__)
#define W 16
#else
#define W 8
#endif
#endif
#if W != 8 && W != 16
#error "W must be 8 or 16"
#endif

typedef float vf __attribute__((vector_size(4 * W)));
typedef float vfu __attribute__((vector_size(4 * W), aligned(4)));
typedef int32_t vi __attribute__((vector_size(4 * W)));

#if defined(__clang__)
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF(a, b, ...) __builtin_shuffle(a, b, (vi){__VA_ARGS__})
#endif

static inline vf ld(const float *p) { return *(const vfu *)p; }

/* exp(x) for x <= 0, W lanes: 2^n 2^f with Cephes' exp2f polynomial for f in [-0.5, 0.5];
   lanes below -87 (-inf included) are exactly 0 */
static inline vf vexp(vf x) {
  vi under = (vi)(x < -87.0f);
  x = (vf)(~under & (vi)x);
  vf t = x * 1.44269504088896341f;
  vi n = __builtin_convertvector(t - 0.5f, vi); /* t <= 0: toward zero is to nearest */
  vf f = t - __builtin_convertvector(n, vf);
  vf p = f * 1.535336188319500e-4f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  return (vf)(((vi)p + (n << 23)) & ~under);
}

/* exp(x) for one x <= 0: vexp's lane 0 (libm's expf, called per chunk and query head, took 8% of
   the decode kernel) */
static inline float sexp(float x) { return vexp((vf){x})[0]; }

static inline vf vmax2(vf a, vf b) { /* lanewise max (C has no ?: on vectors) */
  vi more = (vi)(a > b);
  return (vf)((more & (vi)a) | (~more & (vi)b));
}

/* Lane permutations for the reductions: swap halves, quarters, eighths. */
#if W == 16
#define HALF(a) SHUF(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)
#define QUARTER(a) SHUF(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11)
#define EIGHTH(a) SHUF(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13)
#else
#define QUARTER(a) SHUF(a, a, 4, 5, 6, 7, 0, 1, 2, 3)
#define EIGHTH(a) SHUF(a, a, 2, 3, 0, 1, 6, 7, 4, 5)
#endif

static inline float vmax(vf x) { /* the largest lane */
#if W == 16
  x = vmax2(x, HALF(x));
#endif
  x = vmax2(x, QUARTER(x));
  x = vmax2(x, EIGHTH(x));
  return x[0] > x[1] ? x[0] : x[1];
}

static inline float vsum(vf x) {
#if W == 16
  x += HALF(x);
#endif
  x += QUARTER(x);
  x += EIGHTH(x);
  return x[0] + x[1];
}

#endif
