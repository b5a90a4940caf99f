// Work splitting for the CPU kernels (cpu_kernels.cc, cpu_fused.cc, ...): ORT's intra-op thread pool, or a DecodeLayer's Team.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpu_pool.h"
#include "op_common.h"

namespace mn {

// Sleeps while *word == expected (a spurious or early return is fine: callers re-check); wakes them.
// Elsewhere than Linux: a yield, and waking is a no-op.
inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
#ifdef __linux__
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
#else
  (void)word, (void)expected;
  std::this_thread::yield();
#endif
}
inline void FutexWakeAll(std::atomic<uint32_t>* word) {
#ifdef __linux__
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1 << 30, nullptr, nullptr, 0);
#else
  (void)word;
#endif
}

// Runs f(i) for i in [0, total) on ORT's intra-op pool.
template <class F>
OrtStatus* ParallelFor(OrtKernelContext* ctx, size_t total, F&& f) {
  if (total == 0) return nullptr;
  if (total == 1) {
    f(size_t{0});
    return nullptr;
  }
  using Fn = typename std::remove_reference<F>::type;
  auto tramp = [](void* p, size_t i) { (*static_cast<Fn*>(p))(i); };
  return g_api->KernelContext_ParallelFor(ctx, tramp, total, 0, &f);
}

// A DecodeLayer call's threads, held for the whole call (one ORT parallel loop per layer instead of one
// per product: without spinning ORT's pool threads sleep between loops, and waking one costs tens of
// microseconds on a VM, against a few hundred microseconds of work per product). The first loop item to
// start leads: it runs the layer's code, whose For calls hand their items to the members that serve
// (spinning, then sleeping until a round or the end is published) until it ends. Items are claimed from
// one counter, so a member that never arrives (a busy machine) leaves its share to the others and
// nobody waits for it; the leader waits only for items already claimed, and tells the caller when a
// wait was long (a member preempted holding an item: cpu_team_policy.h). Waits spin for about kSpins
// pauses, then sleep on a futex: on a busy machine a spinning member or leader burnt its share of a CPU
// that another thread (the preempted member, or the other work) could have run on. The results do not
// depend on who runs which item.
class Team {
 public:
  // The leader waited this long for an item claimed by a member: the member was preempted (an item
  // takes tens of microseconds; the OS preempts for a time slice, milliseconds).
  static constexpr double kStallSeconds = 500e-6;

  // Runs lead(Pool) on one thread of a loop of `members` items on ORT's pool; returns its status.
  // *stalled (if given): whether the leader waited kStallSeconds or more for a member's item.
  template <class Lead>
  static OrtStatus* Run(OrtKernelContext* ctx, size_t members, Lead&& lead, bool* stalled = nullptr) {
    Team team;
    OrtStatus* status = nullptr;
    std::chrono::steady_clock::time_point ended;
    OrtStatus* st = ParallelFor(ctx, std::max<size_t>(1, members), [&](size_t) {
      if (team.led_.exchange(true, std::memory_order_acq_rel)) return team.Serve();
      status = lead(Pool(ctx, &team));
      team.ended_.store(true, std::memory_order_seq_cst);
      team.Publish();  // sleeping members wake, see the end and return
      ended = std::chrono::steady_clock::now();
    });
    // ORT's loop returns when every item that started has returned: a member preempted anywhere (between
    // rounds, too) holds the layer until it runs again and sees the end.
    if (stalled != nullptr) *stalled = st == nullptr && (team.stalled_ || Seconds(ended) >= kStallSeconds);
    if (st != nullptr && status != nullptr) g_api->ReleaseStatus(status);
    return st != nullptr ? st : status;
  }

  // f(i) for i in [0, n) on the team (the leader's calls only), in rounds of at most kMaxItems.
  template <class F>
  void For(size_t n, F&& f) {
    for (size_t first = 0; first < n; first += kMaxItems) {
      const size_t count = std::min(kMaxItems, n - first);
      auto call = [&f, first](size_t i) { f(first + i); };
      if (count == 1) {
        call(0);
        continue;
      }
      fn_ = [](void* p, size_t i) { (*static_cast<decltype(call)*>(p))(i); };
      arg_ = &call;
      done_.store(0, std::memory_order_relaxed);
      generation_ = (generation_ + 1) & kGenerationMask;
      ticket_.store(generation_ << 40 | static_cast<uint64_t>(count) << 20, std::memory_order_release);
      Publish();
      while (Claim()) {
      }
      if (done_.load(std::memory_order_acquire) < count) WaitFor(count);
    }
  }

