// The Hopper tensor-core path of the ragged GEMMs (CUTLASS SM90 grouped GEMM).
// Each entry point is one kernel instantiation in its own .cu file.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/common/ragged_problem.h"

namespace jgg::cuda::sm90 {

// One GEMM of a grouped launch, as the setup kernel computes it on the device.
struct ProblemDescription {
  int m, n, k;
  const void* a;
  const void* b;
  void* d;
};

// Where a grouped launch runs and the scratch it may use.
struct GroupedLaunch {
  int device;
  int sm_count;
  char* problem_arguments;  // workspace region for per-problem arguments
  void* cutlass_workspace;  // workspace region for CUTLASS (kCutlassWorkspaceBytes)
  cudaStream_t stream;
};

// Entry points; the schedule must already be in operands.workspace. They
// return cudaErrorNotSupported when CUTLASS rejects the problem.
cudaError_t RaggedMBf16(const RaggedMProblem& p, const RaggedOperands& o, const GroupedLaunch& l);
cudaError_t RaggedMBf16RhsTransposed(const RaggedMProblem& p, const RaggedOperands& o,
                                     const GroupedLaunch& l);
cudaError_t RaggedKBf16(const RaggedKProblem& p, const RaggedOperands& o, const GroupedLaunch& l);

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_H_
