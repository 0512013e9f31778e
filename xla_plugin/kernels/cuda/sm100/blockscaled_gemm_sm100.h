// The Blackwell path of the MXFP8 grouped GEMMs: CUTLASS's sm_100 block-scaled ptr-array
// grouped GEMM (tcgen05 MMA on fp8 codes with E8M0 scales read in place, swizzled), one
// kernel instantiation per (GEMM, result type) in its own .cu (instantiate_sm100.cu).
//
// Built for sm_100a; never run here (no Blackwell GPU was available): see docs/ARCHITECTURE.md.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM100_BLOCKSCALED_GEMM_SM100_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM100_BLOCKSCALED_GEMM_SM100_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "xla_plugin/common/mxfp8_blockscaled_problem.h"

namespace jgg::cuda::sm100 {

// Runs `p` on `stream` of `device` (sm_count SMs): one preparation launch (schedule, zero
// fills, CUTLASS's per-group arguments from the device group sizes), then the grouped GEMM.
// No host read, no sync, no allocation. cudaErrorNotSupported when CUTLASS rejects the call.
template <mxfp8::BlockScaledGemm kGemm, ElementType kOut>
cudaError_t BlockScaledGrouped(const mxfp8::BlockScaledProblem& p,
                               const mxfp8::BlockScaledOperands& o, int device, int sm_count,
                               cudaStream_t stream);

}  // namespace jgg::cuda::sm100

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM100_BLOCKSCALED_GEMM_SM100_H_
