// com.meganeura DecodeLayer on the CPU (decode_layer.h): the five decode-step CPU kernels' work in
// sequence on temporaries of the element type T, so the result is exactly what the unfused ops give
// (every intermediate rounded to T where they store it), their parallel loops on one team of threads
// held for the whole layer (Team, cpu_parallel.h):
//   RMSNormLinear (q, k, v) -> RopeCachedAttention (rope, cache writes, attention) ->
//   LinearResidual (o_proj + x) -> RMSNormSwiGLU -> LinearResidual (down_proj + x1).
// The caches are written in place when ORT hands the kernel their input buffers as outputs 1 and 2
// (RopeCachedAttentionCpuRun copies them first otherwise). Attributes and inputs are read and checked
// by decode_layer.cc, as the CUDA kernel reads and checks them.
#ifdef __linux__
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cpu_parallel.h"
#include "cpu_team_policy.h"
#include "decode_layer.h"
#include "decode_linear.h"
#include "rope_attention.h"

namespace mn {

namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;

// Calls run by the leader alone and by a team of several, team calls that stalled on a preempted member
// (MeganeuraDecodeLayerCpuCalls: the tests see what MEGANEURA_CPU_TEAM and the policy chose).
std::atomic<int64_t> g_calls[2], g_stalls;

// A temporary of `count` elements of `type`, float-aligned.
struct Scratch {
  std::vector<float> buf;
  Scratch(ONNXTensorElementDataType type, int64_t count) : buf((static_cast<size_t>(count) * ElementSize(type) + 3) / 4) {}
  void* data() { return buf.data(); }
};

// A host tensor of the prepared calls (the CPU runs read its data pointer).
Tensor View(ONNXTensorElementDataType type, const void* data, std::vector<int64_t> shape) {
  Tensor t;
  t.present = true;
  t.type = type;
  t.data = data;
  t.shape = std::move(shape);
  return t;
}

// RMSNormLinear's / RMSNormSwiGLU's call: x [M, K] normalised by gamma, times ws (output widths N) into outs.
NormLinearCall NormCall(ONNXTensorElementDataType type, const Tensor& x, const Tensor& gamma, std::vector<Tensor> ws,
                        std::vector<int64_t> N, std::vector<void*> outs) {
  NormLinearCall c;
  c.type = type;
  c.M = x.shape[0];
  c.K = x.shape[1];
  c.x = x;
  c.gamma = gamma;
  c.ws = std::move(ws);
  c.N = std::move(N);
  c.outs = std::move(outs);
  return c;
}

// LinearResidual's call: y [M, N] = residual + x [M, K] @ w.
LinearResidualCall ResidualCall(ONNXTensorElementDataType type, const Tensor& x, const Tensor& w, const Tensor& residual, void* y) {
  LinearResidualCall c;
  c.type = type;
  c.M = x.shape[0];
  c.K = x.shape[1];
  c.N = residual.shape[1];
  c.x = x;
  c.w = w;
  c.residual = residual;
  c.y = y;
  return c;
}

class DecodeLayerCpu : public Kernel {
 public:
  DecodeLayerCpu(const DecodeLayerAttrs& a, size_t forced_team) : a_(a), inv_freq_(a.heads.head_dim / 2), forced_team_(forced_team) {
    RopeInvFreq(a.theta, a.heads.head_dim, inv_freq_.data());
  }
  // MEGANEURA_CPU_TEAM is read here, once per kernel: a bad value fails the session's creation.
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    DecodeLayerAttrs a;
    MN_RETURN_IF(ReadDecodeLayerAttrs(info, &a));
    size_t forced = 0;
    const char* setting = std::getenv("MEGANEURA_CPU_TEAM");
    if (!ParseTeamSetting(setting, &forced))
      return MN_INVALID("DecodeLayer: MEGANEURA_CPU_TEAM must be 'auto' or a thread count from 1 to %ld, got '%s'",
                        kMaxForcedTeam, setting);
    *out = new DecodeLayerCpu(a, forced);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor in[kDlInputs];
    for (size_t i = 0; i < kDlInputs; ++i) MN_RETURN_IF(GetInput(ctx, i, &in[i]));
    DecodeLayerProblem p;
    MN_RETURN_IF(CheckDecodeLayer(a_, in, &p));  // the CPU kernel always reads and checks the positions
    void *y = nullptr, *kc = nullptr, *vc = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[kDlX].shape, &y));
    MN_RETURN_IF(GetOutput(ctx, 1, in[kDlKCache].shape, &kc));
    MN_RETURN_IF(GetOutput(ctx, 2, in[kDlVCache].shape, &vc));
    // The five kernels' work on one team of threads (cpu_parallel.h): one wake-up of ORT's pool per layer,
    // or on this thread alone while the team's members get preempted (cpu_team_policy.h).
    const bool choose = forced_team_ == 0 && TeamSize() > 1;  // else a count is forced, or one CPU leaves no choice
    const TeamPolicies::Key key{p.type, p.B, p.S, p.R, p.D, p.H, p.KVH, p.hd, p.I, p.max_seq, a_.trans_b};
    const bool team = choose && Policies().ChooseTeam(key);
    const size_t members = forced_team_ != 0 ? forced_team_ : team ? TeamSize() : 1;
    g_calls[members > 1].fetch_add(1, std::memory_order_relaxed);
    bool stalled = false;
    OrtStatus* st = Team::Run(ctx, members, [&](const Pool& pool) { return Run(pool, p, in, y, kc, vc); }, &stalled);
    g_stalls.fetch_add(stalled, std::memory_order_relaxed);
    if (choose) Policies().Record(key, team, stalled);
    return st;
  }

 private:
  // The policies of every DecodeLayer kernel of the process, by shape (never destroyed: a session may
  // run while the process exits).
  static TeamPolicies& Policies() {
    static TeamPolicies* policies = new TeamPolicies;
    return *policies;
  }

  // Members of the team: one per CPU this process may run on (ORT's pool has at most that many threads
  // by default; an item no thread takes before the layer ends returns at once).
  static size_t TeamSize() {
    static const size_t n = [] {
#ifdef __linux__
      cpu_set_t set;
      if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<size_t>(std::max(1, CPU_COUNT(&set)));
#endif
      return static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency()));
    }();
    return n;
  }

  OrtStatus* Run(const Pool& ctx, const DecodeLayerProblem& p, const Tensor* in, void* y, void* kc, void* vc) const {
    const ONNXTensorElementDataType T = p.type;
    const int64_t qw = p.H * p.hd, kvw = p.KVH * p.hd;
    Scratch q(T, p.R * qw), k(T, p.R * kvw), v(T, p.R * kvw), att(T, p.R * qw), x1(T, p.R * p.D), h(T, p.R * p.I);
    const NormLinearAttrs norm{a_.epsilon, a_.trans_b};
    // q, k, v = RMSNormLinear(x, attn_norm; w_q, w_k, w_v)
    MN_RETURN_IF(NormLinearCpuRun(ctx, norm, false,
                                  NormCall(T, in[kDlX], in[kDlAttnNorm], {in[kDlWq], in[kDlWk], in[kDlWv]}, {qw, kvw, kvw},
                                           {q.data(), k.data(), v.data()})));
    AttnProblem ap;  // RopeCachedAttention on the rows as B sequences of S: [B, S, width] for [R, width]
    ap.B = p.B;
    ap.T = p.S;
    ap.H = p.H;
    ap.KVH = p.KVH;
    ap.hd = p.hd;
    ap.max_seq = p.max_seq;
    ap.kv_pos = p.kv_pos;
    ap.type = T;
    MN_RETURN_IF(RopeCachedAttentionCpuRun(ctx, ap, inv_freq_.data(), q.data(), k.data(), v.data(), in[kDlKCache].data,
                                           in[kDlVCache].data, att.data(), kc, vc));
    const Tensor x1_rows = View(T, x1.data(), {p.R, p.D});
    // x1 = x + a @ w_o
    MN_RETURN_IF(LinearResidualCpuRun(ctx, a_.trans_b, ResidualCall(T, View(T, att.data(), {p.R, qw}), in[kDlWo], in[kDlX], x1.data())));
    // h = silu(rmsnorm(x1) @ w_gate) * (rmsnorm(x1) @ w_up)
    MN_RETURN_IF(NormLinearCpuRun(ctx, norm, true, NormCall(T, x1_rows, in[kDlMlpNorm], {in[kDlWgate], in[kDlWup]}, {p.I, p.I}, {h.data()})));
    // y = x1 + h @ w_down
    return LinearResidualCpuRun(ctx, a_.trans_b, ResidualCall(T, View(T, h.data(), {p.R, p.I}), in[kDlWdown], x1_rows, y));
  }

  DecodeLayerAttrs a_;
  std::vector<float> inv_freq_;
  const size_t forced_team_;  // MEGANEURA_CPU_TEAM's count; 0: the policy chooses
};

}  // namespace

