// One kernel instantiation of the Hopper path, chosen by -D flags: xla_plugin/BUILD compiles
// this file once per variant, so the instantiations compile in parallel (~1 min and 3.4 GB
// of nvcc each) and cache separately.
//   JGG_SM90_RAGGED_K                  1: RaggedK<IN, OUT>; else RaggedM<IN, OUT, TILE, RHS_T>
//   JGG_SM90_IN, JGG_SM90_OUT          ElementType enumerators (kBF16, kF16, kF32)
//   JGG_SM90_TILE                      Tile enumerator (grouped_gemm_sm90.h)
//   JGG_SM90_RHS_TRANSPOSED            true / false
#include "xla_plugin/kernels/cuda/sm90/ragged_problems_sm90.cuh"

namespace jgg::cuda::sm90 {

#if JGG_SM90_RAGGED_K
template cudaError_t RaggedK<ElementType::JGG_SM90_IN, ElementType::JGG_SM90_OUT>(
    const RaggedKProblem&, const RaggedOperands&, const GroupedLaunch&, int);
#else
template cudaError_t RaggedM<ElementType::JGG_SM90_IN, ElementType::JGG_SM90_OUT,
                             Tile::JGG_SM90_TILE, JGG_SM90_RHS_TRANSPOSED>(
    const RaggedMProblem&, const RaggedOperands&, const GroupedLaunch&);
#endif

}  // namespace jgg::cuda::sm90
