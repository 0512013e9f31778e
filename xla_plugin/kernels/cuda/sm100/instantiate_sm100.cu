// One kernel instantiation of the Blackwell MXFP8 path, chosen by -D flags: xla_plugin/BUILD
// compiles this file once per variant, so they compile in parallel and cache separately.
//   JGG_SM100_GEMM   BlockScaledGemm enumerator (kForward, kDgrad, kWgrad)
//   JGG_SM100_OUT    ElementType enumerator of the result (kBF16, kF32)
#include "xla_plugin/kernels/cuda/sm100/blockscaled_gemm_sm100.cuh"

namespace jgg::cuda::sm100 {

template cudaError_t BlockScaledGrouped<mxfp8::BlockScaledGemm::JGG_SM100_GEMM,
                                        ElementType::JGG_SM100_OUT>(
    const mxfp8::BlockScaledProblem&, const mxfp8::BlockScaledOperands&, int, int, cudaStream_t);

}  // namespace jgg::cuda::sm100