void AddCpuDecodeLayerOps(std::vector<OpDef*>* ops) {
  const char* ep = "CPUExecutionProvider";
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(NewDecodeLayerOpDef(ep, T, DecodeLayerCpu::Create));
  }
}

}  // namespace mn

// Diagnostics: how many CPU DecodeLayer calls ran on a team of several threads (kind 1) or on one (kind
// 0), and how many team calls waited for a preempted member (kind 2).
extern "C" __attribute__((visibility("default"))) int64_t MeganeuraDecodeLayerCpuCalls(int kind) {
  return kind == 2 ? mn::g_stalls.load() : mn::g_calls[kind != 0].load();
}

// The policy's decisions for `calls` calls where stalls[i] says whether call i would stall if it ran on
// the team: chosen[i] = 1 where call i runs on the team. Returns how many did (a test of the policy).
extern "C" __attribute__((visibility("default"))) int64_t MeganeuraTeamPolicyReplay(const uint8_t* stalls, int64_t calls,
                                                                                     uint8_t* chosen) {
  mn::TeamPolicy policy;
  int64_t on_team = 0;
  for (int64_t i = 0; i < calls; ++i) {
    const bool t = policy.ChooseTeam();
    policy.Record(t, t && stalls[i] != 0);
    chosen[i] = t;
    on_team += t;
  }
  return on_team;
}
