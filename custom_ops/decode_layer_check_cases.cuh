// decode_layer_check's cases, timing and main (included by decode_layer_check.cu after its reference).
#pragma once

static const char* PathName(int path) { return path == MN_DECODE_LAYER_FUSED ? "one-launch" : "five-kernels"; }

static void Launch(const MnDecodeLayer& a, MnDecodeLayerState* st, cudaStream_t s) {
  if (int e = mn_cuda_decode_layer(&a, st, s)) {
    std::printf("mn_cuda_decode_layer failed: %s\n", cudaGetErrorString(static_cast<cudaError_t>(e)));
    std::exit(1);
  }
}

static MnPos DevPos(const std::vector<int64_t>& pos, int64_t** dptr) {
  CK(cudaMalloc(dptr, sizeof(int64_t) * pos.size()));
  CK(cudaMemcpy(*dptr, pos.data(), sizeof(int64_t) * pos.size(), cudaMemcpyHostToDevice));
  return MnPos{*dptr, MN_POS_I64, static_cast<int64_t>(pos.size())};
}

struct PathResult {
  std::vector<float> y;
  double err_y, err_k, err_v;
  int took;
};

// One path's call on fresh copies of the caches (in place), compared with the reference.
static PathResult RunPath(const Problem& p, const DevLayer& L, const void* dx, MnPos pos, const std::vector<unsigned char>& kcb,
                          const std::vector<unsigned char>& vcb, int path, const std::vector<double>& yref,
                          const std::vector<float>& kref, const std::vector<float>& vref) {
  const int64_t R = (int64_t)p.B * p.S;
  void *dkc = Upload(kcb), *dvc = Upload(vcb), *dy = nullptr;
  CK(cudaMalloc(&dy, R * p.d.D * ElemBytes(p.dt)));
  MnDecodeLayerState* st = mn_cuda_decode_layer_new();
  mn_cuda_decode_layer_set_path(st, path);
  const std::vector<float> inv = InvFreq(p.d.hd);
  Launch(Args(p, L, dx, dy, dkc, dvc, pos, inv), st, nullptr);
  CK(cudaDeviceSynchronize());
  PathResult r;
  r.took = mn_cuda_decode_layer_last_path(st);
  r.y = FromDevice(Download(dy, R * p.d.D * ElemBytes(p.dt)), p.dt);
  const std::vector<float> kg = FromDevice(Download(dkc, kcb.size()), p.dt), vg = FromDevice(Download(dvc, vcb.size()), p.dt);
  r.err_y = MaxErr(r.y, yref);
  r.err_k = MaxErr(kg, std::vector<double>(kref.begin(), kref.end()));
  r.err_v = MaxErr(vg, std::vector<double>(vref.begin(), vref.end()));
  mn_cuda_decode_layer_free(st);
  CK(cudaFree(dkc));
  CK(cudaFree(dvc));
  CK(cudaFree(dy));
  return r;
}

