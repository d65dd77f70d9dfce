/* optimum-uag's skinny linear: y[r, c] = sum_k x[r, k] * W[c, k] (+ bias[c]) for a few rows (a verify block, a draft
 * tree's frontier), the weights streamed once for all rows.
 *
 * Why: on the Intel Xeon of this project MKL's sgemm serves 1-3 rows with a kernel that streams the weights once and
 * switches to a blocked GEMM at 4 rows, which packs its operands and costs a SmolLM2-135M forward +24% (39 -> 52 ms),
 * so a draft tree wider than 3 tokens did not pay there (docs/benchmarks.md, "The skinny kernel").
 *
 * Layout: W packed once into groups of G = MMAX * BW output columns, each group [K][G] contiguous (one forward stream
 * per group, prefetched PF steps ahead). A microkernel holds R rows x MMAX vectors of accumulators and runs k in
 * order with one fused multiply-add per step, so every output is the same sequence of roundings whatever the number
 * of rows computed with it (a row's result does not depend on the batch or block it came in).
 *
 * Built by optimum_uag/runners/skinny.py with -O3 -fopenmp and -mavx512f (BW 16) or -mavx2 -mfma (BW 8). Plain C, no
 * Python or torch headers: it compiles in 1-2 seconds and is called through ctypes. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define BW 16
#define RMAX 8
#define MMAX 3
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VBCAST(v) _mm512_set1_ps(v)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
#define BW 8
#define RMAX 4
#define MMAX 3
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VBCAST(v) _mm256_set1_ps(v)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#else
#error "skinny.c needs AVX-512F or AVX2 + FMA"
#endif
#define G (MMAX * BW)
#ifndef PF
#define PF 16 /* prefetch distance, in k steps (16 x 192 bytes ahead with AVX-512) */
#endif

int skinny_group_width(void) { return G; }
int skinny_block_width(void) { return BW; }

static inline void store(float *y, vec v, const float *bias, int64_t c, int64_t n) {
  if (bias) {
    float t[BW];
    for (int i = 0; i < BW; ++i) t[i] = c + i < n ? bias[c + i] : 0.f;
    v = VADD(v, VLOAD(t));
  }
  if (c + BW <= n) {
    VSTORE(y + c, v);
  } else if (c < n) {
    float t[BW];
    VSTORE(t, v);
    memcpy(y + c, t, sizeof(float) * (size_t)(n - c));
  }
}

/* R rows (R <= RMAX) against one group of G columns starting at column c0. */
#define MICRO(R)                                                                                                   \
  static void micro_##R(const float *x, int64_t K, const float *p, float *y, int64_t N, int64_t c0,              \
                        const float *bias) {                                                                      \
    vec acc[R][MMAX];                                                                                              \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)                                                           \
      _Pragma("GCC unroll 4") for (int m = 0; m < MMAX; ++m) acc[r][m] = VZERO();                                   \
    for (int64_t k = 0; k < K; ++k) {                                                                              \
      const float *q = p + k * G;                                                                                  \
      /* a hint PF steps ahead (into the next group at the end of this one; past the last, a prefetch never     \
         faults: the address is formed as an integer, not by pointer arithmetic past the buffer) */              \
      const uintptr_t ahead = (uintptr_t)q + (uintptr_t)(PF * G * 4);                                             \
      _Pragma("GCC unroll 4") for (int l = 0; l < G * 4; l += 64) _mm_prefetch((const char *)(ahead + l),         \
                                                                              _MM_HINT_T0);                       \
      vec w[MMAX];                                                                                                 \
      _Pragma("GCC unroll 4") for (int m = 0; m < MMAX; ++m) w[m] = VLOAD(q + m * BW);                             \
      _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {                                                        \
        vec xv = VBCAST(x[r * K + k]);                                                                             \
        _Pragma("GCC unroll 4") for (int m = 0; m < MMAX; ++m) acc[r][m] = VFMA(xv, w[m], acc[r][m]);              \
      }                                                                                                            \
    }                                                                                                              \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)                                                           \
      _Pragma("GCC unroll 4") for (int m = 0; m < MMAX; ++m) store(y + r * N, acc[r][m], bias, c0 + m * BW, N);   \
  }
MICRO(1)
MICRO(2)
MICRO(3)
MICRO(4)
#if RMAX >= 8
MICRO(5)
MICRO(6)
MICRO(7)
MICRO(8)
#endif

typedef void (*micro_fn)(const float *, int64_t, const float *, float *, int64_t, int64_t, const float *);
static const micro_fn MICROS[] = {0, micro_1, micro_2, micro_3, micro_4,
#if RMAX >= 8
                                  micro_5, micro_6, micro_7, micro_8
#endif
};

/* W [N, K] row-major -> packed [ceil(N / G)][K][G], zero columns past N. */
void skinny_pack(const float *w, int64_t N, int64_t K, float *packed) {
  const int64_t groups = (N + G - 1) / G;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < G; ++j) {
        const int64_t c = g * G + j;
        packed[(g * K + k) * G + j] = c < N ? w[c * K + k] : 0.f;
      }
}

/* x [rows, K], packed from skinny_pack, y [rows, N]; bias may be NULL; threads > 0. */
void skinny_linear(const float *x, int64_t rows, int64_t K, const float *packed, int64_t N, const float *bias,
                   float *y, int threads) {
  const int64_t groups = (N + G - 1) / G;
  const int64_t chunks = (rows + RMAX - 1) / RMAX;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const float *p = packed + g * K * G;
    int64_t r0 = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int r = (int)((rows - r0) / (chunks - c)); /* balanced: 9 rows as 4 + 5, not 8 + 1 */
      MICROS[r](x + r0 * K, K, p, y + r0 * N, N, g * G, bias);
      r0 += r;
    }
  }
}
