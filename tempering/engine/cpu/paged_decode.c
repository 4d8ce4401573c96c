/* Decode attention read straight from a paged KV pool on the CPU. paged_decode.py builds this file
   with the machine's C compiler on first use and calls `decode` through ctypes; it documents what
   the kernel computes and how it was measured.

   A row (one sequence's queries: kvh kv heads x rep query heads each) goes over its slots in chunks
   of W live ones (W = 8 or 16 floats, one vector: see below). Every pool dtype is read where it is
   stored: float32 as is; bfloat16, float16 and int8 widened to float32 by each load (an int8
   row's fp16 scale multiplies its key's score and its value's weight, not the W elements). Then,
   per query head: the chunk's W dot products side by side, summed as one vector by pairwise
   halving (no per-key horizontal sum), their max, one rescale of what was summed under the old
   max, W exps as one vector, and the chunk's weighted values; meanwhile a share of the next
   chunk's cache lines is prefetched. Vectors are GCC/Clang vector extensions, which the compiler
   maps to what the machine has (AVX-512, AVX2, NEON); the widening loads use x86's conversion
   instructions where the build has them. Each dtype has rows of its own (a macro), so the
   float32 path has no conversion in it.
   Head dims are multiples of 16. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vec.h"
#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
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
  const float *prior_out, *prior_lse; /* as out, lse: attention over other keys to fold in; or NULL */
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
#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
  return _cvtsh_ss(h);
#else
  return half_to_float(h);
#endif
}

/* W stored elements at p + e as float32 (not yet times an int8 row's scale): one load and a
   widening conversion, so 16-bit and int8 rows are read as stored, with no widened copy. x86's
   conversion instructions where the build has them, else vector-extension or plain C. */
#if W == 8 && defined(__AVX2__)
#define WIDE_I8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define WIDE_U16(p) _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define WIDE_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#elif W == 16 && defined(__AVX512F__)
#define WIDE_I8(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define WIDE_U16(p) _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p)))
#define WIDE_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#endif
#if W == 8 && defined(__AVX2__) && !defined(__F16C__)
#undef WIDE_F16
#endif

typedef int8_t vb __attribute__((vector_size(W), aligned(1)));
typedef uint16_t vh __attribute__((vector_size(2 * W), aligned(1)));

static inline vf ld_f32(const void *p, int64_t e) { return ld((const float *)p + e); }

static inline vf ld_i8(const void *p, int64_t e) {
#ifdef WIDE_I8
  return (vf)WIDE_I8((const int8_t *)p + e);
#else
  return __builtin_convertvector(*(const vb *)((const int8_t *)p + e), vf);
#endif
}

static inline vf ld_bf16(const void *p, int64_t e) { /* the top half of a float32 */
#ifdef WIDE_U16
  return (vf)((vi)WIDE_U16((const uint16_t *)p + e) << 16);
#else
  return (vf)(__builtin_convertvector(*(const vh *)((const uint16_t *)p + e), vi) << 16);
#endif
}

static inline vf ld_f16(const void *p, int64_t e) {
#ifdef WIDE_F16
  return (vf)WIDE_F16((const uint16_t *)p + e);
#else
  vf x;
  for (int l = 0; l < W; l++) x[l] = half_to_float(((const uint16_t *)p)[e + l]);
  return x;
#endif
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


/* A chunk's W scores of one query head as one vector: the W dot products made side by side, a
   head-dim vector at a time (W independent sums in flight, each key's vector widened once as
   read), then their lanes summed by pairwise halving (lane c = key c's whole sum). */
#if W == 16
#define HALVE(s) L4(L3(L2(L1(s[0], s[1]), L1(s[2], s[3])), L2(L1(s[4], s[5]), L1(s[6], s[7]))), \
                    L3(L2(L1(s[8], s[9]), L1(s[10], s[11])), L2(L1(s[12], s[13]), L1(s[14], s[15]))))
#else
#define HALVE(s) L4(L3(L2(s[0], s[1]), L2(s[2], s[3])), L3(L2(s[4], s[5]), L2(s[6], s[7])))
#endif
#define SCORES(LD, NAME)                                                                           \
  static inline vf NAME(const float *q, const void *const *k, int64_t V) {                         \
    vf s[CH];                                                                                      \
    for (int c = 0; c < CH; c++) s[c] = (vf){0};                                                   \
    for (int64_t i = 0; i < V; i++) {                                                              \
      const vf qi = ld(q + W * i);                                                                 \
      for (int c = 0; c < CH; c++) s[c] += qi * LD(k[c], W * i);                                   \
    }                                                                                              \
    return HALVE(s);                                                                               \
  }
SCORES(ld_f32, scores_f32)
SCORES(ld_i8, scores_i8)
SCORES(ld_bf16, scores_bf16)
SCORES(ld_f16, scores_f16)

/* Point k[h * CH + c], v[...] at chunk slot c's key and value of kv head h as stored; for an
   int8 pool, ks[h * CH + c], vs[...] get their scales. */