// One configuration through both paths: AUTO must take `expect`; both must match the reference.
static bool RunCheck(const char* name, const Problem& p, int expect, std::mt19937& rng, std::vector<std::string>* json) {
  HostLayer L = MakeHostLayer(p.d, rng);
  const DevLayer dl = UploadLayer(L, p.dt);
  const int64_t R = (int64_t)p.B * p.S, cache_n = (int64_t)p.B * p.max_seq * p.d.KVH * p.d.hd;
  std::vector<float> x = Randn(R * p.d.D, rng, 1.f), kc = Randn(cache_n, rng, 1.f), vc = Randn(cache_n, rng, 1.f);
  void* dx = Upload(ToDevice(&x, p.dt));
  const std::vector<unsigned char> kcb = ToDevice(&kc, p.dt), vcb = ToDevice(&vc, p.dt);
  std::vector<float> kref = kc, vref = vc;
  const std::vector<double> yref = Reference(p, L, x, kref, vref);
  int64_t* dpos = nullptr;
  const MnPos pos = DevPos(p.pos, &dpos);
  const PathResult a = RunPath(p, dl, dx, pos, kcb, vcb, MN_DECODE_LAYER_AUTO, yref, kref, vref);
  const PathResult f = RunPath(p, dl, dx, pos, kcb, vcb, MN_DECODE_LAYER_FIVE_KERNELS, yref, kref, vref);
  std::vector<double> fy(f.y.begin(), f.y.end());
  const double between = MaxErr(a.y, fy);
  const double tol = p.dt == MN_F32 ? 1e-4 : p.dt == MN_F16 ? 4e-3 : 3e-2;  // float32 sums; one rounding per op output
  const bool ok = a.took == expect && a.err_y <= tol && a.err_k <= tol && a.err_v <= tol && f.err_y <= tol && f.err_k <= tol &&
                  f.err_v <= tol && between <= tol;
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "{\"check\": \"%s\", \"dtype\": \"%s\", \"B\": %d, \"S\": %d, \"max_seq\": %lld, \"pos0\": %lld, \"trans_b\": %d, "
                "\"path\": \"%s\", \"err_y\": %.2e, \"err_k\": %.2e, \"err_v\": %.2e, \"five_err_y\": %.2e, \"five_err_k\": %.2e, "
                "\"five_err_v\": %.2e, \"one_vs_five\": %.2e, \"ok\": %s}",
                name, kTypeName[p.dt], p.B, p.S, (long long)p.max_seq, (long long)p.pos[0], (int)p.trans_b, PathName(a.took), a.err_y,
                a.err_k, a.err_v, f.err_y, f.err_k, f.err_v, between, ok ? "true" : "false");
  std::printf("%s%s\n", buf, ok ? "" : "   <-- FAILED");
  std::fflush(stdout);
  json->push_back(buf);
  FreeLayer(dl);
  CK(cudaFree(dx));
  CK(cudaFree(dpos));
  return ok;
}

static bool RunChecks(std::vector<std::string>* json) {
  std::mt19937 rng(1234);
  bool ok = true;
  const int F = MN_DECODE_LAYER_FUSED, FIVE = MN_DECODE_LAYER_FIVE_KERNELS;
  const Dims hd128 = {"hd128", 512, 4, 2, 128, 1024}, g8 = {"gqa8", 512, 8, 1, 64, 768}, hd32 = {"hd32", 256, 8, 2, 32, 512};
  for (int dt : {MN_F32, MN_F16, MN_BF16})
    for (int64_t len : {128, 1024, 4096}) ok &= RunCheck("smollm2", {kSmol, 1, 1, 4096, {len - 1}, true, dt}, F, rng, json);
  for (int dt : {MN_F32, MN_F16}) {
    ok &= RunCheck("batch 3 x 2 rows", {kSmol, 3, 2, 1024, {5, 300, 1000}, true, dt}, F, rng, json);
    ok &= RunCheck("16 rows", {kSmol, 1, 16, 512, {100}, true, dt}, F, rng, json);
    ok &= RunCheck("invalid position", {kSmol, 2, 1, 256, {10, 256}, true, dt}, F, rng, json);
    ok &= RunCheck("position 0", {kSmol, 1, 1, 64, {0}, true, dt}, F, rng, json);
  }
  ok &= RunCheck("head_dim 128", {hd128, 1, 1, 1024, {700}, true, MN_F32}, F, rng, json);
  ok &= RunCheck("head_dim 128", {hd128, 2, 3, 512, {7, 400}, true, MN_BF16}, F, rng, json);
  ok &= RunCheck("8 heads per KV head", {g8, 1, 1, 512, {200}, true, MN_F16}, F, rng, json);
  ok &= RunCheck("heads: head_dim 128", {hd128, 1, 1, 512, {90}, true, MN_F32}, F, rng, json);
  ok &= RunCheck("heads: head_dim 128", {hd128, 2, 3, 512, {7, 60}, true, MN_F16}, F, rng, json);
  ok &= RunCheck("heads: 8 heads per KV head", {g8, 1, 1, 512, {30}, true, MN_BF16}, F, rng, json);
  ok &= RunCheck("trans_b 0", {kSmol, 1, 1, 256, {100}, false, MN_F32}, FIVE, rng, json);
  ok &= RunCheck("head_dim 32", {hd32, 1, 2, 256, {50}, true, MN_F16}, FIVE, rng, json);
  ok &= RunCheck("17 rows", {kSmol, 1, 17, 256, {20}, true, MN_F32}, FIVE, rng, json);
  return ok;
}

