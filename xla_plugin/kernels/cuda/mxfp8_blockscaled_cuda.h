// Launch of the block-scaled MXFP8 grouped GEMM (common/mxfp8_blockscaled_problem.h).
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_BLOCKSCALED_CUDA_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_BLOCKSCALED_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "xla_plugin/common/mxfp8_blockscaled_problem.h"

namespace jgg::cuda {

// On compute capability 10.x: the CUTLASS sm_100 kernels (sm100/blockscaled_gemm_sm100.h).
// cudaErrorNotSupported on other GPUs; cudaErrorInvalidValue for dims that are not multiples
// of 16 (TMA's 16-byte rows) or an unsupported result type; cudaErrorInvalidConfiguration for
// extents of 2^31 or more, or a wgrad of more than 65535 groups (blockscaled_misfit in
// mxfp8_gemm.py turns those away first).
cudaError_t LaunchMxfp8BlockScaled(const mxfp8::BlockScaledProblem& p,
                                   const mxfp8::BlockScaledOperands& o, cudaStream_t stream);

// Host check of the scale layout contract: how many elements (i, kk) of a [rows, depth]
// operand (depth contracted) CUTLASS's sm_100 scale layout places at a byte other than our
// swizzled index (mxfp8_layout.h's SwizzledIndex of (i, kk / 32)), plus one if its extent is
// not the group's GroupScaleBytes. 0 is the contract; -1 in a build without the sm_100 kernels.
int64_t BlockScaledScaleLayoutMismatches(int64_t rows, int64_t depth);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_BLOCKSCALED_CUDA_H_
