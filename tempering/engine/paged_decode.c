/* Decode attention read straight from a paged KV pool on the CPU. paged_decode.py builds this file
   with the machine's C compiler on first use and calls `decode` through ctypes; it documents what
   the kernel computes and how it was measured.

   A row (one sequence's queries: kvh kv heads x rep query heads each) goes over its slots in chunks
   of 16 live ones. A float32 pool's rows are read in place; an int8 pool's (times their fp16
   scales), a bfloat16 or a float16 pool's are first widened to float32 in a small buffer. Then,
   per query head: the chunk's 16 dot products, summed as one vector (no per-key horizontal
   sum), their max, one rescale of what was summed under the old max, 16 exps as one vector, and
   the chunk's weighted values. Vectors are GCC/Clang vector extensions of 16 floats, which the
   compiler maps to what the machine has (AVX-512, AVX2, NEON). Head dims are multiples of 16. */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));
typedef int32_t i16v __attribute__((vector_size(64)));

#if defined(__clang__)
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF(a, b, ...) __builtin_shuffle(a, b, (i16v){__VA_ARGS__})
#endif

#define CH 16 /* live slots per chunk: one vector of scores */

enum { F32 = 0, I8 = 1, BF16 = 2, F16 = 3 };

typedef struct {      /* mirrors paged_decode.py's _Args */
  const float *q;     /* [rows, kvh, rep, d] */
  const void *k, *v;  /* [slots, kvh, d] as stored */
  const uint16_t *ks, *vs; /* int8 pools: the fp16 scales' bits [slots, kvh]; else NULL */
  const int64_t *index;    /* [rows, keys] slots */
  const uint8_t *mask;     /* [rows, keys] 1 = attend */
  float *out, *lse;        /* [rows, kvh, rep, d], [rows, kvh, rep] */
  int64_t kvh, rep, d, keys;
  float scale;
  int32_t dtype;
} Args;

static inline v16 ld(const float *p) { return *(const v16u *)p; }

/* fp16 bits -> float32, exactly (zero, subnormal, normal, inf, nan) */
static inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  union { uint32_t u; float f; } x;
  if (e == 0) {
    x.f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24 */
    x.u |= sign;
  } else {
    x.u = sign | (e == 31 ? 0x7f800000u : (e + 112) << 23) | (m << 13);
  }
  return x.f;
}

/* n stored elements -> float32, times scale: plain loops, which the compiler vectorizes (it
   does int8 and bfloat16 well this way, not through vector-extension conversions) */
static inline void widen(const void *src, int64_t at, int dtype, float scale, float *dst, int64_t n) {
  if (dtype == I8) {
    const int8_t *x = (const int8_t *)src + at;
    for (int64_t i = 0; i < n; i++) dst[i] = (float)x[i] * scale;
  } else if (dtype == BF16) {
    const uint16_t *x = (const uint16_t *)src + at;
    for (int64_t i = 0; i < n; i++) {
      union { uint32_t u; float f; } w = {.u = (uint32_t)x[i] << 16}; /* the top half of a float32 */
      dst[i] = w.f;
    }
  } else {
    const uint16_t *x = (const uint16_t *)src + at;
    for (int64_t i = 0; i < n; i++) dst[i] = half_to_float(x[i]);
  }
}

/* exp(x) for x <= 0, 16 lanes: 2^n 2^f with Cephes' exp2f polynomial for f in [-0.5, 0.5];
   lanes below -87 (-inf included) are exactly 0 */
static inline v16 vexp(v16 x) {
  i16v under = (i16v)(x < -87.0f);
  x = (v16)(~under & (i16v)x);
  v16 t = x * 1.44269504088896341f;
  i16v n = __builtin_convertvector(t - 0.5f, i16v); /* t <= 0: toward zero is to nearest */
  v16 f = t - __builtin_convertvector(n, v16);
  v16 p = f * 1.535336188319500e-4f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  return (v16)(((i16v)p + (n << 23)) & ~under);
}

static inline v16 vmax2(v16 a, v16 b) { /* lanewise max (C has no ?: on vectors) */
  i16v more = (i16v)(a > b);
  return (v16)((more & (i16v)a) | (~more & (i16v)b));
}