// ---------------------------------------------------------------- timing
__global__ void FillKernel(void* p, int dt, int64_t n, uint32_t seed, float scale, float offset) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    const float v = offset + scale * ((h >> 8) * (1.f / 16777216.f) - 0.5f);  // uniform, sd = scale / sqrt(12)
    if (dt == MN_F32) static_cast<float*>(p)[i] = v;
    else if (dt == MN_F16) static_cast<__half*>(p)[i] = __float2half_rn(v);
    else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  }
}

static void* Filled(int64_t n, int dt, uint32_t seed, float sd, float offset = 0.f) {
  void* p = nullptr;
  CK(cudaMalloc(&p, n * ElemBytes(dt) + 16));
  FillKernel<<<512, 256>>>(p, dt, n, seed, sd * std::sqrt(12.f), offset);
  CK(cudaGetLastError());
  return p;
}

// `layers` distinct SmolLM2 layers chained (y of layer l is x of layer l + 1), one state per layer as
// ORT keeps one kernel instance per node.
struct Stack {
  Problem p;
  std::vector<DevLayer> L;
  std::vector<void*> kc, vc, y;
  std::vector<MnDecodeLayerState*> st;
  void* x0;
  int64_t* dpos;
  MnPos pos;
  std::vector<float> inv;

  Stack(int dt, int64_t len, int layers) : p{kSmol, 1, 1, 4096, {len - 1}, true, dt}, inv(InvFreq(kSmol.hd)) {
    const Dims& d = p.d;
    const int64_t cache_n = p.max_seq * d.KVH * d.hd;
    const float sd = 1.f / std::sqrt((float)d.D), si = 1.f / std::sqrt((float)d.I), sq = 1.f / std::sqrt((float)(d.H * d.hd));
    for (int l = 0; l < layers; ++l) {
      const uint32_t s = 977u * (l + 1);
      L.push_back({Filled(d.D, dt, s + 1, 0.2f, 1.f), Filled(d.H * d.hd * d.D, dt, s + 2, sd), Filled(d.KVH * d.hd * d.D, dt, s + 3, sd),
                   Filled(d.KVH * d.hd * d.D, dt, s + 4, sd), Filled(d.D * d.H * d.hd, dt, s + 5, sq), Filled(d.D, dt, s + 6, 0.2f, 1.f),
                   Filled(d.I * d.D, dt, s + 7, sd), Filled(d.I * d.D, dt, s + 8, sd), Filled(d.D * d.I, dt, s + 9, si)});
      kc.push_back(Filled(cache_n, dt, s + 10, 1.f));
      vc.push_back(Filled(cache_n, dt, s + 11, 1.f));
      y.push_back(Filled(d.D, dt, 0, 0.f));
      st.push_back(mn_cuda_decode_layer_new());
    }
    x0 = Filled(d.D, dt, 5, 1.f);
    pos = DevPos(p.pos, &dpos);
    CK(cudaDeviceSynchronize());
  }
  ~Stack() {
    for (size_t l = 0; l < L.size(); ++l) {
      FreeLayer(L[l]);
      for (void* q : {kc[l], vc[l], y[l]}) CK(cudaFree(q));
      mn_cuda_decode_layer_free(st[l]);
    }
    CK(cudaFree(x0));
    CK(cudaFree(dpos));
  }
  void Run(cudaStream_t s, int layers) {
    for (int l = 0; l < layers; ++l) Launch(Args(p, L[l], l ? y[l - 1] : x0, y[l], kc[l], vc[l], pos, inv), st[l], s);
  }
  void SetPath(int path, int barrier, int phases, bool pdl, bool fixed_shapes, int64_t heads_max_rows) {
    for (auto* s : st) {
      mn_cuda_decode_layer_set_path(s, path);
      s->barrier = barrier;
      s->phases = phases;
      s->pdl = pdl;
      s->fixed_shapes = fixed_shapes;
      s->heads_max_rows = heads_max_rows;
    }
  }
  std::vector<unsigned char> Last() const { return Download(y.back(), p.d.D * ElemBytes(p.dt)); }
  void SetPos(int64_t v) { CK(cudaMemcpy(dpos, &v, sizeof v, cudaMemcpyHostToDevice)); }
};

