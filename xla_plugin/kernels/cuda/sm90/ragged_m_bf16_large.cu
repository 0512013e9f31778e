// Forward: bf16 lhs [M, K] . bf16 rhs [G, K, N] -> bf16, f32 accumulation.
#include "xla_plugin/kernels/cuda/sm90/ragged_problems_sm90.cuh"

namespace jgg::cuda::sm90 {

cudaError_t RaggedMBf16(const RaggedMProblem& p, const RaggedOperands& o, const GroupedLaunch& l) {
  using G = GroupedGemm<Cooperative128x256, cutlass::bfloat16_t, cutlass::bfloat16_t,
                        cutlass::layout::RowMajor, cutlass::layout::RowMajor>;
  return RunRagged<G, RaggedMProblems<G::A, G::D>>(p, o, l);
}

}  // namespace jgg::cuda::sm90
