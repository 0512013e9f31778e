// Dgrad: bf16 dy [M, N] . bf16 w [G, K, N] read transposed in place -> bf16.
// One kernel instantiation per file: they compile in parallel and cache apart.
#include "xla_plugin/kernels/cuda/sm90/ragged_problems_sm90.cuh"

namespace jgg::cuda::sm90 {

cudaError_t RaggedMBf16RhsTransposedLarge(const RaggedMProblem& p, const RaggedOperands& o, const GroupedLaunch& l) {
  return RaggedMBf16<Cooperative128x256, cutlass::layout::ColumnMajor>(p, o, l);
}

}  // namespace jgg::cuda::sm90
