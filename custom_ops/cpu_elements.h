// Float element types of the CPU kernels (cpu_kernels.cc, cpu_fused.cc): float, or 16-bit float16 /
// bfloat16 converted on load and store (the kernels compute in float32).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "op_common.h"

namespace mn {

// Element types in memory: float, or 16-bit float16/bfloat16 converted on load/store (compute in float32).
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float ToFloat(float x) { return x; }
inline float ToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float f = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  const uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112u) << 23) | (man << 13));
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float ToFloat(BFloat16 h) {
  const uint32_t bits = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class T>
T FromFloat(float x);
template <>
inline float FromFloat<float>(float x) {
  return x;
}
// Round to nearest even, overflow to infinity, NaN kept NaN (what a float->float16 cast does).
template <>
inline Half FromFloat<Half>(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return Half{static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u))};
  if (a >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to infinity
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half, round(|f| * 2^24) (exact scaling, ties to even)
    float af;
    std::memcpy(&af, &a, sizeof af);
    return Half{static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(af * 16777216.0f)))};
  }
  uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still correct
  return Half{static_cast<uint16_t>(sign | h)};
}
template <>
inline BFloat16 FromFloat<BFloat16>(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((x >> 16) | 0x40u)};  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(x >> 16)};
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
