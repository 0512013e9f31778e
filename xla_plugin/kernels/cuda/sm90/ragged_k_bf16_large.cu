// Wgrad: bf16 x [M, P]^T . bf16 dy [M, N] per group -> bf16 dw [G, P, N].
// One kernel instantiation per file: they compile in parallel and cache apart.
#include "xla_plugin/kernels/cuda/sm90/ragged_problems_sm90.cuh"

namespace jgg::cuda::sm90 {

cudaError_t RaggedKBf16Large(const RaggedKProblem& p, const RaggedOperands& o, const GroupedLaunch& l) {
  return RaggedKBf16<Cooperative128x256>(p, o, l);
}

}  // namespace jgg::cuda::sm90
