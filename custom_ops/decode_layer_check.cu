// Standalone check + timing of the DecodeLayer launcher (cuda_decode_layer.cu), without ORT:
//   make -C custom_ops decode-layer-check && custom_ops/build/decode_layer_check [--check-only | --quick] [--json FILE] [--replays N]
// Checks (every element type): the one-launch kernel and the five-kernel path against a double-precision
// host reference of the five-op composition (rounded to the element type where the ops round: q, k, v,
// rotated q and k, a, x1, h, y), and against each other; the caches after the call (the new rows, and
// every other row untouched). Cases: SmolLM2-135M's layer at cache lengths 128 / 1024 / 4096, batches of
// sequences with rows each at their own positions, 16 rows, an invalid position (its rows NaN, its
// cache untouched), head_dim 128, 8 query heads per KV head, and the five-kernel path's shapes
// (trans_b = 0, head_dim 32). Timing (SmolLM2-135M, cache lengths 128..4096): per layer, one-launch
// kernel vs the five kernels, as back-to-back launches of one layer (its weights stay in L2) and as a
// CUDA graph of 30 distinct layers chained (y of one is x of the next; weights from DRAM), replayed;
// the replayed graph's output must equal a direct run's bit for bit, also after the position changes
// between replays. Prints projected tokens/s (30 layers + the LM head's RMSNormLinear). Exit status 1
// when a check fails.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_decode_layer.cu"
// After the kernels: it needs their element-type enum.
#include "check_harness.cuh"

struct Dims {
  const char* name;
  int64_t D, H, KVH, hd, I;
};
static const Dims kSmol = {"smollm2-135m", 576, 9, 3, 64, 1536};
static const float kEps = 1e-5f, kTheta = 10000.f;

// ---------------------------------------------------------------- host reference
struct HostLayer {
  std::vector<float> an, wq, wk, wv, wo, mn, wg, wu, wd;  // rounded to the element type
};
struct DevLayer {
  void *an, *wq, *wk, *wv, *wo, *mn, *wg, *wu, *wd;
};

static double RoundT(double v, int dt) {
  const float f = static_cast<float>(v);
  return dt == MN_F16 ? H2F(F2H(f)) : dt == MN_BF16 ? B2F(F2B(f)) : f;
}

// y [out] = x [in] @ w^T (trans_b: w [out, in]) or x @ w (w [in, out]).
static std::vector<double> Project(const std::vector<double>& x, const std::vector<float>& w, int64_t out, int64_t in, bool trans_b) {
  std::vector<double> y(out, 0.0);
  for (int64_t n = 0; n < out; ++n)
    for (int64_t k = 0; k < in; ++k) y[n] += x[k] * w[trans_b ? n * in + k : k * out + n];
  return y;
}

static std::vector<double> Norm(const double* x, const std::vector<float>& gamma, int64_t D) {
  double ss = 0;
  for (int64_t k = 0; k < D; ++k) ss += x[k] * x[k];
  const double r = std::sqrt(ss / D + kEps);
  std::vector<double> y(D);
  for (int64_t k = 0; k < D; ++k) y[k] = x[k] / r * gamma[k];
  return y;
}

struct Problem {
  Dims d;
  int B, S;
  int64_t max_seq;
  std::vector<int64_t> pos;
  bool trans_b;
  int dt;
};

// Rotates the pair (a, c) at `pos` (float32 angle as the kernels) and rounds both.
static void Rotate(double& a, double& c, int64_t pos, float inv, int dt) {
  const float ang = static_cast<float>(pos) * inv;
  const double cs = std::cos(static_cast<double>(ang)), sn = std::sin(static_cast<double>(ang));
  const double r0 = a * cs - c * sn, r1 = c * cs + a * sn;
  a = RoundT(r0, dt);
  c = RoundT(r1, dt);
}

