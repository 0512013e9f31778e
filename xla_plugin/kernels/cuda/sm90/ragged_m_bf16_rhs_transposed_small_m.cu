// Dgrad, groups of few rows.
// One kernel instantiation per file: they compile in parallel and cache apart.
#include "xla_plugin/kernels/cuda/sm90/ragged_problems_sm90.cuh"

namespace jgg::cuda::sm90 {

cudaError_t RaggedMBf16RhsTransposedSmallM(const RaggedMProblem& p, const RaggedOperands& o, const GroupedLaunch& l) {
  return RaggedMBf16<Pingpong64x128, cutlass::layout::ColumnMajor>(p, o, l);
}

}  // namespace jgg::cuda::sm90
