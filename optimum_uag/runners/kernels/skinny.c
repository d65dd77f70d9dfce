/* optimum-uag's skinny linear: y[r, c] = sum_k x[r, k] * W[c, k] (+ bias[c]) for a few rows (a verify block, a draft
 * tree's frontier), the weights streamed once for all rows.
 *
 * Why: on the Intel Xeon of this project MKL's sgemm serves 1-3 rows with a kernel that streams the weights once and
 * switches to a blocked GEMM at 4 rows, which packs its operands and costs a SmolLM2-135M forward +24% (39 -> 52 ms),
 * so a draft tree wider than 3 tokens did not pay there (docs/benchmarks.md, "The skinny kernel").
 *
 * Layout: W packed once into groups of G = MMAX * BW output columns, each group [K][G] contiguous. A thread runs two
 * groups at once, g and g + half (two forward streams a core, each prefetched PF steps ahead; an odd count gets a
 * group of zeros): one stream a core left
 * memory bandwidth unused (benchmarks/results/packing_two_streams.json, the projections' read rate). The
 * rows run in balanced chunks of at most R2 against the pair while it is in the core's L2. A microkernel holds R rows
 * x MMAX vectors of accumulators a group and runs k in order with one fused multiply-add per step, so every output is
 * the same sequence of roundings whatever the number of rows computed with it (a row's result does not depend on the
 * batch or block it came in).
 *
 * Built by optimum_uag/runners/skinny.py with -O3 -fopenmp and -mavx512f (BW 16) or -mavx2 -mfma (BW 8). Plain C, no
 * Python or torch headers: it compiles in 1-2 seconds and is called through ctypes. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define BW 16
#define R2 4 /* rows a chunk against two groups: 2 x 4 x 3 accumulators + weights in 32 registers */
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
#define R2 2 /* 2 x 2 x 3 accumulators + weights in 16 registers */
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
#define PF 8 /* prefetch distance, in k steps (8 x 192 bytes ahead a stream with AVX-512) */
#endif

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

/* Weights as float32, or as bfloat16 (the upper half of a float32: a draft's weights at half the bytes, widened to
 * float32 on load; every product and sum stays float32). */
#define LOAD_F32(p) VLOAD(p)
#if defined(__AVX512F__)
#define LOAD_BF16(p) \
  _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#else
#define LOAD_BF16(p) \
  _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#endif

