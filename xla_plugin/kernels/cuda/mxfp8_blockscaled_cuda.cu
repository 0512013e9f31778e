// Chooses the sm_100 instantiation for a block-scaled MXFP8 call from static facts and the
// device (host queries only, so the launch stays capturable).
#include "xla_plugin/kernels/cuda/mxfp8_blockscaled_cuda.h"

#ifdef JGG_WITH_SM100
#include "xla_plugin/kernels/cuda/sm100/blockscaled_gemm_sm100.h"
#endif

namespace jgg::cuda {
#ifdef JGG_WITH_SM100
namespace {

using mxfp8::BlockScaledGemm;

template <BlockScaledGemm kGemm>
cudaError_t WithResultType(const mxfp8::BlockScaledProblem& p, const mxfp8::BlockScaledOperands& o,
                           int device, int sm_count, cudaStream_t stream) {
  switch (p.out_type) {
    case ElementType::kBF16:
      return sm100::BlockScaledGrouped<kGemm, ElementType::kBF16>(p, o, device, sm_count, stream);
    case ElementType::kF32:
      return sm100::BlockScaledGrouped<kGemm, ElementType::kF32>(p, o, device, sm_count, stream);
    case ElementType::kF16:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchMxfp8BlockScaled(const mxfp8::BlockScaledProblem& p,
                                   const mxfp8::BlockScaledOperands& o, cudaStream_t stream) {
  int device = 0, major = 0, minor = 0, sm_count = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
      e != cudaSuccess)
    return e;
  if (major != 10 || minor != 0) return cudaErrorNotSupported;  // sm_100a code runs on 10.0 only
  if (cudaError_t e = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess)
    return e;
  if (p.k % 16 != 0 || p.n % 16 != 0) return cudaErrorInvalidValue;
  switch (p.gemm) {
    case BlockScaledGemm::kForward:
      return WithResultType<BlockScaledGemm::kForward>(p, o, device, sm_count, stream);
    case BlockScaledGemm::kDgrad:
      return WithResultType<BlockScaledGemm::kDgrad>(p, o, device, sm_count, stream);
    case BlockScaledGemm::kWgrad:
      return WithResultType<BlockScaledGemm::kWgrad>(p, o, device, sm_count, stream);
  }
  return cudaErrorInvalidValue;
}

#else  // nvcc without sm_100a: no instantiations to run

cudaError_t LaunchMxfp8BlockScaled(const mxfp8::BlockScaledProblem&,
                                   const mxfp8::BlockScaledOperands&, cudaStream_t) {
  return cudaErrorNotSupported;
}

#endif  // JGG_WITH_SM100
}  // namespace jgg::cuda
