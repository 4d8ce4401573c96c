/* Decode attention read straight from a paged KV pool on the CPU. paged_decode.py builds this file
   with the machine's C compiler on first use and calls `decode` through ctypes; it documents what
   the kernel computes and how it was measured.

   A row (one sequence's queries: kvh kv heads x rep query heads each) goes over its slots in chunks
   of W live ones (W = 8 or 16 floats, one vector: see below). A float32 pool's rows are read in
   place; an int8 pool's (times their fp16 scales), a bfloat16 or a float16 pool's are first
   widened to float32 in a small buffer. Then, per query head: the chunk's W dot products, summed
   as one vector by pairwise halving as they come (no per-key horizontal sum), their max, one
   rescale of what was summed under the old max, W exps as one vector, and the chunk's weighted
   values; meanwhile a share of the next chunk's cache lines is prefetched. Vectors are GCC/Clang
   vector extensions, which the compiler maps to what the machine has (AVX-512, AVX2, NEON).
   Head dims are multiples of 16. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vec.h"
#if defined(__F16C__)
#include <immintrin.h>
#endif

#define CH W /* a chunk is W live slots, so its scores are one vector */

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

/* an int8 key's or value's fp16 scale as a float: one instruction where the CPU has F16C */
static inline float scale(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return half_to_float(h);
#endif
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
#if defined(__F16C__)
    for (int64_t i = 0; i + 8 <= n; i += 8) /* n is a multiple of 16 */
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
#else
    for (int64_t i = 0; i < n; i++) dst[i] = half_to_float(x[i]);
#endif
  }
}

/* Pairwise halving. Each level takes two vectors whose lanes hold, per key, G partial sums side
   by side (in key order), and returns one holding G/2 per key for the keys of both, in order:
   the first and second halves of each key's group added. The first level takes one dot
   product's lanes per vector; L4 leaves lane c = key c's whole sum. Levels are numbered as for
   W = 16 (L1, G = 16), so 8-float vectors start at L2. */
