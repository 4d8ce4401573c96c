/* Block-sparse decode rows' plan on the CPU, in one call per layer: what sparse.py's `select`,
   `rest` and `_reads` compute with some hundred PyTorch operations, for rows of one query each.
   sparse_decode.py builds this file with the machine's C compiler on first use, calls `plan`
   through ctypes and documents what it is for; sparse.py says what the plan means.

   Per row and kv head: Quest's bound of each of the row's blocks (the kv head's query heads'
   positive parts summed, times the block's max key, plus their negative parts times its min key),
   the sink and local blocks forced in, the top `s` by bound, in block order; the HeadsApart slots
   and mask of those blocks' keys; and, per group of `g` blocks, the mean key and value of the
   blocks the head did not choose (from the per-block sums), with the log of their key count as a
   bias, and each of the head's queries attended over those means (its output and log-sum-exp,
   which the paged kernel folds into its own: `prior`). */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {          /* mirrors sparse_decode.py's _Args */
  const float *q;         /* [rows, kvh * rep, d] */
  const float *kmax, *kmin; /* [pool blocks, kvh, d] */
  const float *ksum, *vsum; /* [pool blocks, kvh, d], or NULL: no group means */
  const int64_t *tables;  /* [rows, width] */
  const int64_t *nblocks, *pos; /* [rows] */
  int64_t *slots;         /* out [rows, kvh, s * bs] */
  uint8_t *mask;          /* out [rows, kvh, s * bs] */
  float *rest_out, *rest_lse; /* out [rows, kvh * rep, d], [rows, kvh * rep]: over the group means */
  int64_t kvh, rep, d, width, bs, sinks, local, topk, s, g, groups;
} Args;

/* The `s` highest of score[0, n) into chosen[s - min(s, n), s), ascending block order; -1 before
   them. Ties go to the lower block. `taken` marks the chosen blocks; `best` holds s. */
static void choose(const float *score, int64_t n, int64_t s, int64_t *chosen, uint8_t *taken, int64_t *best) {
  int64_t m = n < s ? n : s;
  int64_t have = 0;
  for (int64_t j = 0; j < n; j++) { /* an insertion into best[], highest score first */
    if (have == m && !(score[j] > score[best[m - 1]])) continue;
    int64_t at = have < m ? have++ : m - 1;
    while (at > 0 && score[j] > score[best[at - 1]]) {
      best[at] = best[at - 1];
      at--;
    }
    best[at] = j;
  }
  memset(taken, 0, (size_t)n);
  for (int64_t i = 0; i < m; i++) taken[best[i]] = 1;
  int64_t c = s - m;
  for (int64_t i = 0; i < c; i++) chosen[i] = -1;
  for (int64_t j = 0; j < n && c < s; j++)
    if (taken[j]) chosen[c++] = j;
}

/* The row's queries of kv head h attended over the means (mk, mv [groups, d], bias [groups]). */
static void attend_means(const Args *a, int64_t r, int64_t h, const float *mk, const float *mv, const float *bias,
                         float *sc) {
  const int64_t d = a->d, heads = a->kvh * a->rep;
  const float scale = 1.f / sqrtf((float)d);
  for (int64_t x = 0; x < a->rep; x++) {
    const int64_t p = r * heads + h * a->rep + x;
    const float *q = a->q + p * d;
    float *out = a->rest_out + p * d, top = -INFINITY, total = 0.f;
    for (int64_t i = 0; i < a->groups; i++) {
      float dot = 0.f;
      for (int64_t e = 0; e < d; e++) dot += q[e] * mk[i * d + e];
      sc[i] = bias[i] == -INFINITY ? -INFINITY : dot * scale + bias[i];
      top = sc[i] > top ? sc[i] : top;
    }
    for (int64_t e = 0; e < d; e++) out[e] = 0.f;
    if (top == -INFINITY) { /* no unread keys: nothing to fold in */
      a->rest_lse[p] = -INFINITY;
      continue;
    }
    for (int64_t i = 0; i < a->groups; i++) {
      const float w = expf(sc[i] - top);
      total += w;
      for (int64_t e = 0; e < d; e++) out[e] += w * mv[i * d + e];
    }
    for (int64_t e = 0; e < d; e++) out[e] /= total;
    a->rest_lse[p] = top + logf(total);
  }
}

/* score[0, n): Quest's bound of each of row r's blocks for kv head h (+inf for its sinks and local
   blocks, which are always read; 0 for the others when nothing is chosen by score). */