 private:
  static constexpr size_t kMaxItems = (1u << 20) - 1;
  static constexpr uint64_t kGenerationMask = (uint64_t{1} << 24) - 1;
  static constexpr unsigned kSpins = 4096;  // ~0.1 ms of pauses: a round's items take tens of microseconds

  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  // A round (or the end) was published: wakes the members that sleep for one.
  void Publish() {
    round_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&round_);
  }

  // Whether the published round has an item left to claim.
  bool HasWork() const {
    const uint64_t t = ticket_.load(std::memory_order_acquire);
    return (t & kMaxItems) < ((t >> 20) & kMaxItems);
  }

  // Claims and runs one item of the published round; false when it has none left. The ticket packs
  // (generation, count, next index): a member that read an earlier round's ticket cannot claim from a
  // later one, and fn_/arg_ stay the round's until its claimed items are done.
  bool Claim() {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
      const size_t count = (t >> 20) & kMaxItems, i = t & kMaxItems;
      if (i >= count) return false;
      if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        fn_(arg_, i);
        done_.fetch_add(1, std::memory_order_seq_cst);
        if (leader_sleeps_.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&done_);
        return true;
      }
    }
  }

  // Waits until the round's `count` items are done, noting a stall (kStallSeconds).
  void WaitFor(size_t count) {
    const auto start = std::chrono::steady_clock::now();
    for (unsigned spins = 0; done_.load(std::memory_order_acquire) < count; ++spins) {
      if (spins < kSpins) {
        Pause();
        continue;
      }
      leader_sleeps_.store(1, std::memory_order_seq_cst);  // then a member that finishes an item wakes it
      const uint32_t done = done_.load(std::memory_order_seq_cst);
      if (done < count) FutexWait(&done_, done);
      leader_sleeps_.store(0, std::memory_order_relaxed);
    }
    if (Seconds(start) >= kStallSeconds) stalled_ = true;
  }

  static double Seconds(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  }

  void Serve() {
    for (unsigned spins = 0; !ended_.load(std::memory_order_acquire);) {
      if (Claim()) {
        spins = 0;
      } else if (spins < kSpins) {
        Pause();
        ++spins;
      } else {  // sleep until the leader publishes (the round counter read before the last look for work)
        const uint32_t round = round_.load(std::memory_order_seq_cst);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (!ended_.load(std::memory_order_seq_cst) && !HasWork()) FutexWait(&round_, round);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        spins = 0;
      }
    }
  }

  std::atomic<bool> led_{false}, ended_{false};
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint32_t> done_{0}, round_{0}, sleepers_{0}, leader_sleeps_{0};  // futex words and their waiters
  uint64_t generation_ = 0;
  bool stalled_ = false;  // the leader's only
  void (*fn_)(void*, size_t) = nullptr;
  void* arg_ = nullptr;
};

// Runs f(i) for i in [0, total) where `pool` says: ORT's pool, or its team.
template <class F>
OrtStatus* ParallelFor(const Pool& pool, size_t total, F&& f) {
  if (pool.team == nullptr) return ParallelFor(pool.ctx, total, std::forward<F>(f));
  pool.team->For(total, f);
  return nullptr;
}

// Splits n items into at most `max_chunks` chunks of at least `min_chunk`.
struct Chunks {
  int64_t n, size, count;
  Chunks(int64_t n_, int64_t min_chunk, int64_t max_chunks) : n(n_) {
    count = std::max<int64_t>(1, std::min<int64_t>(max_chunks, n / std::max<int64_t>(1, min_chunk)));
    size = (n + count - 1) / std::max<int64_t>(1, count);
    count = size ? (n + size - 1) / size : 0;
  }
  int64_t begin(int64_t c) const { return c * size; }
  int64_t end(int64_t c) const { return std::min(n, (c + 1) * size); }
};

// An in-place cache op (CacheWrite, RopeCacheWrite) whose output ORT did not alias to its cache
// input: copies the whole cache (`bytes` bytes) into the output first, on the pool, and counts the
// copy (the tests check that a decode loop makes none).
inline OrtStatus* CopyCache(const Pool& ctx, void* out, const void* cache, int64_t bytes) {
  CountCacheCopy();
  char* dst = static_cast<char*>(out);
  const char* src = static_cast<const char*>(cache);
  Chunks ch(bytes, 1 << 18, 64);
  return ParallelFor(ctx, ch.count, [&](size_t c) { std::memcpy(dst + ch.begin(c), src + ch.begin(c), ch.end(c) - ch.begin(c)); });
}

}  // namespace mn
