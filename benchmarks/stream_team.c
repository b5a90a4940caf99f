// What a second thread adds to a memory-bound stream shaped like a CPU decode step (README, the
// SmolLM2-135M CPU row): a buffer read in "layers" of 14 MB (a layer's float32 weights), each split into
// 64 KB chunks claimed from a counter, as the CPU DecodeLayer's team claims its items. Four ways, each
// timed over PASSES passes of the whole buffer, interleaved over ROUNDS rounds:
//   alone  - the leader reads every chunk;
//   team   - the leader and one helper thread claim chunks; at a layer's end the leader waits for the
//            helper's claimed chunks (spinning 0.1 ms, then yielding), as the team waits for its items
//            (the helper spins 0.1 ms for the next layer, then naps 50 us at a time);
//   steal  - the same, but after 50 us the leader reads a chunk the helper still holds itself (the bound
//            for a team whose leader never waits for a preempted member);
//   steal_join - steal, then at the layer's end the leader waits until the helper is out of its chunk
//            (as ORT's parallel loop joins its items when a kernel returns: what a team made of ORT's
//            pool threads must pay even if it steals).
// Run it on a quiet machine and beside busy loops to see what the second thread buys under load:
//   gcc -O2 -mavx2 -o stream_team benchmarks/stream_team.c -lpthread
//   ./stream_team 1024 8 3
//   (timeout 300 sh -c 'while :; do :; done' &); ./stream_team 1024 8 3
// Prints one JSON line per way and round: GB/s (best and mean of the passes), chunks stolen, and the
// leader's waits over 0.5 ms.
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { kAlone, kTeam, kSteal, kStealJoin };
static const char* kWayNames[] = {"alone", "team", "steal", "steal_join"};
#define CHUNK ((size_t)(64 << 10) / sizeof(float))
#define LAYER ((size_t)(14 << 20) / sizeof(float))
#define MAX_CHUNKS (LAYER / CHUNK + 1)

