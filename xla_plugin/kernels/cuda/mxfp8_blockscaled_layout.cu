// The host check of the sm_100 scale layout contract (mxfp8_blockscaled_cuda.h): CUTLASS's
// Sm1xxBlockScaledConfig, which sm100/blockscaled_gemm_sm100.cuh asserts its mainloop uses, against
// our swizzled index. Host code only.
#include "xla_plugin/kernels/cuda/mxfp8_blockscaled_cuda.h"

#ifdef JGG_WITH_SM100
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "xla_plugin/common/mxfp8_layout.h"
#endif

namespace jgg::cuda {
#ifdef JGG_WITH_SM100

int64_t BlockScaledScaleLayoutMismatches(int64_t rows, int64_t depth) {
  using Config = cutlass::detail::Sm1xxBlockScaledConfig<static_cast<int>(mxfp8::kBlockSize)>;
  const int m = static_cast<int>(rows), k = static_cast<int>(depth);
  // A's scales over (M, K) and B's over (N, K) of the same problem: both must be ours.
  const auto a = Config::tile_atom_to_shape_SFA(cute::make_shape(m, m, k, 1));
  const auto b = Config::tile_atom_to_shape_SFB(cute::make_shape(m, m, k, 1));
  const int64_t padded_cols = mxfp8::GroupScaleMatrix(rows, depth, false).padded_cols;
  int64_t mismatches = 0;
  for (int i = 0; i < m; ++i) {
    for (int kk = 0; kk < k; ++kk) {
      const int64_t ours = mxfp8::SwizzledIndex(i, kk / mxfp8::kBlockSize, padded_cols);
      mismatches += static_cast<int64_t>(a(i, kk, 0)) != ours;
      mismatches += static_cast<int64_t>(b(i, kk, 0)) != ours;
    }
  }
  const int64_t bytes = mxfp8::GroupScaleBytes(rows, depth);
  mismatches += static_cast<int64_t>(cute::cosize(a)) != bytes;
  mismatches += static_cast<int64_t>(cute::cosize(b)) != bytes;
  return mismatches;
}
#else
int64_t BlockScaledScaleLayoutMismatches(int64_t, int64_t) { return -1; }
#endif  // JGG_WITH_SM100

}  // namespace jgg::cuda
