// The fused MXFP8 grouped GEMM (ragged M) for groups of tens of rows: each fp8 tile is
// dequantized on load into bf16 in shared memory and multiplied by Hopper's wgmma, so a group's
// weights are read from HBM once per 64 of its rows (the mma kernel of mxfp8_ragged_m_cuda.cu
// reads and converts them once per 8). Same problem and results as that kernel
// (common/mxfp8_gemm_problem.h); LaunchMxfp8RaggedM picks between them.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_WGMMA_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_WGMMA_H_

#include <cuda_runtime_api.h>

#include "xla_plugin/common/mxfp8_gemm_problem.h"

namespace jgg::cuda {

// Whether the wgmma kernel takes this call on a GPU of compute capability major `major`:
// Hopper (sm_90a code), K a multiple of 32 and N of 16 (whole MX blocks and 16-byte weight
// chunks), operands and scales 16-byte aligned, scale rows padded to whole scale words, and K
// and a group's K x N small enough for the kernel's 32-bit copy offsets.
bool Mxfp8RaggedMWgmmaFits(const mxfp8::RaggedMProblem& problem,
                           const mxfp8::RaggedMOperands& operands, int major);

cudaError_t LaunchMxfp8RaggedMWgmma(const mxfp8::RaggedMProblem& problem,
                                    const mxfp8::RaggedMOperands& operands, cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_WGMMA_H_