/* R rows (R <= R2) against two groups at once (two streams), columns c0.. and c1.. */
#define MICRO2(NAME, WT, LOADW, R)                                                                                 \
  static void NAME##_##R(const float *x, int64_t K, const WT *p, const WT *p2, float *y, int64_t N, int64_t c0,   \
                         int64_t c1, const float *bias) {                                                         \
    vec acc[R][MMAX], acc2[R][MMAX];                                                                               \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)                                                           \
      _Pragma("GCC unroll 4") for (int m = 0; m < MMAX; ++m) acc[r][m] = acc2[r][m] = VZERO();                      \
    for (int64_t k = 0; k < K; ++k) {                                                                              \
      const WT *q = p + k * G, *q2 = p2 + k * G;                                                                   \
      const uintptr_t ahead = (uintptr_t)q + (uintptr_t)(PF * G * sizeof(WT));                                    \
      const uintptr_t ahead2 = (uintptr_t)q2 + (uintptr_t)(PF * G * sizeof(WT));                                  \
      _Pragma("GCC unroll 4") for (int l = 0; l < (int)(G * sizeof(WT)); l += 64) {                                \
        _mm_prefetch((const char *)(ahead + l), _MM_HINT_T0);                                                      \
        _mm_prefetch((const char *)(ahead2 + l), _MM_HINT_T0);                                                     \
      }                                                                                                            \
      _Pragma("GCC unroll 4") for (int m = 0; m < MMAX; ++m) {                                                     \
        const vec w = LOADW(q + m * BW), w2 = LOADW(q2 + m * BW);                                                  \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {                                                      \
          const vec xv = VBCAST(x[r * K + k]);                                                                     \
          acc[r][m] = VFMA(xv, w, acc[r][m]);                                                                      \
          acc2[r][m] = VFMA(xv, w2, acc2[r][m]);                                                                   \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)                                                           \
      _Pragma("GCC unroll 4") for (int m = 0; m < MMAX; ++m) {                                                     \
        store(y + r * N, acc[r][m], bias, c0 + m * BW, N);                                                         \
        store(y + r * N, acc2[r][m], bias, c1 + m * BW, N);                                                        \
      }                                                                                                            \
  }

#if R2 >= 4
#define MICROS_OF(NAME, WT, LOADW) MICRO2(NAME, WT, LOADW, 1) MICRO2(NAME, WT, LOADW, 2) MICRO2(NAME, WT, LOADW, 3) \
  MICRO2(NAME, WT, LOADW, 4)
#define TABLE_OF(NAME) {0, NAME##_1, NAME##_2, NAME##_3, NAME##_4}
#else
#define MICROS_OF(NAME, WT, LOADW) MICRO2(NAME, WT, LOADW, 1) MICRO2(NAME, WT, LOADW, 2)
#define TABLE_OF(NAME) {0, NAME##_1, NAME##_2}
#endif

/* Groups packed: an even number (a group of zero columns after an odd count), so that every group has a partner. */
static int64_t group_count(int64_t N) {
  const int64_t groups = (N + G - 1) / G;
  return groups + (groups & 1);
}

/* Elements of a packed [N, K] weight (skinny_pack's output). */
int64_t skinny_packed_size(int64_t N, int64_t K) { return group_count(N) * K * G; }

/* x [rows, K], packed [groups][K][G] (group_count), y [rows, N]; bias may be NULL; threads > 0. Group g runs beside
 * group g + half (the columns of a zero group past N are not stored), the rows in balanced chunks of at most R2 (9 rows
 * as 3 + 3 + 3). */
#define LINEAR(FN, WT, LOADW)                                                                                      \
  MICROS_OF(FN##_two, WT, LOADW)                                                                                   \
  void FN(const float *x, int64_t rows, int64_t K, const WT *packed, int64_t N, const float *bias, float *y,       \
          int threads) {                                                                                          \
    typedef void (*two_fn)(const float *, int64_t, const WT *, const WT *, float *, int64_t, int64_t, int64_t,    \
                           const float *);                                                                        \
    static const two_fn TWO[] = TABLE_OF(FN##_two);                                                                \
    const int64_t half = group_count(N) / 2;                                                                       \
    const int64_t chunks = (rows + R2 - 1) / R2;                                                                   \
    _Pragma("omp parallel for num_threads(threads) schedule(static) if (threads > 1 && half > 1)")                 \
    for (int64_t g = 0; g < half; ++g) {                                                                           \
      int64_t r0 = 0;                                                                                              \
      for (int64_t c = 0; c < chunks; ++c) {                                                                       \
        const int r = (int)((rows - r0) / (chunks - c));                                                           \
        TWO[r](x + r0 * K, K, packed + g * K * G, packed + (g + half) * K * G, y + r0 * N, N, g * G,               \
               (g + half) * G, bias);                                                                              \
        r0 += r;                                                                                                   \
      }                                                                                                            \
    }                                                                                                              \
  }

LINEAR(skinny_linear, float, LOAD_F32)
LINEAR(skinny_linear_bf16, uint16_t, LOAD_BF16)

/* W [N, K] row-major -> packed [group_count(N)][K][G], zero columns past N. */
void skinny_pack(const float *w, int64_t N, int64_t K, float *packed) {
  const int64_t groups = group_count(N);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < G; ++j) {
        const int64_t c = g * G + j;
        packed[(g * K + k) * G + j] = c < N ? w[c * K + k] : 0.f;
      }
}

/* The same layout in bfloat16, rounded to nearest even (NaN kept a NaN). */
static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

void skinny_pack_bf16(const float *w, int64_t N, int64_t K, uint16_t *packed) {
  const int64_t groups = group_count(N);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < G; ++j) {
        const int64_t c = g * G + j;
        packed[(g * K + k) * G + j] = c < N ? to_bf16(w[c * K + k]) : 0;
      }
}
