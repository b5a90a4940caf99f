// What the standalone CUDA check harnesses (attn_check.cu, decode_linear_check.cu, decode_layer_check.cu)
// share: the CUDA error check, the largest-error fold that counts NaN (WorseErr), host <-> device element
// conversion (float32, float16, bfloat16 as the launchers' MN_F32/MN_F16/MN_BF16), uploads, CUDA-event
// timing and the device's name and peak bandwidth.
// Include it after the kernels' source (it needs cuda_kernels.h's element-type enum).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// A running maximum error with one more element's error folded in. A NaN error (the kernel gave NaN
// where the reference has a number, or the reference is NaN) counts as infinite: std::max(err, NaN)
// would return err and let a kernel that writes NaN pass.
static double WorseErr(double err, double e) { return std::isnan(e) ? INFINITY : std::max(err, e); }

// ---------------------------------------------------------------- host element types
static uint16_t F2H(float f) { return __half_as_ushort(__float2half_rn(f)); }
static float H2F(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static uint16_t F2B(float f) {
  __nv_bfloat16 b = __float2bfloat16_rn(f);
  uint16_t h;
  std::memcpy(&h, &b, 2);
  return h;
}
static float B2F(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
static const char* kTypeName[] = {"float32", "float16", "bfloat16"};
static size_t ElemBytes(int dt) { return dt == MN_F32 ? 4 : 2; }

// Rounds `x` to the element type in place and returns its device-layout bytes.
static std::vector<unsigned char> ToDevice(std::vector<float>* x, int dt) {
  std::vector<unsigned char> out(x->size() * ElemBytes(dt));
  for (size_t i = 0; i < x->size(); ++i) {
    float& f = (*x)[i];
    if (dt == MN_F32) {
      std::memcpy(out.data() + 4 * i, &f, 4);
    } else {
      const uint16_t h = dt == MN_F16 ? F2H(f) : F2B(f);
      f = dt == MN_F16 ? H2F(h) : B2F(h);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}
// One element of device-layout bytes as float.
static float FromDevice(const unsigned char* p, int dt) {
  if (dt == MN_F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dt == MN_F16 ? H2F(h) : B2F(h);
}
static std::vector<float> FromDevice(const std::vector<unsigned char>& b, int dt) {
  std::vector<float> out(b.size() / ElemBytes(dt));
  for (size_t i = 0; i < out.size(); ++i) out[i] = FromDevice(b.data() + i * ElemBytes(dt), dt);
  return out;
}
// 16 bytes of slack: the kernels' vector loads may round a short row up to 16 bytes.
static void* Upload(const std::vector<unsigned char>& b) {
  void* p = nullptr;
  CK(cudaMalloc(&p, b.size() + 16));
  CK(cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice));
  return p;
}
static std::vector<unsigned char> Download(const void* p, size_t bytes) {
  std::vector<unsigned char> b(bytes);
  CK(cudaMemcpy(b.data(), p, bytes, cudaMemcpyDeviceToHost));
  return b;
}

// ---------------------------------------------------------------- timing
// Microseconds per call of `launch(stream)` measured with CUDA events.
struct Timer {
  cudaStream_t s;
  cudaEvent_t a, b;
  Timer() {
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(s);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  // Back-to-back launches on the stream (GPU time, or the launcher's host work where that is longer).
  template <class F>
  double Stream(F&& launch, int n = 200, int warmup = 10) {
    for (int i = 0; i < warmup; ++i) launch(s);
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < n; ++i) launch(s);
    return Elapsed() * 1e3 / n;
  }
  // n launches captured once into a CUDA graph, replayed: GPU time without host launch cost.
  template <class F>
  double Graph(F&& launch, int n = 100, int replays = 3) {
    launch(s);  // first call outside capture: one-time set-up (attributes, scratch)
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; ++i) launch(s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(a, s));
    for (int r = 0; r < replays; ++r) CK(cudaGraphLaunch(ge, s));
    const double ms = Elapsed();
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return ms * 1e3 / (static_cast<double>(replays) * n);
  }

 private:
  // Milliseconds from event a (recorded by the caller) to now on the stream.
  double Elapsed() {
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
  }
};

// ---------------------------------------------------------------- device
struct DeviceInfo {
  std::string name;
  int sms;
  double peak_gbps;  // nominal memory bandwidth: H200 4800, H100 3350, else 1000 (a placeholder)
};
static DeviceInfo QueryDevice() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const std::string name = prop.name;
  const double peak = name.find("H200") != std::string::npos   ? 4800.0
                      : name.find("H100") != std::string::npos ? 3350.0
                                                               : 1000.0;
  return {name, prop.multiProcessorCount, peak};
}

// The device's L2 cache size in bytes.
static double L2Bytes() {
  int bytes = 0;
  CK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, 0));
  return static_cast<double>(bytes);
}
