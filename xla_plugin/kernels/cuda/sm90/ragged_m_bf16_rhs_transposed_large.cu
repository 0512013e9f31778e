// Dgrad: bf16 dy [M, N] . bf16 w [G, K, N] read as [G, N', K'] (column-major B) -> bf16.
#include "xla_plugin/kernels/cuda/sm90/ragged_problems_sm90.cuh"

namespace jgg::cuda::sm90 {

cudaError_t RaggedMBf16RhsTransposed(const RaggedMProblem& p, const RaggedOperands& o,
                                     const GroupedLaunch& l) {
  using G = GroupedGemm<Cooperative128x256, cutlass::bfloat16_t, cutlass::bfloat16_t,
                        cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  return RunRagged<G, RaggedMProblems<G::A, G::D>>(p, o, l);
}

}  // namespace jgg::cuda::sm90
