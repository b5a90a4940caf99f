// Where a CPU kernel's parallel loops run (cpu_parallel.h's ParallelFor): ORT's intra-op pool of the
// kernel's context, or the Team of a DecodeLayer call whose threads are already running. The *CpuRun
// functions that DecodeLayer's CPU kernel chains take a Pool; a kernel context converts to one.
#pragma once

#include <onnxruntime_c_api.h>

namespace mn {

class Team;

struct Pool {
  Pool(OrtKernelContext* c) : ctx(c) {}  // implicit: an op's own kernel passes its context
  Pool(OrtKernelContext* c, Team* t) : ctx(c), team(t) {}
  OrtKernelContext* ctx;
  Team* team = nullptr;
};

}  // namespace mn
