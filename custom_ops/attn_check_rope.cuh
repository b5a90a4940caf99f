// attn_check's part for RopeCachedAttention (included by attn_check.cu after its helpers): the fused
// launcher against a double-precision host reference, and its kernel time next to the four kernels it
// replaces (Rope of q, RopeCacheWrite of k, CacheWrite of v, CachedAttention), CUDA events only.
#pragma once

struct RopeAttnCase {
  int B, T, H, KVH, hd, max_seq;
  std::vector<int64_t> pos;  // per sequence; an invalid one: NaN output and its caches untouched
  bool in_place;             // k_out/v_out are the input caches (the session's binding), else copies
};

// Rows of `x` ([B*T][heads*hd]) rotated at positions pos[b] + t, angles in float32 as the kernels.
static std::vector<float> RotateRows(const std::vector<float>& x, int B, int T, int heads, int hd, const std::vector<int64_t>& pos,
                                     const std::vector<float>& inv) {
  std::vector<float> y(x.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h)
        for (int j = 0; j < hd / 2; ++j) {
          const float ang = static_cast<float>(pos[b] + t) * inv[j];
          const size_t i = (((size_t)b * T + t) * heads + h) * hd + j;
          const double a = x[i], c = x[i + hd / 2], cs = std::cos((double)ang), sn = std::sin((double)ang);
          y[i] = static_cast<float>(a * cs - c * sn);
          y[i + hd / 2] = static_cast<float>(c * cs + a * sn);
        }
  return y;
}

static bool CheckRopeAttention(const RopeAttnCase& c, int dt, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  const size_t kvw = (size_t)c.KVH * c.hd;
  std::vector<float> q((size_t)c.B * c.T * c.H * c.hd), kn((size_t)c.B * c.T * kvw), vn(kn.size());
  std::vector<float> kc((size_t)c.B * c.max_seq * kvw), vc(kc.size());
  for (auto* x : {&q, &kn, &vn, &kc, &vc})
    for (auto& f : *x) f = nd(rng);
  const std::vector<unsigned char> kcb = ToDevice(&kc, dt), vcb = ToDevice(&vc, dt);
  void *dq = Upload(ToDevice(&q, dt)), *dkn = Upload(ToDevice(&kn, dt)), *dvn = Upload(ToDevice(&vn, dt));
  void *dkc = Upload(kcb), *dvc = Upload(vcb), *dout = nullptr, *dko = dkc, *dvo = dvc;
  CK(cudaMalloc(&dout, q.size() * ElemBytes(dt)));
  if (!c.in_place) {
    CK(cudaMalloc(&dko, kcb.size()));
    CK(cudaMalloc(&dvo, vcb.size()));
  }
  int64_t* dpos = nullptr;
  const MnPos pos = DevPositions(c.pos, &dpos);
  std::vector<float> inv(c.hd / 2);
  for (int j = 0; j < c.hd / 2; ++j) inv[j] = powf(10000.f, -2.f * j / c.hd);
  // The reference: the unfused ops' results, the rotated rows rounded to the element type as Rope's
  // output is, the new rows written for the valid sequences only.
  std::vector<int64_t> ref_pos = c.pos;
  for (auto& p : ref_pos) p = (p < 0 || p > c.max_seq - c.T) ? 0 : p;
  std::vector<float> qr = RotateRows(q, c.B, c.T, c.H, c.hd, ref_pos, inv), kr = RotateRows(kn, c.B, c.T, c.KVH, c.hd, ref_pos, inv);
  ToDevice(&qr, dt);
  ToDevice(&kr, dt);
  std::vector<float> k_all = kc, v_all = vc, kw = kc, vw = vc;  // k_all/v_all: for the reference; kw/vw: what must be written
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t) {
      const size_t dst = ((size_t)b * c.max_seq + ref_pos[b] + t) * kvw, src = ((size_t)b * c.T + t) * kvw;
      std::copy(kr.begin() + src, kr.begin() + src + kvw, k_all.begin() + dst);
      std::copy(vn.begin() + src, vn.begin() + src + kvw, v_all.begin() + dst);
      if (ref_pos[b] == c.pos[b]) {
        std::copy(kr.begin() + src, kr.begin() + src + kvw, kw.begin() + dst);
        std::copy(vn.begin() + src, vn.begin() + src + kvw, vw.begin() + dst);
      }
    }
  std::vector<double> ref;
  AttnReference(qr, k_all, v_all, c.B, c.T, c.H, c.KVH, c.hd, c.max_seq, ref_pos, &ref);
  g_attn_last_splits = 0;
  const int e = mn_cuda_rope_cached_attention(dt, dq, dkn, dvn, dkc, dvc, dout, dko, dvo, c.B, c.T, c.H, c.KVH, c.hd, c.max_seq, pos,
                                              inv.data(), g_scratch, g_scratch2, nullptr);
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = FromDevice(Download(dout, q.size() * ElemBytes(dt)), dt);
  const std::vector<float> gk = FromDevice(Download(dko, kcb.size()), dt), gv = FromDevice(Download(dvo, vcb.size()), dt);
  double err = 0, cache_err = 0;
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
  for (size_t i = 0; i < kw.size(); ++i)  // rotated rows within one ulp; every other row bit-exact (vw as given)
    cache_err = WorseErr(cache_err, std::max(std::fabs((double)gk[i] - kw[i]) / std::max(1.0, std::fabs((double)kw[i])),
                                             gv[i] == vw[i] ? 0.0 : 1.0));
  const bool ok = e == 0 && err <= Ulp(dt) && cache_err <= Ulp(dt) && nan_ok;
  std::printf("check rope_attention %-8s %s B=%d T=%d H=%d KVH=%d hd=%d max_seq=%d pos=[", kTypeName[dt], c.in_place ? "in-place" : "copy",
              c.B, c.T, c.H, c.KVH, c.hd, c.max_seq);
  for (size_t i = 0; i < c.pos.size(); ++i) std::printf("%s%lld", i ? "," : "", (long long)c.pos[i]);
  std::printf("]: rc %d splits %d max_rel_err %.2e caches %.2e (tol %.1e)%s %s\n", e, g_attn_last_splits, err, cache_err, Ulp(dt),
              nan_ok ? "" : " NaN-missing", ok ? "ok" : "FAIL");
  for (void* p : {dq, dkn, dvn, dkc, dvc, dout, static_cast<void*>(dpos)}) cudaFree(p);
  if (!c.in_place) {
    cudaFree(dko);
    cudaFree(dvo);
  }
  return ok;
}

