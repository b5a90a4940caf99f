// Host read bandwidth with N threads: the roofline of a CPU decode step (README, the SmolLM2-135M CPU
// row). Each thread sums its share of one buffer with AVX2 loads (4 independent accumulators); the
// best and mean of REPS passes are printed. Build and run (MB, threads, passes):
//   gcc -O2 -mavx2 -o read_bandwidth benchmarks/read_bandwidth.c -lpthread
//   ./read_bandwidth 1024 1 10 && ./read_bandwidth 1024 2 10
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
  const float* p;
  size_t n;
  float sum;
} Share;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void* sum_share(void* arg) {
  Share* s = arg;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= s->n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(s->p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(s->p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(s->p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(s->p + i + 24));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  s->sum = t[0] + t[7];  // keeps the loads alive
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MB THREADS PASSES\n", argv[0]);
    return 2;
  }
  const size_t bytes = (size_t)atol(argv[1]) << 20;
  const int threads = atoi(argv[2]), passes = atoi(argv[3]);
  if (bytes == 0 || threads < 1 || threads > 64 || passes < 1) {
    fprintf(stderr, "MB and PASSES must be positive, THREADS in [1, 64]\n");
    return 2;
  }
  float* p = aligned_alloc(64, bytes);
  if (p == NULL) return 1;
  const size_t n = bytes / sizeof(float), share = n / threads / 32 * 32;
  for (size_t i = 0; i < n; ++i) p[i] = (float)(i & 7);
  double best = 1e30, total = 0;
  for (int r = 0; r < passes; ++r) {
    pthread_t tid[64];
    Share s[64];
    const double t0 = now();
    for (int i = 0; i < threads; ++i) {
      s[i].p = p + share * i;
      s[i].n = share;
      pthread_create(&tid[i], NULL, sum_share, &s[i]);
    }
    for (int i = 0; i < threads; ++i) pthread_join(tid[i], NULL);
    const double dt = now() - t0;
    best = dt < best ? dt : best;
    total += dt;
  }
  const double read = (double)share * threads * sizeof(float);
  printf("%zu MB, %d thread(s): best %.2f GB/s, mean %.2f GB/s\n", bytes >> 20, threads, read / best / 1e9, read * passes / total / 1e9);
  free(p);
  return 0;
}