// The composition for every row; kc/vc are updated as the op must leave them. Rows of a sequence with
// an invalid position are NaN.
static std::vector<double> Reference(const Problem& p, const HostLayer& L, const std::vector<float>& x, std::vector<float>& kc,
                                     std::vector<float>& vc) {
  const Dims& d = p.d;
  const int64_t R = (int64_t)p.B * p.S, qw = d.H * d.hd, kvw = d.KVH * d.hd, half = d.hd / 2;
  std::vector<float> inv(half);
  for (int64_t j = 0; j < half; ++j) inv[j] = powf(kTheta, -2.0f * j / d.hd);
  std::vector<std::vector<double>> q(R);
  std::vector<double> xd(x.begin(), x.end());
  auto valid = [&](int b) { return p.pos[b] >= 0 && p.pos[b] <= p.max_seq - p.S; };
  for (int64_t m = 0; m < R; ++m) {  // q, k, v; rope; cache rows
    const int b = static_cast<int>(m / p.S);
    const int64_t at = (valid(b) ? p.pos[b] : 0) + m % p.S;
    const std::vector<double> xn = Norm(&xd[m * d.D], L.an, d.D);
    std::vector<double> qm = Project(xn, L.wq, qw, d.D, p.trans_b), k = Project(xn, L.wk, kvw, d.D, p.trans_b),
                        v = Project(xn, L.wv, kvw, d.D, p.trans_b);
    for (auto* t : {&qm, &k, &v})
      for (double& e : *t) e = RoundT(e, p.dt);
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t j = 0; j < half; ++j) Rotate(qm[h * d.hd + j], qm[h * d.hd + j + half], at, inv[j], p.dt);
    for (int64_t h = 0; h < d.KVH; ++h)
      for (int64_t j = 0; j < half; ++j) Rotate(k[h * d.hd + j], k[h * d.hd + j + half], at, inv[j], p.dt);
    q[m] = qm;
    if (!valid(b)) continue;
    for (int64_t i = 0; i < kvw; ++i) {
      kc[((int64_t)b * p.max_seq + at) * kvw + i] = static_cast<float>(k[i]);
      vc[((int64_t)b * p.max_seq + at) * kvw + i] = static_cast<float>(v[i]);
    }
  }
  std::vector<double> y(R * d.D);
  for (int64_t m = 0; m < R; ++m) {
    const int b = static_cast<int>(m / p.S);
    if (!valid(b)) {
      for (int64_t n = 0; n < d.D; ++n) y[m * d.D + n] = NAN;
      continue;
    }
    const int64_t Lm = p.pos[b] + m % p.S + 1;
    std::vector<double> a(qw);
    for (int64_t h = 0; h < d.H; ++h) {  // attention, GQA
      const int64_t kvh = h / (d.H / d.KVH);
      std::vector<double> s(Lm);
      double mx = -INFINITY, sum = 0;
      for (int64_t r = 0; r < Lm; ++r) {
        double dot = 0;
        for (int64_t e = 0; e < d.hd; ++e) dot += q[m][h * d.hd + e] * kc[((int64_t)b * p.max_seq + r) * kvw + kvh * d.hd + e];
        s[r] = dot / std::sqrt((double)d.hd);
        mx = std::max(mx, s[r]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t e = 0; e < d.hd; ++e) {
        double acc = 0;
        for (int64_t r = 0; r < Lm; ++r) acc += s[r] * vc[((int64_t)b * p.max_seq + r) * kvw + kvh * d.hd + e];
        a[h * d.hd + e] = RoundT(acc / sum, p.dt);
      }
    }
    std::vector<double> x1 = Project(a, L.wo, d.D, qw, p.trans_b);
    for (int64_t n = 0; n < d.D; ++n) x1[n] = RoundT(x1[n] + xd[m * d.D + n], p.dt);
    const std::vector<double> xn1 = Norm(x1.data(), L.mn, d.D);
    const std::vector<double> g = Project(xn1, L.wg, d.I, d.D, p.trans_b), u = Project(xn1, L.wu, d.I, d.D, p.trans_b);
    std::vector<double> hh(d.I);
    for (int64_t n = 0; n < d.I; ++n) hh[n] = RoundT(g[n] / (1.0 + std::exp(-g[n])) * u[n], p.dt);
    const std::vector<double> yd = Project(hh, L.wd, d.D, d.I, p.trans_b);
    for (int64_t n = 0; n < d.D; ++n) y[m * d.D + n] = RoundT(yd[n] + x1[n], p.dt);
  }
  return y;
}

