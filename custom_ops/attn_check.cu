// Standalone check + timing of the CUDA CachedAttention, RopeCachedAttention, Rope and CacheWrite launchers,
// without ORT:
//   make -C custom_ops attn-check && custom_ops/build/attn_check [--check-only] [--sweep] [--rope-only] [--json FILE]
// (--sweep: also checks and times the other tile configurations of ATTN_SWEEP; --rope-only: only
// RopeCachedAttention's checks and its timings next to the four kernels it replaces, attn_check_rope.cuh)
// Checks every element type (float32, float16, bfloat16) against a double-precision host reference
// computed from the same (rounded) inputs: batches with a position per sequence, GQA, T > 1, every
// head_dim path, an invalid position (NaN for that sequence only, nothing written out of bounds), chunks
// of rows on the flash forward and on the split-K kernel.
// Then times the kernels with CUDA events (attn_check_time.cuh): "graph" replays N launches captured
// in a CUDA graph (GPU time only, no host launch cost), "stream" launches back to back (GPU time, or
// the launcher's host work where that is longer); consecutive launches read different K/V caches,
// >= 3x the L2 size in rotation, so the K/V come from DRAM. Bandwidth = bytes the op must move / time.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

// The kernels are compiled into this program (not linked) so that it can reach the launchers'
// tuning knobs and configurations in their anonymous namespaces.
#include "cuda_attention.cu"
#include "cuda_fused.cu"
#include "cuda_kernels.cu"
// After the kernels: it needs their element-type enum.
#include "check_harness.cuh"

// One relative unit in the last place of the output type (the result is rounded once to it).
static double Ulp(int dt) { return dt == MN_F32 ? 2e-5 : dt == MN_F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7); }

static MnPos DevPositions(const std::vector<int64_t>& pos, int64_t** dev) {
  CK(cudaMalloc(dev, sizeof(int64_t) * pos.size()));
  CK(cudaMemcpy(*dev, pos.data(), sizeof(int64_t) * pos.size(), cudaMemcpyHostToDevice));
  return MnPos{*dev, MN_POS_I64, static_cast<int64_t>(pos.size())};
}

// ---------------------------------------------------------------- references
static void AttnReference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int B, int T,
                          int H, int KVH, int hd, int max_seq, const std::vector<int64_t>& pos, std::vector<double>* out) {
  const int G = H / KVH;
  out->assign((size_t)B * T * H * hd, 0.0);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const int kh = h / G;
        const int64_t L = pos[b] + t + 1;
        const size_t qo = (((size_t)b * T + t) * H + h) * hd, co = (size_t)b * max_seq * KVH * hd + (size_t)kh * hd;
        std::vector<double> s(L);
        double m = -1e300;
        for (int64_t j = 0; j < L; ++j) {
          double d = 0;
          for (int x = 0; x < hd; ++x) d += (double)q[qo + x] * k[co + (size_t)j * KVH * hd + x];
          s[j] = d / std::sqrt((double)hd);
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < L; ++j) sum += (s[j] = std::exp(s[j] - m));
        for (int x = 0; x < hd; ++x) {
          double a = 0;
          for (int64_t j = 0; j < L; ++j) a += s[j] * v[co + (size_t)j * KVH * hd + x];
          (*out)[qo + x] = a / sum;
        }
      }
}

struct AttnCase {
  int B, T, H, KVH, hd, max_seq;
  std::vector<int64_t> pos;  // per sequence; an invalid one must give NaN for that sequence only
};

static MnScratch* g_scratch = nullptr;
static MnScratch* g_scratch2 = nullptr;  // RopeCachedAttention's second scratch

// Launches one CachedAttention (the library's entry point, or one tile configuration of the sweep).
using AttnLauncher = int (*)(int dt, const void* q, const void* k, const void* v, void* out, const AttnCase& c, MnPos pos);
static int LibraryAttention(int dt, const void* q, const void* k, const void* v, void* out, const AttnCase& c, MnPos pos) {
  return mn_cuda_cached_attention(dt, q, k, v, out, c.B, c.T, c.H, c.KVH, c.hd, c.max_seq, pos, g_scratch, nullptr);
}