static void bounds(const Args *a, int64_t r, int64_t h, int64_t n, float *score) {
  const int64_t d = a->d, kvh = a->kvh;
  const int64_t *table = a->tables + r * a->width;
  const int scored = a->topk > 0 && a->width > a->sinks + a->local;
  float top[d], bottom[d]; /* the head's query heads' positive and negative parts, summed */
  for (int64_t e = 0; e < d; e++) top[e] = bottom[e] = 0.f;
  for (int64_t x = 0; scored && x < a->rep; x++) {
    const float *qh = a->q + (r * kvh * a->rep + h * a->rep + x) * d;
    for (int64_t e = 0; e < d; e++) {
      top[e] += qh[e] > 0.f ? qh[e] : 0.f;
      bottom[e] += qh[e] < 0.f ? qh[e] : 0.f;
    }
  }
  for (int64_t j = 0; j < n; j++) {
    if (j < a->sinks || j >= n - a->local || !scored) {
      score[j] = (j < a->sinks || j >= n - a->local) ? INFINITY : 0.f;
      continue;
    }
    const float *hi = a->kmax + (table[j] * kvh + h) * d, *lo = a->kmin + (table[j] * kvh + h) * d;
    float sum = 0.f;
    for (int64_t e = 0; e < d; e++) sum += top[e] * hi[e] + bottom[e] * lo[e];
    score[j] = sum;
  }
}

/* The HeadsApart slots and mask of the chosen blocks' keys (-1: a masked copy of block 0's). */
static void reads(const Args *a, int64_t r, int64_t h, const int64_t *chosen) {
  const int64_t kvh = a->kvh, keys = a->s * a->bs;
  const int64_t *table = a->tables + r * a->width;
  int64_t *slots = a->slots + (r * kvh + h) * keys;
  uint8_t *mask = a->mask + (r * kvh + h) * keys;
  for (int64_t c = 0; c < a->s; c++) {
    const int64_t block = table[chosen[c] < 0 ? 0 : chosen[c]];
    for (int64_t o = 0; o < a->bs; o++) {
      const int64_t at = c * a->bs + o, key = chosen[c] * a->bs + o;
      slots[at] = (block * a->bs + o) * kvh + h;
      mask[at] = chosen[c] >= 0 && key <= a->pos[r];
    }
  }
  if (a->pos[r] < 0) mask[0] = 1; /* a padding query sees one key (its output is dropped) */
}

/* mk, mv [groups, d]: each group's mean key and value over the blocks not `taken`; bias [groups]:
   the log of how many keys a mean stands for (-inf: none). */
static void means(const Args *a, int64_t r, int64_t h, int64_t n, const uint8_t *taken, float *mk, float *mv,
                  float *bias) {
  const int64_t d = a->d, kvh = a->kvh;
  const int64_t *table = a->tables + r * a->width;
  for (int64_t i = 0; i < a->groups; i++) {
    const int64_t lo = i * a->g < n ? i * a->g : n, hi = (i + 1) * a->g < n ? (i + 1) * a->g : n;
    float *k = mk + i * d, *v = mv + i * d;
    int64_t count = 0;
    for (int64_t e = 0; e < d; e++) k[e] = v[e] = 0.f;
    for (int64_t j = lo; j < hi; j++) {
      if (taken[j]) continue;
      const float *ks = a->ksum + (table[j] * kvh + h) * d, *vs = a->vsum + (table[j] * kvh + h) * d;
      for (int64_t e = 0; e < d; e++) {
        k[e] += ks[e];
        v[e] += vs[e];
      }
      count++;
    }
    const float inv = 1.f / (float)(count ? count * a->bs : 1);
    for (int64_t e = 0; e < d; e++) {
      k[e] *= inv;
      v[e] *= inv;
    }
    bias[i] = count ? logf((float)(count * a->bs)) : -INFINITY;
  }
}

static void row_head(const Args *a, int64_t r, int64_t h, float *score, uint8_t *taken, int64_t *chosen,
                     int64_t *best, float *mk, float *mv, float *bias) {
  const int64_t n = a->nblocks[r] < a->width ? a->nblocks[r] : a->width; /* never past the table */
  bounds(a, r, h, n, score);
  choose(score, n, a->s, chosen, taken, best);
  reads(a, r, h, chosen);
  if (!a->ksum) return;
  means(a, r, h, n, taken, mk, mv, bias);
  attend_means(a, r, h, mk, mv, bias, score); /* the bounds are spent: their room holds scores */
}

/* (row, kv head) pairs [u0, u1) in row-major order (a long row's kv heads may go to different
   threads); scratch: 2 * s int64s, (2 * d + 1) * groups + width floats and width bytes (none on
   the stack: a table may be millions of blocks wide). */
int plan(const Args *a, void *scratch, int64_t u0, int64_t u1) {
  int64_t *chosen = (int64_t *)scratch, *best = chosen + a->s;
  float *mk = (float *)(best + a->s), *mv = mk + a->groups * a->d, *bias = mv + a->groups * a->d;
  float *score = bias + a->groups;
  uint8_t *taken = (uint8_t *)(score + (a->width > a->groups ? a->width : a->groups));
  for (int64_t u = u0; u < u1; u++) row_head(a, u / a->kvh, u % a->kvh, score, taken, chosen, best, mk, mv, bias);
  return 0;
}
