/* The compiled combine's kernels, shared by _tiny.c (one host: every rank's arena
 * region) and _mpi_rows.c (across hosts: every rank's row of an exchange).
 *
 * Only the (dtype, op) pairs whose result is bitwise the same as NumPy's ufunc
 * loops have a kernel: integer arithmetic (wrapping, so computed unsigned) and
 * bitwise ops, integer MIN/MAX, floating-point SUM and PRODUCT (one IEEE
 * operation per element, in the same left-to-right rank order as
 * meshcast.lanes._reduce and meshcast.ops.reduce_many; built with
 * -ffp-contract=off, so no fused multiply-add changes a bit), and floating-point
 * MIN/MAX picking what NumPy's maximum/minimum pick (ORDER_PICKS below; ops.py
 * enables them only where this NumPy is seen to pick the same), and bool's logical
 * ops (TRUTH_OR below). Complex stays with NumPy. So a rank that takes the general
 * path still ends with bitwise the same result.
 *
 * A kernel code is type * 8 + op, the numbering of lanes._C_TYPES and _C_OPS.
 * The includer defines FOLD_SOURCE(r), the address of source r's first element,
 * and FOLD_SOURCES, how many there are (at least 2), then writes a function with
 * `out` and `count` in scope whose body is FOLD_SWITCH(type, op): 0, or -1 when
 * there is no such kernel.
 */
#ifndef MESHCAST_FOLD_H
#define MESHCAST_FOLD_H

#include <stdint.h>
#include <string.h>

enum { OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_BAND, OP_BOR, OP_BXOR, N_OPS };
enum { T_I8, T_U8, T_I16, T_U16, T_I32, T_U32, T_I64, T_U64, T_F32, T_F64, T_BOOL, T_F16, T_BF16,
       N_TYPES };

#define FOLD(T, F)                                                       \
    do {                                                                 \
        T *restrict o = (T *)out;                                        \
        const T *restrict a = (const T *)(FOLD_SOURCE(0));               \
        const T *restrict b = (const T *)(FOLD_SOURCE(1));               \
        for (Py_ssize_t i = 0; i < count; i++)                           \
            o[i] = F(a[i], b[i]);                                        \
        for (Py_ssize_t r = 2; r < FOLD_SOURCES; r++) {                  \
            const T *restrict c = (const T *)(FOLD_SOURCE(r));           \
            for (Py_ssize_t i = 0; i < count; i++)                       \
                o[i] = F(o[i], c[i]);                                    \
        }                                                                \
    } while (0)

#define ADD(x, y) ((x) + (y))
#define MUL(x, y) ((x) * (y))
#define LESSER(x, y) ((x) < (y) ? (x) : (y))
#define GREATER(x, y) ((x) > (y) ? (x) : (y))
/* NumPy's float maximum/minimum: a NaN wins (the first one, payload kept), and of
 * two equal values (-0.0 and 0.0) the second. `x > y ? x : y` (one maxps) already
 * picks y when y is NaN or the two are equal; only a NaN x needs a second pick. One
 * selection per statement, so that the loop vectorizes (nested conditionals do not);
 * the fold reads other cores' regions, so every extra instruction in the loop costs
 * loads in flight. */
#define ORDER_PICKS(T, NAME, BEATS)                                      \
    static inline T NAME(T x, T y) {                                     \
        T m = x BEATS y ? x : y;                                         \
        return x != x ? x : m;                                           \
    }
ORDER_PICKS(float, max_f32, >)
ORDER_PICKS(float, min_f32, <)
ORDER_PICKS(double, max_f64, >)
ORDER_PICKS(double, min_f64, <)

#define AND(x, y) ((x) & (y))
#define OR(x, y) ((x) | (y))
#define XOR(x, y) ((x) ^ (y))

/* Integer types: arithmetic and bitwise ops unsigned (wrapping), order signed. */
#define INT_CASES(S, U)                                                  \
    switch (op) {                                                        \
    case OP_SUM: FOLD(U, ADD); return 0;                                 \
    case OP_PROD: FOLD(U, MUL); return 0;                                \
    case OP_MIN: FOLD(S, LESSER); return 0;                              \
    case OP_MAX: FOLD(S, GREATER); return 0;                             \
    case OP_BAND: FOLD(U, AND); return 0;                                \
    case OP_BOR: FOLD(U, OR); return 0;                                  \
    case OP_BXOR: FOLD(U, XOR); return 0;                                \
    }                                                                    \
    return -1

#define FLOAT_CASES(T, MIN, MAX)                                         \
    switch (op) {                                                        \
    case OP_SUM: FOLD(T, ADD); return 0;                                 \
    case OP_PROD: FOLD(T, MUL); return 0;                                \
    case OP_MIN: FOLD(T, MIN); return 0;                                 \
    case OP_MAX: FOLD(T, MAX); return 0;                                 \
    }                                                                    \
    return -1

