// Chooses the sm_100 instantiation for a block-scaled MXFP8 call from static facts and the
// device (host queries only, so the launch stays capturable).
#include "xla_plugin/kernels/cuda/mxfp8_blockscaled_cuda.h"

#ifdef JGG_WITH_SM100
#include "xla_plugin/kernels/cuda/device_info.h"
#include "xla_plugin/kernels/cuda/launch_limits.h"
#include "xla_plugin/kernels/cuda/sm100/blockscaled_gemm_sm100.h"
#endif

namespace jgg::cuda {
#ifdef JGG_WITH_SM100
namespace {

using mxfp8::BlockScaledGemm;

template <BlockScaledGemm kGemm>
cudaError_t WithResultType(const mxfp8::BlockScaledProblem& p, const mxfp8::BlockScaledOperands& o,
                           const DeviceInfo& info, cudaStream_t stream) {
  const int device = info.device, sms = info.sm_count;
  switch (p.out_type) {
    case ElementType::kBF16:
      return sm100::BlockScaledGrouped<kGemm, ElementType::kBF16>(p, o, device, sms, stream);
    case ElementType::kF32:
      return sm100::BlockScaledGrouped<kGemm, ElementType::kF32>(p, o, device, sms, stream);
    case ElementType::kF16:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchMxfp8BlockScaled(const mxfp8::BlockScaledProblem& p,
                                   const mxfp8::BlockScaledOperands& o, cudaStream_t stream) {
  DeviceInfo info;
  if (cudaError_t e = QueryDevice(&info); e != cudaSuccess) return e;
  if (info.major != 10 || info.minor != 0) return cudaErrorNotSupported;  // sm_100a: 10.0 only
  if (p.k % 16 != 0 || p.n % 16 != 0) return cudaErrorInvalidValue;
  // CUTLASS's problem shapes are int (every group's extents are at most these), and the
  // wgrad's zeroing launch has a grid row per group.
  if (p.rows > kMaxInt32 || p.k > kMaxInt32 || p.n > kMaxInt32 ||
      (p.gemm == BlockScaledGemm::kWgrad && p.num_groups > kMaxGridYZ))
    return cudaErrorInvalidConfiguration;
  switch (p.gemm) {
    case BlockScaledGemm::kForward:
      return WithResultType<BlockScaledGemm::kForward>(p, o, info, stream);
    case BlockScaledGemm::kDgrad:
      return WithResultType<BlockScaledGemm::kDgrad>(p, o, info, stream);
    case BlockScaledGemm::kWgrad:
      return WithResultType<BlockScaledGemm::kWgrad>(p, o, info, stream);
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
