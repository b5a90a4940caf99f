// Vectorisable float math of the CPU kernels (cpu_kernels.cc: softmax, Rope; cpu_fused.cc: SwiGLU's
// sigmoid, RopeCacheWrite).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// A loop function compiled twice, for the x86-64-v2 baseline and for AVX2, with the CPU picking one
// when the library loads (GCC function multi-versioning, as cpu_flash.cc; not under ASan, whose
// runtime is not up when ifunc resolvers run). AVX2 alone, not FMA: the compiler may not contract
// a*b+c into an fma, so both versions give the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MN_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MN_AVX2_CLONES
#endif

namespace mn {

// exp(x) for x <= 0 (Cephes expf: range reduction + degree-6 polynomial, ~1 ulp). Plain
// arithmetic, so the loops that call it vectorise (libm's expf does not without -ffast-math).
inline float ExpNeg(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Rotary embedding of one token row of `heads` heads: each head's halves (a, b) rotated by the angles
// whose cos / sin are cs / sn (head_dim / 2 each): (a cos - b sin, b cos + a sin).
// inverse: rotate by the negated angle (sin negated; exact).
inline void RotateHeads(const float* __restrict__ x, float* __restrict__ y, const float* __restrict__ cs,
                        const float* __restrict__ sn, int64_t heads, int64_t head_dim, bool inverse = false) {
  const int64_t half = head_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t h = 0; h < heads; ++h) {
    const float* xi = x + h * head_dim;
    float* yo = y + h * head_dim;
#pragma omp simd
    for (int64_t j = 0; j < half; ++j) {
      const float a = xi[j], b = xi[j + half];
      const float s = sign * sn[j];
      yo[j] = a * cs[j] - b * s;
      yo[j + half] = b * cs[j] + a * s;
    }
  }
}

}  // namespace mn
