// Float element types of the CPU kernels (cpu_kernels.cc, cpu_fused.cc): float, or 16-bit float16 /
// bfloat16 converted on load and store (the kernels compute in float32).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "op_common.h"

namespace mn {

// Element types in memory: float, or 16-bit float16/bfloat16 converted on load/store (compute in float32).
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// Scalar conversions, branch-free so that the loops calling them vectorise (-O3 turns the selects
// into blends). Their float arithmetic is exact or rounds once, in the default round-to-nearest
// mode, and never touches float32 subnormals (so flush-to-zero / denormals-are-zero cannot change
// a result): the half<->float algorithms of Maratyszcza's FP16 library (MIT).
inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float ToFloat(float x) { return x; }
inline float ToFloat(Half h) {
  const uint32_t w = static_cast<uint32_t>(h.bits) << 16, sign = w & 0x80000000u, two_w = w + w;
  // Normal (and inf/NaN): the exponent re-biased by a multiply by 2^-112 (exact: a power of two).
  const float normal = BitsToFloat((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  // Subnormal (and zero): the mantissa placed under the exponent of 0.5, then 0.5 subtracted (exact).
  const float subnormal = BitsToFloat((two_w >> 17) | (126u << 23)) - 0.5f;
  return BitsToFloat(sign | FloatToBits(two_w < (1u << 27) ? subnormal : normal));
}
inline float ToFloat(BFloat16 h) { return BitsToFloat(static_cast<uint32_t>(h.bits) << 16); }

template <class T>
T FromFloat(float x);
template <>
inline float FromFloat<float>(float x) {
  return x;
}
// Round to nearest even, overflow to infinity, NaN kept NaN (what a float->float16 cast does). The
// scaling by 2^112 * 2^-110 overflows what rounds to infinity; adding a power of two that places
// the half's last mantissa bit at float's last rounds the mantissa once (subnormals included).
template <>
inline Half FromFloat<Half>(float f) {
  const uint32_t w = FloatToBits(f), shl1_w = w + w, sign = w & 0x80000000u;
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = BitsToFloat((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = FloatToBits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007c00u) + (bits & 0x00000fffu);
  return Half{static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign))};
}
// Round to nearest even by adding 0x7fff plus the lowest kept bit; NaN kept a (quiet) NaN.
template <>
inline BFloat16 FromFloat<BFloat16>(float f) {
  const uint32_t x = FloatToBits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, quiet_nan = (x >> 16) | 0x40u;
  return BFloat16{static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

// Whole rows: n values to float32 and back. The kernels convert a row into a float buffer, compute on
// it, and convert the result back, so the arithmetic loops are plain float loops. float16 uses the
// F16C instructions (vcvtph2ps / vcvtps2ph: 8 values each, rounding to nearest even) when the CPU
// has them, chosen at run time: the library's baseline (x86-64-v2) lacks F16C, and a flag would
// make the wheel refuse older CPUs. Elsewhere the branch-free scalar code above, which vectorises.
inline void ToFloatRow(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, sizeof(float) * n); }
inline void FromFloatRow(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, sizeof(float) * n); }
template <class T>
void ToFloatRowPortable(const T* __restrict__ src, float* __restrict__ dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = ToFloat(src[i]);
}
template <class T>
void FromFloatRowPortable(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = FromFloat<T>(src[i]);
}
inline void ToFloatRow(const BFloat16* src, float* dst, int64_t n) { ToFloatRowPortable(src, dst, n); }
inline void FromFloatRow(const float* src, BFloat16* dst, int64_t n) { FromFloatRowPortable(src, dst, n); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
inline bool HasF16c() {
  static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return f16c;
}
// Whether the CPU runs the kernels' target("avx2,fma") forms of their float32 loops (read once).
inline bool HasAvx2Fma() {
  static const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2_fma;
}
__attribute__((target("avx,f16c"))) inline void ToFloatRowF16c(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  ToFloatRowPortable(src + i, dst + i, n - i);
}
__attribute__((target("avx,f16c"))) inline void FromFloatRowF16c(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  FromFloatRowPortable(src + i, dst + i, n - i);
}
inline void ToFloatRow(const Half* src, float* dst, int64_t n) {
  if (HasF16c())
    ToFloatRowF16c(src, dst, n);
  else
    ToFloatRowPortable(src, dst, n);
}
inline void FromFloatRow(const float* src, Half* dst, int64_t n) {
  if (HasF16c())
    FromFloatRowF16c(src, dst, n);
  else
    FromFloatRowPortable(src, dst, n);
}
#else
inline void ToFloatRow(const Half* src, float* dst, int64_t n) { ToFloatRowPortable(src, dst, n); }
inline void FromFloatRow(const float* src, Half* dst, int64_t n) { FromFloatRowPortable(src, dst, n); }
#endif

// A row of `n` values as float32: `src` itself when it is float, else converted into `buf`.
inline const float* FloatRow(const float* src, int64_t, float*) { return src; }
template <class T>
const float* FloatRow(const T* src, int64_t n, float* buf) {
  ToFloatRow(src, buf, n);
  return buf;
}
// Where to compute a float32 row bound for `dst`: `dst` itself when it is float, else `buf`;
// StoreRow then puts the row into `dst` (nothing to do for float).
inline float* OutRow(float* dst, float*) { return dst; }
template <class T>
float* OutRow(T*, float* buf) {
  return buf;
}
inline void StoreRow(const float*, float*, int64_t) {}
template <class T>
void StoreRow(const float* row, T* dst, int64_t n) {
  FromFloatRow(row, dst, n);
}

// Calls f(T{}) with T the C++ type of the float element type `type` (validated by the Check* functions).
template <class F>
OrtStatus* DispatchFloat(ONNXTensorElementDataType type, F&& f) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return f(Half{});
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return f(BFloat16{});
    default: return f(float{});
  }
}

}  // namespace mn
