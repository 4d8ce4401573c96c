/* One token per row from softmax(logits / temperature), with its logprob, in two passes over
   the row: sampler.py builds this file with the machine's C compiler (native.py) and calls
   `draw` through ctypes for rows it does not truncate (no top-p, no top-k); it documents what
   the draw is and how it was measured.

   Per row: the largest logit m; then each chunk of CH logits' exp((x - m) / T) as vectors, their
   cumulative sums per chunk kept in float64; the row's uniform u times the total picks the chunk
   where the cumulative mass passes it, and a scan of that chunk's exps (recomputed) the token.
   Rounding can leave the target past the chunk's last token of nonzero mass: that token, then.
   The logprob is (x - m) / T - log(total). A greedy row (inv_t 0) takes the first largest logit,
   with its logprob at temperature 1. A row whose largest logit is not finite is left to the
   caller. */
#include <math.h>
#include <stdint.h>

#include "vec.h"

#define CH 128 /* logits per chunk: its exps stay in L1 for the rescan */

/* The largest of n floats; NaN if any is NaN */
static float row_max(const float *x, int64_t n) {
  int64_t i = 0;
  float m = -INFINITY;
  int nan = 0;
  if (n >= W) {
    vf v = ld(x);
    vi bad = (vi)(v != v);
    for (i = W; i + W <= n; i += W) {
      const vf y = ld(x + i);
      bad |= (vi)(y != y);
      v = vmax2(v, y);
    }
    m = vmax(v);
    for (int k = 0; k < W; k++) nan |= bad[k];
  }
  for (; i < n; i++) {
    nan |= x[i] != x[i];
    m = x[i] > m ? x[i] : m;
  }
  return nan ? NAN : m;
}

/* exp((x[i] - m) * s) for i in [lo, hi), summed */
static float chunk_mass(const float *x, int64_t lo, int64_t hi, float m, float s) {
  vf acc = {0};
  int64_t i = lo;
  for (; i + W <= hi; i += W) acc += vexp((ld(x + i) - m) * s);
  float t = vsum(acc);
  for (; i < hi; i++) t += sexp((x[i] - m) * s);
  return t;
}

/* rows of `vocab` logits; inv_t: 1 / temperature per row (0: greedy); u: a uniform in [0, 1) per
   row; cdf: scratch of ceil(vocab / CH) doubles. Writes tokens and logprobs. Returns -1, or the
   first row whose largest logit is not finite (a NaN or +inf logit, every logit -inf), for which
   nothing is written. */
int64_t draw(const float *logits, int64_t rows, int64_t vocab, const float *inv_t, const double *u,
             int64_t *tokens, float *logprobs, double *cdf) {
  const int64_t chunks = (vocab + CH - 1) / CH;
  for (int64_t r = 0; r < rows; r++) {
    const float *x = logits + r * vocab;
    const float m = row_max(x, vocab), s = inv_t[r] > 0 ? inv_t[r] : 1.f;
    if (!(m > -INFINITY && m < INFINITY)) return r;
    double total = 0;
    int64_t last = 0; /* the last chunk with mass */
    for (int64_t c = 0; c < chunks; c++) {
      const int64_t hi = (c + 1) * CH < vocab ? (c + 1) * CH : vocab;
      const float mass = chunk_mass(x, c * CH, hi, m, s);
      total += mass;
      cdf[c] = total;
      if (mass > 0) last = c;
    }
    int64_t token = 0;
    if (inv_t[r] > 0) {
      const double target = u[r] * total;
      int64_t c = 0;
      while (c < last && cdf[c] <= target) c++;
      double before = c ? cdf[c - 1] : 0;
      const int64_t hi = (c + 1) * CH < vocab ? (c + 1) * CH : vocab;
      token = c * CH;
      for (int64_t i = c * CH; i < hi && before <= target; i++) {
        const float e = sexp((x[i] - m) * s);
        if (e > 0) token = i;
        before += e;
      }
    } else {
      while (x[token] != m) token++;
    }
    tokens[r] = token;
    logprobs[r] = (x[token] - m) * s - (float)log(total);
  }
  return -1;
}