// ---------------------------------------------------------------- device set-up
static std::vector<float> Randn(size_t n, std::mt19937& rng, float scale, float offset = 0.f) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (float& f : v) f = offset + scale * nd(rng);
  return v;
}

static HostLayer MakeHostLayer(const Dims& d, std::mt19937& rng) {
  HostLayer L;
  const float sd = 1.f / std::sqrt((float)d.D), si = 1.f / std::sqrt((float)d.I), sq = 1.f / std::sqrt((float)(d.H * d.hd));
  L.an = Randn(d.D, rng, 0.2f, 1.f);
  L.mn = Randn(d.D, rng, 0.2f, 1.f);
  L.wq = Randn(d.H * d.hd * d.D, rng, sd);
  L.wk = Randn(d.KVH * d.hd * d.D, rng, sd);
  L.wv = Randn(d.KVH * d.hd * d.D, rng, sd);
  L.wo = Randn(d.D * d.H * d.hd, rng, sq);
  L.wg = Randn(d.I * d.D, rng, sd);
  L.wu = Randn(d.I * d.D, rng, sd);
  L.wd = Randn(d.D * d.I, rng, si);
  return L;
}

static DevLayer UploadLayer(HostLayer& L, int dt) {
  return {Upload(ToDevice(&L.an, dt)), Upload(ToDevice(&L.wq, dt)), Upload(ToDevice(&L.wk, dt)),
          Upload(ToDevice(&L.wv, dt)), Upload(ToDevice(&L.wo, dt)), Upload(ToDevice(&L.mn, dt)),
          Upload(ToDevice(&L.wg, dt)), Upload(ToDevice(&L.wu, dt)), Upload(ToDevice(&L.wd, dt))};
}

static void FreeLayer(const DevLayer& L) {
  for (void* p : {L.an, L.wq, L.wk, L.wv, L.wo, L.mn, L.wg, L.wu, L.wd}) CK(cudaFree(p));
}

static MnDecodeLayer Args(const Problem& p, const DevLayer& L, const void* x, void* y, void* kc, void* vc, MnPos pos,
                          const std::vector<float>& inv) {
  MnDecodeLayer a{};
  a.dtype = p.dt;
  a.x = x, a.attn_norm = L.an, a.w_q = L.wq, a.w_k = L.wk, a.w_v = L.wv, a.w_o = L.wo, a.mlp_norm = L.mn;
  a.w_gate = L.wg, a.w_up = L.wu, a.w_down = L.wd;
  a.k_cache = kc, a.v_cache = vc, a.k_out = kc, a.v_out = vc, a.y = y;
  a.B = p.B, a.S = p.S, a.D = p.d.D, a.H = p.d.H, a.KVH = p.d.KVH, a.head_dim = p.d.hd, a.I = p.d.I, a.max_seq = p.max_seq;
  a.eps = kEps;
  a.trans_b = p.trans_b;
  a.kv_pos = pos;
  a.inv_freq = inv.data();
  return a;
}

static std::vector<float> InvFreq(int64_t hd) {
  std::vector<float> inv(hd / 2);
  for (int64_t j = 0; j < hd / 2; ++j) inv[j] = powf(kTheta, -2.0f * j / hd);
  return inv;
}

// max |got - want| / (1 + |want|); a NaN where the other is not counts as infinite.
static double MaxErr(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      if (std::isnan(want[i]) != std::isnan(got[i])) return INFINITY;
      continue;
    }
    err = std::max(err, std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i])));
  }
  return err;
}

#include "decode_layer_check_cases.cuh"
