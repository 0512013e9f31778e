// Wgrad: bf16 x [M, P]^T . bf16 dy [M, N] per group -> bf16 dw [G, P, N].
#include "xla_plugin/kernels/cuda/sm90/ragged_problems_sm90.cuh"

namespace jgg::cuda::sm90 {

cudaError_t RaggedKBf16(const RaggedKProblem& p, const RaggedOperands& o, const GroupedLaunch& l) {
  using G = GroupedGemm<Cooperative128x256, cutlass::bfloat16_t, cutlass::bfloat16_t,
                        cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  return RunRagged<G, RaggedKProblems<G::A, G::D>>(p, o, l);
}

}  // namespace jgg::cuda::sm90
