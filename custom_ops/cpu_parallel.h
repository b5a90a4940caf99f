// Work splitting for the CPU kernels (cpu_kernels.cc, cpu_fused.cc): ORT's intra-op thread pool.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "op_common.h"

namespace mn {

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
inline OrtStatus* CopyCache(OrtKernelContext* ctx, void* out, const void* cache, int64_t bytes) {
  CountCacheCopy();
  char* dst = static_cast<char*>(out);
  const char* src = static_cast<const char*>(cache);
  Chunks ch(bytes, 1 << 18, 64);
  return ParallelFor(ctx, ch.count, [&](size_t c) { std::memcpy(dst + ch.begin(c), src + ch.begin(c), ch.end(c) - ch.begin(c)); });
}

}  // namespace mn
