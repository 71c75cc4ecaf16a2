/*
 * NCCL's data types and reduction operators, elementwise, for the double's
 * collectives.  A reduction here is a pure function of its operands and
 * their order: callers apply ranks 0..n-1 in order so that every rank
 * computes bit-identical results run after run.  The 16- and 8-bit float
 * types are computed in float and rounded back (to nearest, ties to even)
 * after every step, which is what elementwise GPU arithmetic in those types
 * does.  Nothing here may depend on the host's rounding mode being other
 * than the default.
 */
#include <math.h>

#include "nccl_fake.h"

/* A binary float format: exponent and mantissa bits, and its limits. */
struct minifloat {
    int ebits;
    int mbits;
    bool has_inf;   /* all-ones exponent is inf/NaN (IEEE); else only NaN */
    bool saturate;  /* out-of-range values become the largest finite one */
    float max;      /* largest finite value */
    uint32_t nan;   /* the code of a quiet NaN */
};

static const struct minifloat fmt_half = {5, 10, true, false, 65504.0f, 0x7e00};
static const struct minifloat fmt_bf16 = {8, 7, true, false, 3.38953139e38f, 0x7fc0};
static const struct minifloat fmt_e4m3 = {4, 3, false, true, 448.0f, 0x7f};
static const struct minifloat fmt_e5m2 = {5, 2, true, true, 57344.0f, 0x7f};

static int bias(const struct minifloat *f)
{
    return (1 << (f->ebits - 1)) - 1;
}

static float decode(const struct minifloat *f, uint32_t code)
{
    uint32_t sign = code >> (f->ebits + f->mbits) & 1;
    uint32_t e = code >> f->mbits & ((1u << f->ebits) - 1);
    uint32_t m = code & ((1u << f->mbits) - 1);
    uint32_t emax = (1u << f->ebits) - 1;
    float v;

    if (f->has_inf && e == emax)
        v = m ? NAN : INFINITY;
    else if (!f->has_inf && e == emax && m == (1u << f->mbits) - 1)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, 1 - bias(f) - f->mbits);
    else
        v = ldexpf((float)(m | 1u << f->mbits), (int)e - bias(f) - f->mbits);
    return sign ? -v : v;
}

/*
 * Rounds v >= 0 to an integer, ties to even, without libm: adding and
 * taking away 2^23 leaves no fraction bits, and the default rounding mode
 * rounds that addition to nearest even.  Larger floats are integers already.
 */
static float round_even(float v)
{
    volatile float big = 0x1p23f;

    return v < big ? (v + big) - big : v;
}

static uint32_t encode(const struct minifloat *f, float x)
{
    uint32_t sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0;
    int emin = 1 - bias(f), e;
    float a = fabsf(x), quantum, q;

    if (isnan(x))
        return f->nan;
    if (a == 0)
        return sign;
    if (!isinf(a)) {
        frexpf(a, &e); /* a = frac * 2^e, frac in [0.5, 1) */
        e -= 1;        /* a = 1.x * 2^e */
        quantum = ldexpf(1.0f, (e < emin ? emin : e) - f->mbits);
        q = round_even(a / quantum) * quantum; /* exact scaling, then round to even */
    } else {
        q = a;
    }
    if (q > f->max) {
        if (f->saturate || !f->has_inf)
            q = f->max;
        else
            return sign | ((1u << f->ebits) - 1) << f->mbits; /* infinity */
    }
    if (q == 0)
        return sign;
    frexpf(q, &e);
    e -= 1;
    if (e < emin) /* subnormal */
        return sign | (uint32_t)ldexpf(q, f->mbits - emin);
    return sign | (uint32_t)(e + bias(f)) << f->mbits |
           ((uint32_t)ldexpf(q, f->mbits - e) & ((1u << f->mbits) - 1));
}