/* bool as NumPy's logical ufuncs (ops._BOOL_KERNELS): any nonzero byte is true, the
 * result 0 or 1. SUM, MAX and BOR are OR; PRODUCT, MIN and BAND are AND. */
#define TRUTH_OR(x, y) ((uint8_t)(((x) | (y)) != 0))
#define TRUTH_AND(x, y) ((uint8_t)(((x) != 0) & ((y) != 0)))
#define TRUTH_XOR(x, y) ((uint8_t)(((x) != 0) ^ ((y) != 0)))
#define BOOL_CASES                                                       \
    switch (op) {                                                        \
    case OP_SUM: case OP_MAX: case OP_BOR: FOLD(uint8_t, TRUTH_OR); return 0; \
    case OP_PROD: case OP_MIN: case OP_BAND: FOLD(uint8_t, TRUTH_AND); return 0; \
    case OP_BXOR: FOLD(uint8_t, TRUTH_XOR); return 0;                    \
    }                                                                    \
    return -1

static const int type_size[N_TYPES] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1, 2, 2};

/* The body of a fold function: out[0:count] = source 0 op source 1 op ... (see above). */
#define FOLD_SWITCH(type, op)                                            \
    switch (type) {                                                      \
    case T_I8: INT_CASES(int8_t, uint8_t);                               \
    case T_U8: INT_CASES(uint8_t, uint8_t);                              \
    case T_I16: INT_CASES(int16_t, uint16_t);                            \
    case T_U16: INT_CASES(uint16_t, uint16_t);                           \
    case T_I32: INT_CASES(int32_t, uint32_t);                            \
    case T_U32: INT_CASES(uint32_t, uint32_t);                           \
    case T_I64: INT_CASES(int64_t, uint64_t);                            \
    case T_U64: INT_CASES(uint64_t, uint64_t);                           \
    case T_F32: FLOAT_CASES(float, min_f32, max_f32);                    \
    case T_F64: FLOAT_CASES(double, min_f64, max_f64);                   \
    case T_BOOL: BOOL_CASES;                                             \
    }                                                                    \
    return -1

/* Wider vectors where the CPU has them, picked at load time (the build stays portable). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FOLD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FOLD_CLONES
#endif

/* float16 and bfloat16 (T_F16, T_BF16), SUM and PRODUCT only (ops.compiled_kernel gives
 * no other code; the programs check it). A half reduction's result is its float32
 * working copy's, rounded once (ops.working_dtype, meshcast/_halves.c): every operand
 * widened to float32 and folded there in the same rank order, one float32 operation
 * an element, then rounded to the half type, to nearest even (bfloat16's NaN as
 * buffers.f32_to_bf16 makes it). So the fold runs a block of HALF_BLOCK elements at a
 * time through a float32 accumulator on the stack, reading every operand's block
 * before it writes out's (out may be one of them: own, as fold_over's). Half the
 * bytes of the working copy's fold, and no copy to make or round back. */
#define HALF_BLOCK 512

static inline float bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t bf16_narrow(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HALVES_X86 1
#include <immintrin.h>
/* bfloat16 8 at a time with AVX2 (the compiler's loops over bf16_widen and bf16_narrow
 * took 105 us to fold two operands of 512 Ki elements, float16's F16C loops 55) */
__attribute__((target("avx2"), unused)) static inline __m256 bf16_widen8(const uint16_t *s) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

__attribute__((target("avx2"), unused)) static Py_ssize_t bf16_widen_avx2(const uint16_t *s,
                                                                          float *d,
                                                                          Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, bf16_widen8(s + i));
    return i;
}

__attribute__((target("avx2"), unused)) static Py_ssize_t bf16_fold_avx2(const uint16_t *s,
                                                                         float *acc,
                                                                         Py_ssize_t n, int op) {
    Py_ssize_t i = 0;
    if (op == OP_SUM)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), bf16_widen8(s + i)));
    else
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), bf16_widen8(s + i)));
    return i;
}

/* bf16_narrow's rounding and NaN, 8 at a time */
__attribute__((target("avx2"), unused)) static Py_ssize_t bf16_narrow_avx2(const float *s,
                                                                           uint16_t *d,
                                                                           Py_ssize_t n) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7FFF);
    const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(s + i));
        __m256i top = _mm256_srli_epi32(u, 16);
        __m256i rounded = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(top, one)), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), inf);
        __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
        _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(packed));
    }
    return i;
}
#define AVX2_DONE(fn, ...) (__builtin_cpu_supports("avx2") ? fn(__VA_ARGS__) : 0)
#else
#define HALVES_X86 0
#define AVX2_DONE(fn, ...) 0
#endif

