// Host dispatch shared by the two ragged-M MXFP8 kernels (mma and wgmma): the call's
// orientation, element formats and result type become template arguments of
// Kernel::Launch<kTransposed, kLhs, kRhs, O>(problem, operands, stream).
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_DISPATCH_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_DISPATCH_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "xla_plugin/common/mxfp8_gemm_problem.h"

namespace jgg::cuda::mxfp8_ragged_m {

template <typename Kernel, bool kTransposed, mxfp8::Fp8Format kLhs, mxfp8::Fp8Format kRhs>
cudaError_t DispatchResult(const mxfp8::RaggedMProblem& p, const mxfp8::RaggedMOperands& o,
                           cudaStream_t stream) {
  switch (p.out_type) {
    case ElementType::kF32: return Kernel::template Launch<kTransposed, kLhs, kRhs, float>(p, o, stream);
    case ElementType::kBF16:
      return Kernel::template Launch<kTransposed, kLhs, kRhs, __nv_bfloat16>(p, o, stream);
    case ElementType::kF16: return Kernel::template Launch<kTransposed, kLhs, kRhs, __half>(p, o, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename Kernel, bool kTransposed, mxfp8::Fp8Format kLhs>
cudaError_t DispatchRhs(const mxfp8::RaggedMProblem& p, const mxfp8::RaggedMOperands& o,
                        cudaStream_t stream) {
  return p.rhs_format == mxfp8::Fp8Format::kE4M3
             ? DispatchResult<Kernel, kTransposed, kLhs, mxfp8::Fp8Format::kE4M3>(p, o, stream)
             : DispatchResult<Kernel, kTransposed, kLhs, mxfp8::Fp8Format::kE5M2>(p, o, stream);
}

template <typename Kernel, bool kTransposed>
cudaError_t DispatchLhs(const mxfp8::RaggedMProblem& p, const mxfp8::RaggedMOperands& o,
                        cudaStream_t stream) {
  return p.lhs_format == mxfp8::Fp8Format::kE4M3
             ? DispatchRhs<Kernel, kTransposed, mxfp8::Fp8Format::kE4M3>(p, o, stream)
             : DispatchRhs<Kernel, kTransposed, mxfp8::Fp8Format::kE5M2>(p, o, stream);
}

template <typename Kernel>
cudaError_t Dispatch(const mxfp8::RaggedMProblem& p, const mxfp8::RaggedMOperands& o,
                     cudaStream_t stream) {
  return p.rhs_transposed ? DispatchLhs<Kernel, true>(p, o, stream)
                          : DispatchLhs<Kernel, false>(p, o, stream);
}

}  // namespace jgg::cuda::mxfp8_ragged_m

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_DISPATCH_CUH_