static bool CheckAttention(const AttnCase& c, int dt, std::mt19937& rng, AttnLauncher launch = LibraryAttention,
                           const char* config = "library") {
  std::normal_distribution<float> nd;
  std::vector<float> q((size_t)c.B * c.T * c.H * c.hd), k((size_t)c.B * c.max_seq * c.KVH * c.hd), v(k.size());
  for (auto* x : {&q, &k, &v})
    for (auto& f : *x) f = nd(rng);
  void *dq = Upload(ToDevice(&q, dt)), *dk = Upload(ToDevice(&k, dt)), *dv = Upload(ToDevice(&v, dt));
  void* dout = nullptr;
  CK(cudaMalloc(&dout, q.size() * ElemBytes(dt)));
  int64_t* dpos = nullptr;
  const MnPos pos = DevPositions(c.pos, &dpos);
  std::vector<int64_t> ref_pos = c.pos;
  for (auto& p : ref_pos) p = (p < 0 || p > c.max_seq - c.T) ? 0 : p;  // reference of the valid ones only
  std::vector<double> ref;
  AttnReference(q, k, v, c.B, c.T, c.H, c.KVH, c.hd, c.max_seq, ref_pos, &ref);
  const int e = launch(dt, dq, dk, dv, dout, c, pos);
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = FromDevice(Download(dout, q.size() * ElemBytes(dt)), dt);
  double err = 0;
  bool nan_ok = true;
  const size_t per_seq = (size_t)c.T * c.H * c.hd;
  for (int b = 0; b < c.B; ++b) {
    const bool valid = c.pos[b] >= 0 && c.pos[b] <= c.max_seq - c.T;
    for (size_t i = b * per_seq; i < (b + 1) * per_seq; ++i) {
      if (!valid) {
        nan_ok &= std::isnan(got[i]);
        continue;
      }
      err = WorseErr(err, std::fabs(got[i] - ref[i]) / std::max(1.0, std::fabs(ref[i])));
    }
  }
  const bool ok = e == 0 && err <= Ulp(dt) && nan_ok;
  std::printf("check attention %-8s %s B=%d T=%d H=%d KVH=%d hd=%d max_seq=%d pos=[", kTypeName[dt], config, c.B, c.T, c.H, c.KVH,
              c.hd, c.max_seq);
  for (size_t i = 0; i < c.pos.size(); ++i) std::printf("%s%lld", i ? "," : "", (long long)c.pos[i]);
  std::printf("]: rc %d max_rel_err %.2e (tol %.1e)%s %s\n", e, err, Ulp(dt), nan_ok ? "" : " NaN-missing", ok ? "ok" : "FAIL");
  for (void* p : {dq, dk, dv, dout, static_cast<void*>(dpos)}) cudaFree(p);
  return ok;
}

static bool CheckRope(int dt, int B, int S, int D, int hd, int64_t offset, const std::vector<int64_t>& dyn, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> x((size_t)B * S * D);
  for (auto& f : x) f = nd(rng);
  void* dx = Upload(ToDevice(&x, dt));
  void* dy = nullptr;
  CK(cudaMalloc(&dy, x.size() * ElemBytes(dt)));
  int64_t* dpos = nullptr;
  const MnPos pos = DevPositions(dyn, &dpos);
  std::vector<float> inv(hd / 2);
  for (int j = 0; j < hd / 2; ++j) inv[j] = powf(10000.f, -2.f * j / hd);
  const int e = mn_cuda_rope(dt, dx, dy, B, S, D, hd, offset, pos, inv.data(), nullptr);
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = FromDevice(Download(dy, x.size() * ElemBytes(dt)), dt);
  double err = 0;
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < D / hd; ++h)
        for (int j = 0; j < hd / 2; ++j) {
          const float ang = static_cast<float>(offset + dyn[dyn.size() == 1 ? 0 : b] + s) * inv[j];  // float32, as the kernel
          const size_t i = ((size_t)b * S + s) * D + h * hd + j;
          const double a = x[i], c = x[i + hd / 2], cs = std::cos((double)ang), sn = std::sin((double)ang);
          const double y0 = a * cs - c * sn, y1 = c * cs + a * sn;
          err = WorseErr(err, std::fabs(got[i] - y0) / std::max(1.0, std::fabs(y0)));
          err = WorseErr(err, std::fabs(got[i + hd / 2] - y1) / std::max(1.0, std::fabs(y1)));
        }
  const bool ok = e == 0 && err <= Ulp(dt);
  std::printf("check rope %-8s B=%d S=%d D=%d hd=%d: rc %d max_rel_err %.2e %s\n", kTypeName[dt], B, S, D, hd, e, err, ok ? "ok" : "FAIL");
  for (void* p : {dx, dy, static_cast<void*>(dpos)}) cudaFree(p);
  return ok;
}

