// CUDA launchers for the two canonical ragged GEMMs (common/ragged_problem.h).
// Everything they need from the device (group sizes, group offset) is read by
// device code only: no host reads, no syncs, no allocations, so a launch can
// be captured in a CUDA graph and replayed with new group sizes. Batch and
// group counts up to 65535, dimensions below 2^31.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_DOT_CUDA_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_DOT_CUDA_H_

#include <cuda_runtime_api.h>

#include "xla_plugin/common/ragged_problem.h"

namespace jgg::cuda {

cudaError_t LaunchRaggedM(const RaggedMProblem& problem, const RaggedOperands& operands,
                          cudaStream_t stream);
cudaError_t LaunchRaggedK(const RaggedKProblem& problem, const RaggedOperands& operands,
                          cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_DOT_CUDA_H_
