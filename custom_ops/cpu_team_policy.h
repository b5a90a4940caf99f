// How many threads a CPU DecodeLayer call runs its loops on (cpu_decode_layer.cc): its Team
// (cpu_parallel.h), or the leader alone. On a quiet machine the team is faster; on a busy one the OS
// preempts a member in the middle of an item it claimed, the leader waits for it (a time slice,
// milliseconds, against about a millisecond per layer) and the leader alone is faster. The policy
// times every call and runs the faster of the two, trying the other now and then, as the load changes.
// The layers of one shape share a policy (TeamPolicies): a model's 30 layers learn 30 times as fast
// as each on its own, so a probe comes about once per token and a change of load is followed within
// a token or two. Results do not depend on the choice (the team's do not depend on who runs which item).
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
  // Every kProbeEvery-th call runs the mode that is not the faster one, to see whether it became so.
  static constexpr uint32_t kProbeEvery = 32;
  // Weight of a new call's time in its mode's average: a few calls follow a change of load. A probe's
  // time weighs more: its mode's average is older (a probe per kProbeEvery calls), and two probes
  // faster than the other mode win it back; one lucky probe of the team on a busy machine does not.
  static constexpr double kWeight = 0.25, kProbeWeight = 0.5, kOutlier = 2;

  // Whether the next call runs on the team (else the leader alone).
  bool ChooseTeam() {
    if (average_[1] == 0) return true;  // each mode is timed once before comparing
    if (average_[0] == 0) return false;
    const bool team = average_[1] <= average_[0];
    if (++since_probe_ < kProbeEvery) return team;
    since_probe_ = 0;
    return !team;
  }

  // A call's wall time in seconds, on the team or not. One call counts at most kOutlier times its mode's
  // average: a member preempted once (another process woke up) does not send the layers off the team
  // for many calls; a busy machine, stalling many calls, still does.
  void Record(bool team, double seconds) {
    double& a = average_[team ? 1 : 0];
    const bool probe = a > average_[team ? 0 : 1];  // the slower mode ran: a probe
    if (a == 0) {
      a = seconds;
      return;
    }
    a += (std::min(seconds, kOutlier * a) - a) * (probe ? kProbeWeight : kWeight);
  }

 private:
  double average_[2] = {0, 0};  // seconds per call of the leader alone, of the team; 0: not timed yet
  uint32_t since_probe_ = 0;
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
  void Record(const Key& key, bool team, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    policies_[key].Record(team, seconds);
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