size_t nf_type_size(ncclDataType_t type)
{
    switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

const char *nf_type_name(ncclDataType_t type)
{
    static const char *const names[ncclNumTypes] = {
        [ncclInt8] = "ncclInt8",         [ncclUint8] = "ncclUint8",
        [ncclInt32] = "ncclInt32",       [ncclUint32] = "ncclUint32",
        [ncclInt64] = "ncclInt64",       [ncclUint64] = "ncclUint64",
        [ncclFloat16] = "ncclFloat16",   [ncclFloat32] = "ncclFloat32",
        [ncclFloat64] = "ncclFloat64",   [ncclBfloat16] = "ncclBfloat16",
        [ncclFloat8e4m3] = "ncclFloat8e4m3", [ncclFloat8e5m2] = "ncclFloat8e5m2",
    };

    return (unsigned)type < ncclNumTypes ? names[type] : "Unknown";
}

/* Integers: unsigned arithmetic wraps; comparisons use the signed type. */
#define INT_LOOP(T, U)                                                         \
    do {                                                                       \
        T *d = dst;                                                            \
        const T *s = src;                                                      \
        for (size_t i = 0; i < n; i++) {                                       \
            switch (op) {                                                      \
            case ncclProd:                                                     \
                d[i] = (T)((U)d[i] * (U)s[i]);                                 \
                break;                                                         \
            case ncclMax:                                                      \
                d[i] = s[i] > d[i] ? s[i] : d[i];                              \
                break;                                                         \
            case ncclMin:                                                      \
                d[i] = s[i] < d[i] ? s[i] : d[i];                              \
                break;                                                         \
            default: /* ncclSum, ncclAvg */                                    \
                d[i] = (T)((U)d[i] + (U)s[i]);                                 \
            }                                                                  \
        }                                                                      \
    } while (0)

static float apply(float a, float b, ncclRedOp_t op)
{
    switch (op) {
    case ncclProd:
        return a * b;
    case ncclMax:
        return b > a ? b : a;
    case ncclMin:
        return b < a ? b : a;
    default:
        return a + b;
    }
}

#define FLOAT_LOOP(T)                                                          \
    do {                                                                       \
        T *d = dst;                                                            \
        const T *s = src;                                                      \
        for (size_t i = 0; i < n; i++) {                                       \
            switch (op) {                                                      \
            case ncclProd:                                                     \
                d[i] = d[i] * s[i];                                            \
                break;                                                         \
            case ncclMax:                                                      \
                d[i] = s[i] > d[i] ? s[i] : d[i];                              \
                break;                                                         \
            case ncclMin:                                                      \
                d[i] = s[i] < d[i] ? s[i] : d[i];                              \
                break;                                                         \
            default:                                                           \
                d[i] = d[i] + s[i];                                            \
            }                                                                  \
        }                                                                      \
    } while (0)

#define MINI_LOOP(T, F)                                                        \
    do {                                                                       \
        T *d = dst;                                                            \
        const T *s = src;                                                      \
        for (size_t i = 0; i < n; i++)                                         \
            d[i] = (T)encode(F, apply(decode(F, d[i]), decode(F, s[i]), op));  \
    } while (0)

void nf_reduce(void *dst, const void *src, size_t n, ncclDataType_t type, ncclRedOp_t op)
{
    switch (type) {
    case ncclInt8:
        INT_LOOP(int8_t, uint8_t);
        break;
    case ncclUint8:
        INT_LOOP(uint8_t, uint8_t);
        break;
    case ncclInt32:
        INT_LOOP(int32_t, uint32_t);
        break;
    case ncclUint32:
        INT_LOOP(uint32_t, uint32_t);
        break;
    case ncclInt64:
        INT_LOOP(int64_t, uint64_t);
        break;
    case ncclUint64:
        INT_LOOP(uint64_t, uint64_t);
        break;
    case ncclFloat32:
        FLOAT_LOOP(float);
        break;
    case ncclFloat64:
        FLOAT_LOOP(double);
        break;
    case ncclFloat16:
        MINI_LOOP(uint16_t, &fmt_half);
        break;
    case ncclBfloat16:
        MINI_LOOP(uint16_t, &fmt_bf16);
        break;
    case ncclFloat8e4m3:
        MINI_LOOP(uint8_t, &fmt_e4m3);
        break;
    case ncclFloat8e5m2:
        MINI_LOOP(uint8_t, &fmt_e5m2);
        break;
    default:
        break;
    }
}

#define DIV_LOOP(T, expr)                                                      \
    do {                                                                       \
        T *d = dst;                                                            \
        for (size_t i = 0; i < n; i++)                                         \
            d[i] = (T)(expr);                                                  \
    } while (0)

void nf_divide(void *dst, size_t n, ncclDataType_t type, int divisor)
{
    switch (type) {
    case ncclInt8:
        DIV_LOOP(int8_t, d[i] / divisor);
        break;
    case ncclUint8:
        DIV_LOOP(uint8_t, d[i] / (unsigned)divisor);
        break;
    case ncclInt32:
        DIV_LOOP(int32_t, d[i] / divisor);
        break;
    case ncclUint32:
        DIV_LOOP(uint32_t, d[i] / (unsigned)divisor);
        break;
    case ncclInt64:
        DIV_LOOP(int64_t, d[i] / divisor);
        break;
    case ncclUint64:
        DIV_LOOP(uint64_t, d[i] / (unsigned)divisor);
        break;
    case ncclFloat32:
        DIV_LOOP(float, d[i] / (float)divisor);
        break;
    case ncclFloat64:
        DIV_LOOP(double, d[i] / (double)divisor);
        break;
    case ncclFloat16:
        DIV_LOOP(uint16_t, encode(&fmt_half, decode(&fmt_half, d[i]) / (float)divisor));
        break;
    case ncclBfloat16:
        DIV_LOOP(uint16_t, encode(&fmt_bf16, decode(&fmt_bf16, d[i]) / (float)divisor));
        break;
    case ncclFloat8e4m3:
        DIV_LOOP(uint8_t, encode(&fmt_e4m3, decode(&fmt_e4m3, d[i]) / (float)divisor));
        break;
    case ncclFloat8e5m2:
        DIV_LOOP(uint8_t, encode(&fmt_e5m2, decode(&fmt_e5m2, d[i]) / (float)divisor));
        break;
    default:
        break;
    }
}

void nf_premultiply(void *dst, size_t n, ncclDataType_t type, const void *scalar)
{
    size_t es = nf_type_size(type);

    for (size_t i = 0; i < n; i++)
        nf_reduce((char *)dst + i * es, scalar, 1, type, ncclProd);
}