// The stack captured once as a graph; the position moved to len - 2 between replays: the replay must
// equal a direct run at that position bit for bit.
static bool ReplayAfterPositionChange(Stack& sk, Timer& tm, int64_t len) {
  const int n = static_cast<int>(sk.L.size());
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(tm.s, cudaStreamCaptureModeThreadLocal));
  sk.Run(tm.s, n);
  CK(cudaStreamEndCapture(tm.s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  sk.SetPos(len - 2);
  CK(cudaGraphLaunch(ge, tm.s));
  CK(cudaStreamSynchronize(tm.s));
  const std::vector<unsigned char> replayed = sk.Last();
  sk.Run(tm.s, n);
  CK(cudaStreamSynchronize(tm.s));
  const bool same = replayed == sk.Last();
  sk.SetPos(len - 1);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return same;
}

// The LM head's RMSNormLinear (576 -> 49152, one row), graph-timed: what a token costs besides the layers.
static double LmHeadUs(int dt, Timer& tm) {
  const int64_t D = kSmol.D, N = 49152;
  void *x = Filled(D, dt, 1, 1.f), *g = Filled(D, dt, 2, 0.2f, 1.f), *w = Filled(N * D, dt, 3, 1.f / 24.f), *y = Filled(N, dt, 0, 0.f);
  const float eps = kEps;
  const double us = tm.Graph(
      [&](cudaStream_t s) {
        const void* ws[1] = {w};
        void* ys[1] = {y};
        CK(static_cast<cudaError_t>(mn_cuda_rms_norm_linear(dt, x, g, 1, D, eps, 1, 1, ws, &N, ys, s)));
      },
      100);
  for (void* p : {x, g, w, y}) CK(cudaFree(p));
  return us;
}

struct Variant {
  const char* name;
  int path, barrier, phases;
  bool pdl;
  bool fixed_shapes = true;  // SmolLM2's batch-1 layer as the FixedParams instantiation (false: the generic one)
  int64_t heads_max_rows = -1;  // phases 2-3 as Heads units up to this many attended rows (-1: the library's default)
  bool Main() const {
    return path == MN_DECODE_LAYER_FUSED && barrier == dl::kBarrierGrowOnly && phases == 127 && pdl && fixed_shapes && heads_max_rows < 0;
  }
};

// The one-launch kernel's phase stamps (dl::Trace points) over one graph replay of the stack: per
// point, when the last block reached it (from the first block's start; mean over the layers), how long
// each barrier took from its last arrival to its last departure, the blocks' start skew, and the gap
// from a layer's last block to the next layer's first.
static const char* kPointNames[dl::kTracePoints] = {
    "start", "x and gammas loaded", "qkv done", "barrier0 out", "attention tiles done", "attention done", "barrier1 out",
    "heads merged", "o_proj done", "barrier2 out", "x1 loaded", "gate_up done", "barrier3 out", "h loaded", "end"};

static std::string TracePhases(Stack& sk, const Variant& v, Timer& tm) {
  const int n = static_cast<int>(sk.L.size()), blocks = NumSMs(), P = dl::kTracePoints;
  std::vector<unsigned long long*> bufs(n);
  for (int l = 0; l < n; ++l) {
    CK(cudaMalloc(&bufs[l], sizeof(unsigned long long) * blocks * P));
    CK(cudaMemset(bufs[l], 0, sizeof(unsigned long long) * blocks * P));
    sk.st[l]->trace = bufs[l];
  }
  tm.Graph([&](cudaStream_t s) { sk.Run(s, n); }, 1, 1);
  std::vector<double> at(P, 0.0), bar(4, 0.0);
  double gap = 0, prev_end = 0, skew = 0;
  const int arrive[4] = {2, 5, 8, 11};
  for (int l = 0; l < n; ++l) {
    std::vector<unsigned long long> t(static_cast<size_t>(blocks) * P);
    CK(cudaMemcpy(t.data(), bufs[l], t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost));
    auto lo = [&](int k) { unsigned long long m = ~0ull; for (int b = 0; b < blocks; ++b) if (t[b * P + k]) m = std::min(m, t[b * P + k]); return (double)m; };
    auto hi = [&](int k) { unsigned long long m = 0; for (int b = 0; b < blocks; ++b) m = std::max(m, t[b * P + k]); return (double)m; };
    const double t0 = lo(0);
    for (int k = 1; k < P; ++k) at[k] += hi(k) > 0 ? (hi(k) - t0) / n : 0.0;
    for (int j = 0; j < 4; ++j) bar[j] += (hi(arrive[j] + 1) - hi(arrive[j])) / n;
    skew += (hi(0) - t0) / n;
    if (l > 0) gap += (t0 - prev_end) / (n - 1);
    prev_end = hi(P - 1);
    sk.st[l]->trace = nullptr;
    CK(cudaFree(bufs[l]));
  }
  std::string pts;
  for (int k = 1; k < P; ++k) {
    char b[96];
    std::snprintf(b, sizeof b, "%s\"%s\": %.2f", k > 1 ? ", " : "", kPointNames[k], at[k] / 1e3);
    pts += b;
  }
  char buf[1536];
  std::snprintf(buf, sizeof buf,
                "{\"trace\": \"%s\", \"dtype\": \"%s\", \"cache_len\": %lld, \"last_block_at_us\": {%s}, "
                "\"barrier_last_arrival_to_last_departure_us\": [%.2f, %.2f, %.2f, %.2f], \"start_skew_us\": %.2f, \"gap_between_layers_us\": %.2f}",
                v.name, kTypeName[sk.p.dt], (long long)sk.p.pos[0] + 1, pts.c_str(), bar[0] / 1e3, bar[1] / 1e3, bar[2] / 1e3,
                bar[3] / 1e3, skew / 1e3, gap / 1e3);
  return buf;
}

// Per-layer times of one variant: back-to-back launches of layer 0, and the graph of the whole stack.
static bool TimeVariant(Stack& sk, const Variant& v, int64_t len, double lm_us, int replays, Timer& tm, std::vector<std::string>* json) {
  const int n = static_cast<int>(sk.L.size());
  sk.SetPath(v.path, v.barrier, v.phases, v.pdl, v.fixed_shapes, v.heads_max_rows);
  sk.Run(tm.s, n);
  CK(cudaStreamSynchronize(tm.s));
  const std::vector<unsigned char> direct = sk.Last();
  const double one = tm.Stream([&](cudaStream_t s) { sk.Run(s, 1); }, 200);
  const double graph = tm.Graph([&](cudaStream_t s) { sk.Run(s, n); }, 1, replays) / n;
  const bool same = direct == sk.Last();
  const bool moved = v.path == MN_DECODE_LAYER_FUSED ? ReplayAfterPositionChange(sk, tm, len) : true;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"timing\": \"%s\", \"dtype\": \"%s\", \"cache_len\": %lld, \"layers\": %d, \"stream_one_layer_us\": %.2f, "
                "\"graph_per_layer_us\": %.2f, \"lm_head_us\": %.2f, \"tokens_per_s_projected\": %.0f, \"replay_identical\": %s, "
                "\"replay_after_position_change_identical\": %s}",
                v.name, kTypeName[sk.p.dt], (long long)len, n, one, graph, lm_us, 1e6 / (n * graph + lm_us), same ? "true" : "false",
                moved ? "true" : "false");
  std::printf("%s%s\n", buf, same && moved ? "" : "   <-- FAILED");
  std::fflush(stdout);
  json->push_back(buf);
  if (v.path == MN_DECODE_LAYER_FUSED) {
    json->push_back(TracePhases(sk, v, tm));
    std::printf("%s\n", json->back().c_str());
    std::fflush(stdout);
  }
  return same && moved;
}

