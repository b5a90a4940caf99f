// How many threads a CPU DecodeLayer call runs its loops on (cpu_decode_layer.cc): its Team
// (cpu_parallel.h), or the leader alone. On a quiet machine the team is faster; on a busy one the OS
// preempts a member, holding an item it claimed or between rounds (ORT's loop waits for it at the
// layer's end), and the leader waits for it to run again (a time slice, milliseconds, against
// about a millisecond per layer): the team then loses to one thread. The policy
// watches for those waits (Team::Run's `stalled`) rather than for slow calls: a preempted leader slows
// a call on one thread as much as on the team, and call times on a busy machine are too scattered to
// compare in a few calls. A stall costs a few milliseconds, a call alone ~0.3 ms more than on the team
// (SmolLM2-135M's layer on a 2-core VM): on a quiet machine about one team call in 200 stalls and the
// team wins, under one other busy thread about one in 7 did and one thread won by a quarter (measured
// when the team's waits still spun; they sleep now, see cpu_parallel.h). When
// the share of stalled team calls (an average over about kWindow calls) passes kMaxStallShare, the
// leader runs alone for a stretch of calls, which doubles each time the team is left again within
// kCalm team calls, up to kMaxAlone calls: short, as the load may have gone when it ends. The layers
// of one shape share a policy (TeamPolicies): a model's 30 layers make kMinAlone calls about a token.
// Results do not depend on the choice (the team's do not depend on who runs which item).
// No ORT here: the policy's decisions are replayed by a test through MeganeuraTeamPolicyReplay.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace mn {

// The decision and its bookkeeping, for the calls of one shape.
class TeamPolicy {
 public:
  static constexpr uint32_t kWindow = 32, kMinAlone = 32, kMaxAlone = 256, kCalm = 256;
  static constexpr double kMaxStallShare = 0.08;

  // Whether the next call runs on the team (else the leader alone).
  bool ChooseTeam() {
    if (alone_left_ == 0) return true;
    --alone_left_;
    return false;
  }

  // What a call on the team (team) found: whether the leader waited for a preempted member (stalled).
  void Record(bool team, bool stalled) {
    if (!team) return;
    if (++calm_ >= kCalm) stretch_ = kMinAlone;
    stall_share_ += ((stalled ? 1.0 : 0.0) - stall_share_) / kWindow;
    if (stall_share_ <= kMaxStallShare) return;
    alone_left_ = stretch_;
    stretch_ = std::min(2 * stretch_, kMaxAlone);
    stall_share_ = 0;  // the stalls before the stretch say little about the load after it
    calm_ = 0;
  }

 private:
  uint32_t alone_left_ = 0;       // calls still to run alone
  uint32_t stretch_ = kMinAlone;  // calls alone when the team is left next
  uint32_t calm_ = 0;             // team calls since it was last left
  double stall_share_ = 0;        // of the recent team calls, the share that stalled
};

// The policies of the DecodeLayer kernels of a process, one per shape (a key of the call's sizes), each
// shared by the calls of that shape, which ORT may run from several threads at once.
class TeamPolicies {
 public:
  using Key = std::array<int64_t, 11>;
  bool ChooseTeam(const Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return policies_[key].ChooseTeam();
  }
  void Record(const Key& key, bool team, bool stalled) {
    std::lock_guard<std::mutex> lock(mu_);
    policies_[key].Record(team, stalled);
  }

 private:
  std::mutex mu_;
  std::map<Key, TeamPolicy> policies_;  // a few shapes per process: prefill and decode, a model or two
};

// MEGANEURA_CPU_TEAM: "auto" (or unset/empty): the policy; a count n in [1, kMaxForcedTeam]: always a
// team of n (1: the leader alone). Returns false on any other value.
constexpr long kMaxForcedTeam = 1024;
inline bool ParseTeamSetting(const char* value, size_t* forced) {
  *forced = 0;
  if (value == nullptr || *value == '\0' || std::string(value) == "auto") return true;
  if (*value < '0' || *value > '9') return false;  // strtol would accept a sign or spaces
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  if (errno != 0 || *end != '\0' || n < 1 || n > kMaxForcedTeam) return false;
  *forced = static_cast<size_t>(n);
  return true;
}

}  // namespace mn
