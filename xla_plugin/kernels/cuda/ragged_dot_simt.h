// SIMT (FFMA) CUDA kernels of the ragged GEMMs: any dtype, shape or alignment.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_DOT_SIMT_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_DOT_SIMT_H_

#include <cuda_runtime_api.h>

#include "xla_plugin/common/ragged_problem.h"

namespace jgg::cuda {

// Non-empty problems only (the dispatcher filters); batch and group counts
// within the grid limits (kMaxGridYZ). cudaErrorInvalidConfiguration, before any launch, for
// more output tiles than a grid's x dimension holds (2^31 - 1).
cudaError_t LaunchRaggedMSimt(const RaggedMProblem& problem, const RaggedOperands& operands,
                              cudaStream_t stream);
cudaError_t LaunchRaggedKSimt(const RaggedKProblem& problem, const RaggedOperands& operands,
                              cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_DOT_SIMT_H_