#if W == 16
static inline vf L1(vf x, vf y) {
  return SHUF(x, y, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
         SHUF(x, y, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
}
static inline vf L2(vf x, vf y) {
  return SHUF(x, y, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
         SHUF(x, y, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
}
static inline vf L3(vf x, vf y) {
  return SHUF(x, y, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
         SHUF(x, y, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
}
static inline vf L4(vf x, vf y) {
  return SHUF(x, y, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         SHUF(x, y, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
#else
static inline vf L2(vf x, vf y) { return SHUF(x, y, 0, 1, 2, 3, 8, 9, 10, 11) + SHUF(x, y, 4, 5, 6, 7, 12, 13, 14, 15); }
static inline vf L3(vf x, vf y) { return SHUF(x, y, 0, 1, 4, 5, 8, 9, 12, 13) + SHUF(x, y, 2, 3, 6, 7, 10, 11, 14, 15); }
static inline vf L4(vf x, vf y) { return SHUF(x, y, 0, 2, 4, 6, 8, 10, 12, 14) + SHUF(x, y, 1, 3, 5, 7, 9, 11, 13, 15); }
#endif


/* A key's dot product with a query head, left in W lanes (two sums, so the FMAs of a key do not
   wait one on another). V = d / W. */
static inline vf dot(const vf *q, const float *k, int64_t V) {
  vf t0 = {0}, t1 = {0};
  for (int64_t i = 0; i + 1 < V; i += 2) {
    t0 += q[i] * ld(k + W * i);
    t1 += q[i + 1] * ld(k + W * (i + 1));
  }
  if (V & 1) t0 += q[V - 1] * ld(k + W * (V - 1));
  return t0 + t1;
}

/* A chunk's W scores of one query head as one vector, the halving done as the dot products come
   (a tree, not all W of them held at once: AVX2 has 16 registers). */
#define D(c) dot(qp, kh[c], nv)
#if W == 16
#define SCORES() L4(L3(L2(L1(D(0), D(1)), L1(D(2), D(3))), L2(L1(D(4), D(5)), L1(D(6), D(7)))), \
                    L3(L2(L1(D(8), D(9)), L1(D(10), D(11))), L2(L1(D(12), D(13)), L1(D(14), D(15)))))
#else
#define SCORES() L4(L3(L2(D(0), D(1)), L2(D(2), D(3))), L3(L2(D(4), D(5)), L2(D(6), D(7))))
#endif

/* Point k[h * CH + c], v[...] at chunk slot c's key and value of kv head h as float32: in the
   pool itself, or widened into kb, vb (kvh * CH * d floats each). */
static inline void load_chunk(const Args *a, const int64_t *slots, int n, float *kb, float *vb,
                              const float **k, const float **v) {
  const int64_t kvh = a->kvh, d = a->d;
  if (a->dtype == F32) { /* read in place */
    const float *ks = (const float *)a->k, *vs = (const float *)a->v;
    for (int c = 0; c < n; c++)
      for (int64_t h = 0; h < kvh; h++) {
        const int64_t at = (slots[c] * kvh + h) * d;
        k[h * CH + c] = ks + at;
        v[h * CH + c] = vs + at;
      }
    return;
  }
  for (int c = 0; c < n; c++)
    for (int64_t h = 0; h < kvh; h++) {
      const int64_t at = (slots[c] * kvh + h) * d, to = h * CH + c;
      float sk = 1.f, sv = 1.f;
      if (a->dtype == I8) {
        sk = scale(a->ks[slots[c] * kvh + h]);
        sv = scale(a->vs[slots[c] * kvh + h]);
      }
      float *kd = kb + to * d, *vd = vb + to * d;
      widen(a->k, at, a->dtype, sk, kd, d);
      widen(a->v, at, a->dtype, sv, vd, d);
      k[to] = kd;
      v[to] = vd;
    }
}

/* Asks for the cache lines of the keys and values of the next chunk's index entries before they
   are needed: without this each new key's first load waits on memory. `Ahead` walks the lines of
   entries [j, j + CH) (masked or not), `per` at a time before each query head: a burst of them at
   once fills the core's miss buffers and stalls the loads the arithmetic needs (measured: no
   gain). Always inlined: GCC takes a function of prefetches alone for one without effects and
   drops the call. */
typedef struct {
  int64_t e, end, line, lines, row, per; /* entry, its end, line in entry, lines per entry, bytes */
} Ahead;

static inline void ahead_init(Ahead *f, const Args *a, int64_t heads) {
  const int64_t size = a->dtype == F32 ? 4 : a->dtype == I8 ? 1 : 2;
  f->row = a->kvh * a->d * size;
  f->lines = (f->row + 63) / 64;
  f->per = (CH * f->lines + heads - 1) / heads;
}

static inline void ahead_from(Ahead *f, const Args *a, int64_t j) {
  f->e = j;
  f->end = j + CH < a->keys ? j + CH : a->keys;
  f->line = 0;
}

static inline __attribute__((always_inline)) void ahead(Ahead *f, const Args *a, const int64_t *idx) {
  for (int64_t x = 0; x < f->per && f->e < f->end; x++) {
    const int64_t at = idx[f->e] * f->row + f->line * 64;
    __builtin_prefetch((const char *)a->k + at);
    __builtin_prefetch((const char *)a->v + at);
    if (++f->line == f->lines) {
      f->line = 0;
      f->e++;
    }
  }
}

/* One row; V, the head dim's count of vectors, is a literal where it can be (so a head's query
   and output stay in registers). scratch: (kvh*rep + 2*kvh*CH) * d floats. */
#define ROW(NAME, V)                                                                               \
  static void NAME(const Args *a, float *scratch, int64_t r) {                                     \
    const int64_t d = a->d, kvh = a->kvh, rep = a->rep, heads = kvh * rep, nv = V;                 \
    const int64_t *idx = a->index + r * a->keys;                                                   \
    const uint8_t *live = a->mask + r * a->keys;                                                   \
    const float *q = a->q + r * heads * d;                                                         \
    float *acc = scratch, *kb = scratch + heads * d, *vb = kb + kvh * CH * d;                      \
    float top[heads], total[heads];                                                                \
    const float *kp[kvh * CH], *vp[kvh * CH];                                                      \
    int64_t slots[CH], j = 0;                                                                      \
    Ahead next;                                                                                    \
    ahead_init(&next, a, heads);                                                                   \
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
      ahead_from(&next, a, j);                                                                     \
      for (int64_t h = 0; h < kvh; h++) /* a short chunk's missing keys: any real one, masked */   \
        for (int c = n; c < CH; c++) kp[h * CH + c] = kp[h * CH];                                  \
      for (int64_t p = 0; p < heads; p++) {                                                        \
        const float *const *kh = kp + (p / rep) * CH, *const *vh = vp + (p / rep) * CH;            \
        vf qp[V], o[V];                                                                            \
        ahead(&next, a, idx); /* a share of the next chunk's lines */                              \
        for (int64_t i = 0; i < V; i++) qp[i] = ld(q + p * d + W * i);                             \
        vf s = SCORES() * a->scale;                                                                \
        for (int c = n; c < CH; c++) s[c] = -INFINITY;                                             \
        float m = vmax(s);                                                                         \
        m = m > top[p] ? m : top[p];                                                               \
        float corr = top[p] == -INFINITY ? 0.f : sexp(top[p] - m);                                 \
        top[p] = m;                                                                                \
        vf w = vexp(s - m);                                                                        \
        total[p] = total[p] * corr + vsum(w);                                                      \
        for (int64_t i = 0; i < V; i++) o[i] = ld(acc + p * d + W * i) * corr;                     \
        for (int c = 0; c < n; c++)                                                                \
          for (int64_t i = 0; i < V; i++) o[i] += w[c] * ld(vh[c] + W * i);                        \
        for (int64_t i = 0; i < V; i++) *(vfu *)(acc + p * d + W * i) = o[i];                      \
      }                                                                                            \
    }                                                                                              \
    for (int64_t p = 0; p < heads; p++) {                                                          \
      float inv = 1.f / total[p];                                                                  \
      for (int64_t i = 0; i < V; i++)                                                              \
        *(vfu *)(a->out + (r * heads + p) * d + W * i) = ld(acc + p * d + W * i) * inv;            \
      a->lse[r * heads + p] = top[p] + logf(total[p]);                                             \
    }                                                                                              \
  }

ROW(row64, 64 / W)
ROW(row128, 128 / W)
ROW(row_any, a->d / W)

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