// quick: the main variant only (its timing and phase stamps at every length and type).
static bool RunTimings(int replays, bool quick, std::vector<std::string>* json) {
  Timer tm;
  bool ok = true;
  const int F = MN_DECODE_LAYER_FUSED, G = dl::kBarrierGrowOnly;
  const Variant variants[] = {{"one-launch", F, G, 127, true},
                              {"one-launch no-PDL", F, G, 127, false},
                              {"one-launch generation barrier", F, dl::kBarrierGeneration, 127, true},
                              {"one-launch no L2 prefetch", F, G, 127 & ~dl::kPrefetch, true},
                              {"one-launch generic shapes", F, G, 127, true, false},
                              {"one-launch no heads", F, G, 127, true, true, 0},
                              {"one-launch heads always", F, G, 127, true, true, int64_t{1} << 30},
                              {"launch only (no phase, no barrier)", F, G, 0, true},
                              {"launch + 4 barriers", F, G, 32, true},
                              {"five-kernels", MN_DECODE_LAYER_FIVE_KERNELS, G, 127, true}};
  for (int dt : {MN_F32, MN_F16, MN_BF16}) {
    const double lm = LmHeadUs(dt, tm);
    for (int64_t len : {128, 256, 512, 1024, 4096}) {
      Stack sk(dt, len, 30);
      for (const Variant& v : variants) {
        // every variant at 128 cached rows; at every length the main one, the generic-shapes one, the one
        // without L2 prefetches (the kernel prefetches past 256 attended rows) and the two that force the
        // Heads units off and on (the thresholds' crossovers); the five kernels at 128, 1024 and 4096;
        // bfloat16: only the every-length ones
        if (quick && !v.Main()) continue;
        const bool every_length = v.Main() || v.phases == (127 & ~dl::kPrefetch) || !v.fixed_shapes || v.heads_max_rows >= 0;
        if (every_length || (dt != MN_BF16 && (len == 128 || (v.path != F && v.phases == 127 && len != 256 && len != 512))))
          ok &= TimeVariant(sk, v, len, lm, replays, tm, json);
      }
    }
  }
  return ok;
}

int main(int argc, char** argv) {
  const char* json_path = nullptr;
  bool check_only = false, quick = false;
  int replays = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--check-only")) check_only = true;
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--replays") && i + 1 < argc) replays = std::atoi(argv[++i]);
  }
  const DeviceInfo dev = QueryDevice();
  std::printf("device %s (%d SMs)\n", dev.name.c_str(), dev.sms);
  std::vector<std::string> json;
  bool ok = RunChecks(&json);
  if (!check_only) ok &= RunTimings(replays, quick, &json);
  if (json_path) {
    if (FILE* f = std::fopen(json_path, "w")) {
      std::fprintf(f, "{\"device\": \"%s\", \"sms\": %d, \"results\": [\n", dev.name.c_str(), dev.sms);
      for (size_t i = 0; i < json.size(); ++i) std::fprintf(f, "  %s%s\n", json[i].c_str(), i + 1 < json.size() ? "," : "");
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  }
  std::printf(ok ? "decode_layer_check: all checks passed\n" : "decode_layer_check: CHECKS FAILED\n");
  return ok ? 0 : 1;
}