static inline float vmax(v16 x) {
  v16 a = vmax2(x, SHUF(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  a = vmax2(a, SHUF(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  a = vmax2(a, SHUF(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  return a[0] > a[1] ? a[0] : a[1];
}

static inline float vsum(v16 x) {
  v16 a = x + SHUF(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  a += SHUF(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  a += SHUF(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  return a[0] + a[1];
}

/* lane c of the result = the sum of t[c]'s lanes: 16 sums at once, by pairwise halving */
static inline v16 sums16(const v16 *t) {
  v16 a[8], b[4], c[2];
  for (int i = 0; i < 8; i++)
    a[i] = SHUF(t[2 * i], t[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
         + SHUF(t[2 * i], t[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; i++)
    b[i] = SHUF(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
         + SHUF(a[2 * i], a[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  for (int i = 0; i < 2; i++)
    c[i] = SHUF(b[2 * i], b[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29)
         + SHUF(b[2 * i], b[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  return SHUF(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
       + SHUF(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

/* Point k[h * CH + c], v[...] at chunk slot c's key and value of kv head h as float32: in the
   pool itself, or widened into kb, vb (kvh * CH * d floats each). */
static void load_chunk(const Args *a, const int64_t *slots, int n, float *kb, float *vb,
                       const float **k, const float **v) {
  const int64_t kvh = a->kvh, d = a->d;
  for (int c = 0; c < n; c++)
    for (int64_t h = 0; h < kvh; h++) {
      const int64_t at = (slots[c] * kvh + h) * d, to = h * CH + c;
      if (a->dtype == F32) {
        k[to] = (const float *)a->k + at;
        v[to] = (const float *)a->v + at;
        continue;
      }
      float sk = 1.f, sv = 1.f;
      if (a->dtype == I8) {
        sk = half_to_float(a->ks[slots[c] * kvh + h]);
        sv = half_to_float(a->vs[slots[c] * kvh + h]);
      }
      float *kd = kb + to * d, *vd = vb + to * d;
      widen(a->k, at, a->dtype, sk, kd, d);
      widen(a->v, at, a->dtype, sv, vd, d);
      k[to] = kd;
      v[to] = vd;
    }
}

/* One row; V, the head dim's count of 16-float vectors, is a literal where it can be (so a
   head's query and output stay in registers). scratch: (kvh*rep + 2*kvh*CH) * d floats. */
#define ROW(NAME, V)                                                                           \
  static void NAME(const Args *a, float *scratch, int64_t r) {                                     \
    const int64_t d = a->d, kvh = a->kvh, rep = a->rep, heads = kvh * rep;            \
    const int64_t *idx = a->index + r * a->keys;                                                   \
    const uint8_t *live = a->mask + r * a->keys;                                                   \
    const float *q = a->q + r * heads * d;                                                         \
    float *acc = scratch, *kb = scratch + heads * d, *vb = kb + kvh * CH * d;                      \
    float top[heads], total[heads];                                                                \
    const float *kp[kvh * CH], *vp[kvh * CH];                                                      \
    int64_t slots[CH], j = 0;                                                                      \
    memset(acc, 0, sizeof(float) * heads * d);                                                     \
    for (int64_t p = 0; p < heads; p++) {                                                          \
      top[p] = -INFINITY;                                                                          \
      total[p] = 0.f;                                                                              \
    }                                                                                              \
    for (;;) {                                                                                     \
      int n = 0;                                                                                   \
      for (; j < a->keys && n < CH; j++)                                                           \
        if (live[j]) slots[n++] = idx[j];                                                          \
      if (!n) break;                                                                               \
      load_chunk(a, slots, n, kb, vb, kp, vp);                                                     \
      for (int64_t p = 0; p < heads; p++) {                                                        \
        const float *const *kh = kp + (p / rep) * CH, *const *vh = vp + (p / rep) * CH;            \
        v16 qp[V], part[CH], o[V];                                                                 \
        for (int64_t i = 0; i < V; i++) qp[i] = ld(q + p * d + 16 * i) * a->scale;                 \
        for (int c = 0; c < CH; c++) {                                                             \
          v16 t = {0};                                                                             \
          if (c < n)                                                                               \
            for (int64_t i = 0; i < V; i++) t += qp[i] * ld(kh[c] + 16 * i);                       \
          part[c] = t;                                                                             \
        }                                                                                          \
        v16 s = sums16(part);                                                                      \
        for (int c = n; c < CH; c++) s[c] = -INFINITY;                                             \
        float m = vmax(s);                                                                         \
        m = m > top[p] ? m : top[p];                                                               \
        float corr = top[p] == -INFINITY ? 0.f : expf(top[p] - m);                                 \
        top[p] = m;                                                                                \
        v16 w = vexp(s - m);                                                                       \
        total[p] = total[p] * corr + vsum(w);                                                      \
        for (int64_t i = 0; i < V; i++) o[i] = ld(acc + p * d + 16 * i) * corr;                    \
        for (int c = 0; c < n; c++)                                                                \
          for (int64_t i = 0; i < V; i++) o[i] += w[c] * ld(vh[c] + 16 * i);                       \
        for (int64_t i = 0; i < V; i++) *(v16u *)(acc + p * d + 16 * i) = o[i];                    \
      }                                                                                            \
    }                                                                                              \
    for (int64_t p = 0; p < heads; p++) {                                                          \
      float inv = 1.f / total[p];                                                                  \
      for (int64_t i = 0; i < V; i++)                                                              \
        *(v16u *)(a->out + (r * heads + p) * d + 16 * i) = ld(acc + p * d + 16 * i) * inv;         \
      a->lse[r * heads + p] = top[p] + logf(total[p]);                                             \
    }                                                                                              \
  }

ROW(row64, 4)
ROW(row128, 8)
ROW(row_any, a->d / 16)

/* Rows [r0, r1). Returns 0, or -1 for a head dim that is not a multiple of 16 (paged_decode.py
   checks first). */
int decode(const Args *a, float *scratch, int64_t r0, int64_t r1) {
  if (a->d % 16) return -1;
  for (int64_t r = r0; r < r1; r++) {
    if (a->d == 64) row64(a, scratch, r);
    else if (a->d == 128) row128(a, scratch, r);
    else row_any(a, scratch, r);
  }
  return 0;
}