static float* g_buf;
static volatile float g_sink;
// The published layer: [g_first, g_end) of g_buf, its chunks' claim counter and states.
static _Atomic long g_generation;
// Claims: generation << 32 | next chunk. A claim carries the generation of its layer; past a layer's end
// the index is pushed past any chunk count, so late claims fail.
static _Atomic long g_ticket;
#define CLOSED (1L << 30)
static _Atomic int g_stop, g_inside;  // g_inside: the helper is reading a chunk
static _Atomic long g_state[MAX_CHUNKS];  // the generation of the layer whose chunk c was read last
static size_t g_first, g_end;
static long g_chunks;

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// Sums [a, b) with AVX2 loads (four independent accumulators): a memory-bound read.
static float SumRange(size_t a, size_t b) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = a; i + 32 <= b; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(g_buf + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(g_buf + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(g_buf + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(g_buf + i + 24));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return t[0] + t[7];
}

static float ReadChunk(long c) {
  const size_t a = g_first + (size_t)c * CHUNK, b = a + CHUNK < g_end ? a + CHUNK : g_end;
  return SumRange(a, b);
}

// The helper: claims chunks of each published layer until the counter runs out.
static void* Helper(void* unused) {
  (void)unused;
  long seen = 0;
  float s = 0;
  double idle_since = Now();
  while (!atomic_load(&g_stop)) {
    const long gen = atomic_load(&g_generation);
    if (gen == seen) {  // spin ~0.1 ms, then sleep in 50 us naps (the alone way leaves the CPU to others)
      if (Now() - idle_since < 100e-6) {
        _mm_pause();
      } else {
        const struct timespec nap = {0, 50000};
        nanosleep(&nap, NULL);
      }
      continue;
    }
    for (;;) {
      atomic_store(&g_inside, 1);  // before the claim: the leader's join cannot miss a chunk claimed late
      const long t = atomic_fetch_add(&g_ticket, 1);
      if ((t & 0xffffffffL) >= g_chunks) break;
      s += ReadChunk(t & 0xffffffffL);
      atomic_store(&g_state[t & 0xffffffffL], t >> 32);
    }
    atomic_store(&g_inside, 0);
    seen = gen;
    idle_since = Now();
  }
  g_sink = s;
  return NULL;
}

// One layer on the leader (and the helper): the chunks it claims, then the helper's (waited for or stolen).
static float LeadLayer(int way, long* stolen, long* waits) {
  const long gen = atomic_load(&g_generation);
  float s = 0;
  for (long t; ((t = atomic_fetch_add(&g_ticket, 1)) & 0xffffffffL) < g_chunks;) {
    s += ReadChunk(t & 0xffffffffL);
    atomic_store(&g_state[t & 0xffffffffL], gen);
  }
  for (long c = 0; c < g_chunks; ++c) {
    const double t0 = Now();
    while (atomic_load(&g_state[c]) != gen) {
      const double waited = Now() - t0;
      if (way >= kSteal && waited > 50e-6) {
        s += ReadChunk(c);
        ++*stolen;
        break;
      }
      if (waited > 100e-6) sched_yield();
      else _mm_pause();
    }
    if (Now() - t0 > 500e-6) ++*waits;
  }
  atomic_store(&g_ticket, gen << 32 | CLOSED);  // the helper's late claims find nothing
  if (way == kStealJoin) {
    const double t0 = Now();
    while (atomic_load(&g_inside)) {
      if (Now() - t0 > 100e-6) sched_yield();
      else _mm_pause();
    }
    if (Now() - t0 > 500e-6) ++*waits;
  }
  return s;
}

// One pass over n floats: seconds.
static double Pass(int way, size_t n, long* stolen, long* waits) {
  const double t0 = Now();
  float s = 0;
  for (size_t a = 0; a < n; a += LAYER) {
    const size_t b = a + LAYER < n ? a + LAYER : n;
    if (way == kAlone) {
      s += SumRange(a, b);
      continue;
    }
    g_first = a;
    g_end = b;
    g_chunks = (long)((b - a + CHUNK - 1) / CHUNK);
    const long gen = atomic_fetch_add(&g_generation, 1) + 1;
    atomic_store(&g_ticket, gen << 32);  // publishes the layer (its bounds written before)
    s += LeadLayer(way, stolen, waits);
  }
  g_sink = s;
  return Now() - t0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MB PASSES ROUNDS\n", argv[0]);
    return 2;
  }
  const size_t bytes = (size_t)atol(argv[1]) << 20;
  const int passes = atoi(argv[2]), rounds = atoi(argv[3]);
  if (bytes < (size_t)(14 << 20) || passes < 1 || rounds < 1) {
    fprintf(stderr, "MB must be at least 14, PASSES and ROUNDS positive\n");
    return 2;
  }
  const size_t n = bytes / sizeof(float) / 32 * 32;
  g_buf = aligned_alloc(64, n * sizeof(float));
  if (g_buf == NULL) return 1;
  for (size_t i = 0; i < n; ++i) g_buf[i] = (float)(i & 7) * 1e-3f;
  pthread_t helper;
  if (pthread_create(&helper, NULL, Helper, NULL) != 0) return 1;
  for (int r = 0; r < rounds; ++r)
    for (int way = kAlone; way <= kStealJoin; ++way) {
      double best = 1e30, total = 0;
      long stolen = 0, waits = 0;
      for (int p = 0; p < passes; ++p) {
        const double dt = Pass(way, n, &stolen, &waits);
        best = dt < best ? dt : best;
        total += dt;
      }
      printf("{\"way\": \"%s\", \"round\": %d, \"mb\": %zu, \"passes\": %d, \"best_gb_s\": %.2f, \"mean_gb_s\": %.2f, "
             "\"chunks_stolen\": %ld, \"waits_over_0.5ms\": %ld}\n",
             kWayNames[way], r, bytes >> 20, passes, n * sizeof(float) / best / 1e9, n * sizeof(float) / (total / passes) / 1e9,
             stolen, waits);
      fflush(stdout);
    }
  atomic_store(&g_stop, 1);
  pthread_join(helper, NULL);
  free(g_buf);
  return 0;
}