#if defined(__FLT16_MAX__)
#define HAVE_FLOAT16 1
#if HALVES_X86
/* 8 at a time with F16C (the compiler leaves _Float16 conversions scalar); the rest,
 * and CPUs without it, through _Float16: both round to nearest even. */
__attribute__((target("avx,f16c"), unused)) static Py_ssize_t f16_widen_f16c(const uint16_t *s,
                                                                     float *d, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    return i;
}

__attribute__((target("avx,f16c"), unused)) static Py_ssize_t f16_narrow_f16c(const float *s,
                                                                      uint16_t *d, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}
/* acc[0:n] op= s[0:n] widened, 8 at a time; returns how many it did (a multiple of 8) */
__attribute__((target("avx,f16c"), unused)) static Py_ssize_t f16_fold_f16c(const uint16_t *s,
                                                                           float *acc,
                                                                           Py_ssize_t n,
                                                                           int op) {
    Py_ssize_t i = 0;
    if (op == OP_SUM)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(s + i)))));
    else
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(s + i)))));
    return i;
}
#define F16C_DONE(fn, s, d, n) (__builtin_cpu_supports("f16c") ? fn(s, d, n) : 0)
#define F16C_FOLDED(s, acc, n, op)                                       \
    (__builtin_cpu_supports("f16c") ? f16_fold_f16c(s, acc, n, op) : 0)
#else
#define F16C_DONE(fn, s, d, n) 0
#define F16C_FOLDED(s, acc, n, op) 0
#endif
#else
#define HAVE_FLOAT16 0
#define F16C_DONE(fn, s, d, n) 0
#define F16C_FOLDED(s, acc, n, op) 0
#endif

/* d[0:n] = src[0:n] as float32 (type T_F16 or T_BF16) */
__attribute__((unused, always_inline)) static inline void half_widen(int type, const uint16_t *s,
                                                                    float *d, Py_ssize_t n) {
    if (type == T_BF16) {
        for (Py_ssize_t i = AVX2_DONE(bf16_widen_avx2, s, d, n); i < n; i++)
            d[i] = bf16_widen(s[i]);
        return;
    }
#if HAVE_FLOAT16
    for (Py_ssize_t i = F16C_DONE(f16_widen_f16c, s, d, n); i < n; i++) {
        _Float16 h;
        memcpy(&h, &s[i], 2);
        d[i] = (float)h;
    }
#endif
}

__attribute__((unused, always_inline)) static inline void half_narrow(int type, const float *s,
                                                                     uint16_t *d, Py_ssize_t n) {
    if (type == T_BF16) {
        for (Py_ssize_t i = AVX2_DONE(bf16_narrow_avx2, s, d, n); i < n; i++)
            d[i] = bf16_narrow(s[i]);
        return;
    }
#if HAVE_FLOAT16
    for (Py_ssize_t i = F16C_DONE(f16_narrow_f16c, s, d, n); i < n; i++) {
        _Float16 h = (_Float16)s[i];
        memcpy(&d[i], &h, 2);
    }
#endif
}

/* out[0:count] = source 0 op source 1 op ... (see above), source own (-1: none) being
 * out itself. 0, or -1 where there is no such kernel. */
FOLD_CLONES __attribute__((unused, noinline))
static int fold_halves(char *const *srcs, Py_ssize_t nsrc, Py_ssize_t own, int type, int op,
                       char *out, Py_ssize_t count) {
    if ((op != OP_SUM && op != OP_PROD) || (type == T_F16 && !HAVE_FLOAT16))
        return -1;
    float acc[HALF_BLOCK], next[HALF_BLOCK];
    uint16_t *o = (uint16_t *)out;
    for (Py_ssize_t at = 0; at < count; at += HALF_BLOCK) {
        Py_ssize_t m = count - at < HALF_BLOCK ? count - at : HALF_BLOCK;
        for (Py_ssize_t r = 0; r < nsrc; r++) {
            const uint16_t *s = (r == own ? o : (const uint16_t *)srcs[r]) + at;
            if (r == 0) {
                half_widen(type, s, acc, m);
                continue;
            }
            Py_ssize_t i = 0;
            if (type == T_BF16) {
                i = AVX2_DONE(bf16_fold_avx2, s, acc, m, op);
                if (op == OP_SUM)
                    for (; i < m; i++)
                        acc[i] += bf16_widen(s[i]);
                else
                    for (; i < m; i++)
                        acc[i] *= bf16_widen(s[i]);
                continue;
            }
            i = F16C_FOLDED(s, acc, m, op);
            half_widen(type, s + i, next, m - i);
            if (op == OP_SUM)
                for (Py_ssize_t j = 0; j < m - i; j++)
                    acc[i + j] += next[j];
            else
                for (Py_ssize_t j = 0; j < m - i; j++)
                    acc[i + j] *= next[j];
        }
        half_narrow(type, acc, o + at, m);
    }
    return 0;
}

#endif