static bool CheckCacheWrite(int dt, int B, int T, int dim, int max_seq, const std::vector<int64_t>& kv, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> nw((size_t)B * T * dim), cache((size_t)B * max_seq * dim);
  for (auto* x : {&nw, &cache})
    for (auto& f : *x) f = nd(rng);
  const std::vector<unsigned char> nb = ToDevice(&nw, dt), cb = ToDevice(&cache, dt);
  void *dn = Upload(nb), *dc = Upload(cb);
  int64_t* dpos = nullptr;
  const MnPos pos = DevPositions(kv, &dpos);
  const int e = mn_cuda_cache_write(ElemBytes(dt), dn, dc, dc, B, T, dim, max_seq, pos, nullptr);  // in place
  CK(cudaDeviceSynchronize());
  std::vector<unsigned char> want = cb;
  const size_t row = ElemBytes(dt) * dim;
  for (int b = 0; b < B; ++b)
    if (kv[b] >= 0 && kv[b] <= max_seq - T)
      std::memcpy(want.data() + ((size_t)b * max_seq + kv[b]) * row, nb.data() + (size_t)b * T * row, T * row);
  const bool ok = e == 0 && Download(dc, cb.size()) == want;
  std::printf("check cache_write %-8s B=%d T=%d dim=%d max_seq=%d: rc %d %s\n", kTypeName[dt], B, T, dim, max_seq, e, ok ? "ok" : "FAIL");
  for (void* p : {dn, dc, static_cast<void*>(dpos)}) cudaFree(p);
  return ok;
}

#include "attn_check_time.cuh"
#include "attn_check_rope.cuh"

