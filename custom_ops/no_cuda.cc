// The CPU-only library registers no CUDA kernels.
#include "op_common.h"
namespace mn {
void AddCudaOps(std::vector<OpDef*>*) {}
}  // namespace mn
