// CUDA launchers of the grouped MXFP8 quantize and dequantize (common/mxfp8_problem.h). One
// kernel launch each (after a memset of the job counter where the kernel takes jobs from one),
// on the caller's stream: group boundaries and scale offsets are prefix
// sums every CTA computes from the device group sizes, so there is no host read, no sync, no
// allocation and no workspace: capturable in a CUDA graph, replayable with new group sizes.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_CUDA_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_CUDA_H_

#include <cuda_runtime_api.h>

#include "xla_plugin/common/mxfp8_problem.h"

namespace jgg::cuda {

cudaError_t LaunchMxfp8Quantize(const mxfp8::QuantizeProblem& problem,
                                const mxfp8::QuantizeOperands& operands, cudaStream_t stream);
cudaError_t LaunchMxfp8Dequantize(const mxfp8::DequantizeProblem& problem,
                                  const mxfp8::DequantizeOperands& operands, cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_CUDA_H_