static int CheckRopeAttentionCases(std::mt19937& rng) {
  const RopeAttnCase cases[] = {
      {1, 1, 9, 3, 64, 4096, {4095}, true},        // SmolLM2, the last position
      {1, 1, 9, 3, 64, 300, {0}, true},            // the first position
      {1, 1, 32, 8, 128, 8192, {5000}, true},      // long cache: many splits, the new row in one of them
      {1, 1, 32, 4, 128, 2048, {1023}, true},      // 8 query heads per KV head: two blocks write the row
      {4, 1, 9, 3, 64, 1000, {999, 0, 500, 77}, true},  // a batch, a position per sequence
      {3, 1, 32, 8, 128, 512, {100, 512, 7}, true},     // sequence 1 out of range: NaN, nothing written
      {1, 3, 8, 2, 64, 400, {200}, true},          // three new rows (T > 1)
      {2, 2, 12, 4, 32, 128, {126, 3}, false},     // out of place: the caches copied first
      {1, 1, 16, 2, 256, 1000, {999}, true},       // head_dim 256: the two-kernel path
      {1, 1, 12, 4, 32, 77, {76}, true},           // head_dim 32: the two-kernel path
      {1, 1, 8, 2, 96, 300, {150}, true},          // head_dim 96: the two-kernel path
      {2, 1, 6, 2, 48, 80, {79, 3}, false},        // head_dim 48, out of place
  };
  int bad = 0;
  for (int dt : {MN_F32, MN_F16, MN_BF16})
    for (const RopeAttnCase& c : cases) bad += !CheckRopeAttention(c, dt, rng);
  return bad;
}

