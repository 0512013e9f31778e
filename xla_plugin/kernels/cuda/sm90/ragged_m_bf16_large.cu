// Forward: bf16 lhs [M, K] . bf16 rhs [G, K, N] -> bf16, f32 accumulation.
// One kernel instantiation per file: they compile in parallel and cache apart.
#include "xla_plugin/kernels/cuda/sm90/ragged_problems_sm90.cuh"

namespace jgg::cuda::sm90 {

cudaError_t RaggedMBf16Large(const RaggedMProblem& p, const RaggedOperands& o, const GroupedLaunch& l) {
  return RaggedMBf16<Cooperative128x256, cutlass::layout::RowMajor>(p, o, l);
}

}  // namespace jgg::cuda::sm90