static inline void load_chunk(const Args *a, const int64_t *slots, int n, int64_t size, const void **k,
                              const void **v, float *ks, float *vs) {
  const int64_t kvh = a->kvh, d = a->d;
  for (int c = 0; c < n; c++)
    for (int64_t h = 0; h < kvh; h++) {
      const int64_t at = slots[c] * kvh + h;
      k[h * CH + c] = (const char *)a->k + at * d * size;
      v[h * CH + c] = (const char *)a->v + at * d * size;
      if (ks) {
        ks[h * CH + c] = scale(a->ks[at]);
        vs[h * CH + c] = scale(a->vs[at]);
      }
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

/* One row of pool dtype LD (SC: its scores; I8: 1 for an int8 pool, whose rows' scales multiply
   the scores and the values' weights); V, the head dim's count of vectors, is a literal where it
   can be (a head's output stays in registers). scratch: kvh*rep*d floats. */
#define ROW(NAME, LD, SC, I8, SIZE, V)                                                             \
  static void NAME(const Args *a, float *scratch, int64_t r) {                                     \
    const int64_t d = a->d, kvh = a->kvh, rep = a->rep, heads = kvh * rep, nv = V;                 \
    const int64_t *idx = a->index + r * a->keys;                                                   \
    const uint8_t *live = a->mask + r * a->keys;                                                   \
    const float *q = a->q + r * heads * d;                                                         \
    float *acc = scratch;                                                                          \
    float top[heads], total[heads];                                                                \
    const void *kp[kvh * CH], *vp[kvh * CH];                                                       \
    float ksc[I8 ? kvh * CH : 1] __attribute__((aligned(64)));                                     \
    float vsc[I8 ? kvh * CH : 1] __attribute__((aligned(64)));                                     \
    int64_t slots[CH], j = 0;                                                                      \
    Ahead next;                                                                                    \
    ahead_init(&next, a, heads);                                                                   \
    memset(acc, 0, sizeof(float) * heads * d);                                                     \
    for (int64_t p = 0; p < heads; p++) {                                                          \
      top[p] = -INFINITY;                                                                          \
      total[p] = 0.f;                                                                              \
      if (a->prior_lse && a->prior_lse[r * heads + p] > -INFINITY) { /* a softmax begun: its max */ \
        top[p] = a->prior_lse[r * heads + p]; /* is its lse, so its sum is 1 and its sum of */      \
        total[p] = 1.f;                       /* weighted values its output */                     \
        memcpy(acc + p * d, a->prior_out + (r * heads + p) * d, sizeof(float) * d);                 \
      }                                                                                            \
    }                                                                                              \
    for (;;) {                                                                                     \
      int n = 0;                                                                                   \
      for (; j < a->keys && n < CH; j++)                                                           \
        if (live[j]) slots[n++] = idx[j];                                                          \
      if (!n) break;                                                                               \
      load_chunk(a, slots, n, SIZE, kp, vp, I8 ? ksc : NULL, I8 ? vsc : NULL);                     \
      ahead_from(&next, a, j);                                                                     \
      for (int64_t h = 0; h < kvh; h++) /* a short chunk's missing keys: any real one, masked */   \
        for (int c = n; c < CH; c++) {                                                             \
          kp[h * CH + c] = kp[h * CH];                                                             \
          if (I8) ksc[h * CH + c] = vsc[h * CH + c] = 0.f;                                         \
        }                                                                                          \
      for (int64_t p = 0; p < heads; p++) {                                                        \
        const int64_t h = p / rep;                                                                 \
        const void *const *kh = kp + h * CH, *const *vh = vp + h * CH;                             \
        vf o[V];                                                                                   \
        ahead(&next, a, idx); /* a share of the next chunk's lines */                              \
        vf s = SC(q + p * d, kh, nv) * a->scale;                                                   \
        if (I8) s *= ld(ksc + h * CH);                                                             \
        for (int c = n; c < CH; c++) s[c] = -INFINITY;                                             \
        float m = vmax(s);                                                                         \
        m = m > top[p] ? m : top[p];                                                               \
        float corr = top[p] == -INFINITY ? 0.f : sexp(top[p] - m);                                 \
        top[p] = m;                                                                                \
        vf w = vexp(s - m);                                                                        \
        total[p] = total[p] * corr + vsum(w);                                                      \
        if (I8) w *= ld(vsc + h * CH); /* a value's scale, in its weight */                        \
        for (int64_t i = 0; i < V; i++) o[i] = ld(acc + p * d + W * i) * corr;                     \
        for (int c = 0; c < n; c++)                                                                \
          for (int64_t i = 0; i < V; i++) o[i] += w[c] * LD(vh[c], W * i);                         \
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

/* Each pool dtype's rows for head dims 64, 128 and any other multiple of 16. */
#define ROWS(T, LD, I8, SIZE)                                                                      \
  ROW(T##_64, LD, scores_##T, I8, SIZE, 64 / W)                                                    \
  ROW(T##_128, LD, scores_##T, I8, SIZE, 128 / W)                                                  \
  ROW(T##_any, LD, scores_##T, I8, SIZE, a->d / W)                                                 \
  static void T##_rows(const Args *a, float *scratch, int64_t r0, int64_t r1) {                    \
    for (int64_t r = r0; r < r1; r++) {                                                            \
      if (a->d == 64) T##_64(a, scratch, r);                                                       \
      else if (a->d == 128) T##_128(a, scratch, r);                                                \
      else T##_any(a, scratch, r);                                                                 \
    }                                                                                              \
  }
ROWS(f32, ld_f32, 0, 4)
ROWS(i8, ld_i8, 1, 1)
ROWS(bf16, ld_bf16, 0, 2)
ROWS(f16, ld_f16, 0, 2)

/* Rows [r0, r1). Returns 0, or -1 for a head dim that is not a multiple of 16 (paged_decode.py
   checks first). */
int decode(const Args *a, float *scratch, int64_t r0, int64_t r1) {
  if (a->d % 16) return -1;
  switch (a->dtype) {
    case F32: f32_rows(a, scratch, r0, r1); break;
    case I8: i8_rows(a, scratch, r0, r1); break;
    case BF16: bf16_rows(a, scratch, r0, r1); break;
    default: f16_rows(a, scratch, r0, r1);
  }
  return 0;
}