// The decode step's attention with its rope and cache writes: the fused kernel, and the four kernels it
// replaces, batch 1, at 128 / 4096 / 8192 cached positions, rotating over distinct caches
// (attn_check_time.cuh's CacheSets). Bytes: what the fused op must move.
template <class T>
static void TimeRopeAttention(Timer& tm, int dt, int H, int KVH, int hd, double peak) {
  const int max_seq = 8192;
  const size_t kvw = (size_t)KVH * hd;
  std::vector<float> q((size_t)H * hd, 0.5f), nw(kvw, 0.5f), inv(hd / 2);
  for (int j = 0; j < hd / 2; ++j) inv[j] = powf(10000.f, -2.f * j / hd);
  void *dq = Upload(ToDevice(&q, dt)), *dkn = Upload(ToDevice(&nw, dt)), *dvn = Upload(ToDevice(&nw, dt));
  void *dqr = nullptr, *dout = nullptr;
  CK(cudaMalloc(&dqr, q.size() * sizeof(T)));
  CK(cudaMalloc(&dout, q.size() * sizeof(T)));
  for (int L : {128, 4096, 8192}) {
    const CacheSets kv(1, L, max_seq, kvw * sizeof(T));
    int64_t* dpos = nullptr;
    const MnPos pos = DevPositions({L - 1}, &dpos);
    const double bytes = (2.0 * L * kvw + 2.0 * H * hd + 2.0 * kvw) * sizeof(T);
    int it = 0;
    auto fused = [&](cudaStream_t s) {
      void *dk = kv.K(it), *dv = kv.V(it++);
      mn_cuda_rope_cached_attention(dt, dq, dkn, dvn, dk, dv, dout, dk, dv, 1, 1, H, KVH, hd, max_seq, pos, inv.data(), g_scratch,
                                    g_scratch2, s);
    };
    auto unfused = [&](cudaStream_t s) {
      void *dk = kv.K(it), *dv = kv.V(it++);
      mn_cuda_rope(dt, dq, dqr, 1, 1, H * hd, hd, 0, pos, inv.data(), s);
      mn_cuda_rope_cache_write(dt, dkn, dk, dk, 1, kvw, max_seq, hd, inv.data(), pos, s);
      mn_cuda_cache_write(sizeof(T), dvn, dv, dv, 1, 1, kvw, max_seq, pos, s);
      mn_cuda_cached_attention(dt, dqr, dk, dv, dout, 1, 1, H, KVH, hd, max_seq, pos, g_scratch, s);
    };
    auto attention = [&](cudaStream_t s) {
      void *dk = kv.K(it), *dv = kv.V(it++);
      mn_cuda_cached_attention(dt, dqr, dk, dv, dout, 1, 1, H, KVH, hd, max_seq, pos, g_scratch, s);
    };
    char cfg[64];
    std::snprintf(cfg, sizeof cfg, "H%d/%d hd%d", H, KVH, hd);
    const int n = kv.GraphLaunches();
    Record("rope_attention", kTypeName[dt], cfg, 1, L, bytes, tm.Graph(fused, n), tm.Stream(fused), peak, &kv);
    Record("rope+attn (4 k)", kTypeName[dt], cfg, 1, L, bytes, tm.Graph(unfused, n), tm.Stream(unfused), peak, &kv);
    Record("attention alone", kTypeName[dt], cfg, 1, L, bytes, tm.Graph(attention, n), tm.Stream(attention), peak, &kv);
    cudaFree(dpos);
  }
  for (void* p : {dq, dkn, dvn, dqr, dout}) cudaFree(p);
}

// SmolLM2's heads (9 over 3, head_dim 64) and 32 over 8 with head_dim 128, float32 and float16.
static void TimeRopeAttentionAll(Timer& tm, double peak) {
  const int heads[2][3] = {{9, 3, 64}, {32, 8, 128}};
  for (const auto& h : heads) {
    TimeRopeAttention<float>(tm, MN_F32, h[0], h[1], h[2], peak);
    TimeRopeAttention<__half>(tm, MN_F16, h[0], h[1], h[2], peak);
  }
}
