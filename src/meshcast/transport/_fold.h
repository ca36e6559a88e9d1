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

enum { OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_BAND, OP_BOR, OP_BXOR, N_OPS };
enum { T_I8, T_U8, T_I16, T_U16, T_I32, T_U32, T_I64, T_U64, T_F32, T_F64, T_BOOL, N_TYPES };

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

static const int type_size[N_TYPES] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1};

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

#endif