int main(int argc, char** argv) {
  bool check_only = false, sweep = false, rope_only = false;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check-only") check_only = true;
    if (a == "--sweep") sweep = true;
    if (a == "--rope-only") rope_only = true;
    if (a == "--json" && i + 1 < argc) json = argv[++i];
  }
  std::mt19937 rng(7);
  g_scratch = mn_cuda_scratch_new();
  g_scratch2 = mn_cuda_scratch_new();
  const AttnCase cases[] = {
      {1, 1, 32, 8, 128, 8192, {8191}},       {1, 1, 32, 8, 128, 600, {0}},          {1, 7, 32, 8, 128, 700, {600}},
      {1, 5, 8, 2, 64, 300, {200}},           {1, 3, 12, 4, 32, 64, {10}},           {1, 1, 16, 2, 256, 1000, {999}},
      {1, 2, 6, 6, 128, 50, {0}},             {1, 1, 64, 8, 128, 4096, {4095}},      {1, 3, 24, 8, 96, 200, {150}},
      {1, 33, 4, 1, 64, 100, {60}},           {1, 1, 12, 4, 64, 5000, {4999}},       {4, 1, 32, 8, 128, 2048, {2047, 0, 1000, 7}},
      {3, 2, 8, 2, 64, 900, {5, 898, 300}},   {2, 1, 6, 2, 96, 80, {79, 3}},         {3, 1, 32, 8, 128, 512, {100, 512, 7}},
      {2, 1, 4, 4, 64, 64, {-1, 63}},        {1, 1, 9, 3, 64, 4099, {4098}},       {1, 1, 12, 4, 64, 4099, {0}},
      {1, 1, 8, 8, 128, 4097, {4096}},       {2, 1, 24, 8, 128, 1001, {1000, 0}},  {1, 1, 8, 8, 64, 20000, {19999}},
      // chunks: prefills (batch 8: the flash forward), the last position, invalid ones, head_dim 32 and 96
      {1, 128, 9, 3, 64, 256, {0}},          {3, 64, 8, 2, 128, 300, {236, 0, 100}}, {2, 20, 6, 2, 96, 64, {50, 3}},
      {2, 16, 4, 4, 32, 40, {24, -1}},       {1, 200, 12, 4, 64, 1100, {900}},       {8, 128, 9, 3, 64, 256, {0, 1, 2, 3, 64, 100, 127, 128}},
      // chunks far into long caches (the flash forward's key splits; uneven shares, the last tile partial)
      {1, 128, 9, 3, 64, 4096, {3968}},      {1, 16, 9, 3, 64, 4096, {4000}},         {2, 70, 8, 2, 128, 3000, {2900, 5}},
      {1, 33, 4, 1, 64, 2000, {1234}},       {1, 64, 12, 4, 32, 5000, {4936}},        {2, 24, 6, 2, 96, 1500, {1476, -1}},
      // 16-bit head_dim 128: slices of >= 1024 rows take the register-fed form, shorter ones (the last
      // split of 16001 rows, short sequences of a batch) the cp.async form, in one launch
      {1, 1, 32, 8, 128, 16384, {16383}},    {1, 1, 16, 8, 128, 16384, {16000}},     {1, 1, 24, 8, 128, 16384, {16383}},
      {2, 1, 8, 8, 128, 9000, {8999, 4500}}, {8, 1, 32, 8, 128, 4096, {4095, 0, 2047, 4000, -1, 3000, 1024, 77}},
  };
  int bad = CheckRopeAttentionCases(rng);
  for (int dt : {MN_F32, MN_F16, MN_BF16}) {
    if (rope_only) break;
    for (const AttnCase& c : cases) bad += !CheckAttention(c, dt, rng);
    // chunks on each kernel, whichever the library would pick: the flash forward with its own key
    // splits, with at most 3 (uneven shares), without any, and the split-K kernel
    const struct { int flash, key_splits; const char* name; } kernels[] = {
        {1, 0, "flash"}, {1, 3, "flash 3 key splits"}, {1, 1, "flash 1 key split"}, {0, 0, "split-K"}};
    for (const auto& kn : kernels) {
      g_attn_flash = kn.flash;
      g_attn_key_splits = kn.key_splits;
      for (const AttnCase& c : cases)
        if (c.T > 1) bad += !CheckAttention(c, dt, rng, LibraryAttention, kn.name);
    }
    g_attn_flash = -1;
    g_attn_key_splits = 0;
    bad += !CheckRope(dt, 3, 5, 4 * 128, 128, 2, {7, 0, 4093}, rng);
    bad += !CheckRope(dt, 1, 33, 8 * 64, 64, 0, {100000}, rng);
    bad += !CheckRope(dt, 2, 3, 6 * 96, 96, 1, {5}, rng);  // hd 96: the scalar path
    bad += !CheckCacheWrite(dt, 3, 1, 1024, 64, {63, 0, 64}, rng);  // sequence 2 out of range: untouched
    bad += !CheckCacheWrite(dt, 2, 3, 6, 10, {7, 2}, rng);          // 12- or 24-byte rows: the element path
  }
  if (sweep) {
    bad += CheckSweep<float, 128>(MN_F32, rng) + CheckSweep<__half, 128>(MN_F16, rng);
    bad += CheckSweep<float, 64>(MN_F32, rng) + CheckSweep<__half, 64>(MN_F16, rng);
  }
  std::printf("checks: %d failed\n", bad);
  if (check_only) return bad ? 1 : 0;

  const DeviceInfo dev = QueryDevice();
  const double peak = dev.peak_gbps;
  if (json) {
    g_json = std::fopen(json, "w");
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    std::fprintf(g_json,
                 "{\"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %d, \"peak_GBps\": %.0f, \"cuda_runtime\": %d, \"checks_failed\": %d, "
                 "\"method\": \"CUDA events per launch: kernel_graph_us = N launches in a CUDA graph replayed, kernel_stream_us = back-to-back "
                 "stream launches; consecutive launches read different K/V caches (cache_sets of them, sets_over_l2 x the L2 size)\", "
                 "\"results\": [",
                 dev.name.c_str(), dev.sms, l2, peak, CUDART_VERSION, bad);
  }
  std::printf("timing on %s (%d SMs, peak %.0f GB/s): decode H=32 KVH=8; CUDA events, per launch, rotating over K/V sets of >= 3x L2\n",
              dev.name.c_str(), dev.sms, peak);
  Timer tm;
  TimeLaunchFloor(tm, peak);
  TimeRopeAttentionAll(tm, peak);
  for (bool hd128 : {true, false}) {  // head_dim 128, then 64
    if (rope_only) break;
    if (hd128) {
      TimeAttention<float, 128>(tm, MN_F32, sweep, peak);
      TimeAttention<__half, 128>(tm, MN_F16, sweep, peak);
      TimeAttention<__nv_bfloat16, 128>(tm, MN_BF16, false, peak);
    } else {
      TimeAttention<float, 64>(tm, MN_F32, sweep, peak);
      TimeAttention<__half, 64>(tm, MN_F16, sweep, peak);
    }
  }
  for (int dt : {MN_F32, MN_F16})
    if (!rope_only) TimeRope(tm, dt, peak);
  if (!rope_only) {
    TimePrefill<__half>(tm, MN_F16, peak);
    TimePrefill<float>(tm, MN_F32, peak);
  }
  if (g_json) {
    std::fprintf(g_json, "\n]}\n");
    std::fclose(g_json);
  }
  return bad ? 1 : 0;
}
