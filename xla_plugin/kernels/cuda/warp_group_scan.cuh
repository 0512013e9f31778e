// Locating groups from the device group sizes inside a kernel, one warp at a time: lane l
// holds group base + l of each window of 32 groups, and warp scans give the running sums
// (clamped as ragged_layout.h says), so no schedule is written to HBM first.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_WARP_GROUP_SCAN_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_WARP_GROUP_SCAN_CUH_

#include <cstdint>

#include "xla_plugin/common/ragged_layout.h"

namespace jgg::cuda {

__device__ inline int64_t WarpInclusiveSum(int64_t v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int64_t up = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += up;
  }
  return v;
}

// Exclusive prefix of v over the warp's lanes under an associative `op`; `total` receives the
// whole warp's. For 32-bit running sums that must not overflow (a saturating `op`).
template <typename Op>
__device__ inline int32_t WarpExclusiveScan(int32_t v, Op op, int32_t& total) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int32_t up = __shfl_up_sync(0xFFFFFFFFu, v, d);
    if (lane >= d) v = op(up, v);
  }
  total = __shfl_sync(0xFFFFFFFFu, v, 31);
  const int32_t before = __shfl_up_sync(0xFFFFFFFFu, v, 1);
  return lane == 0 ? 0 : before;
}

// Rows [begin, begin + rows) of the clamped group sizes of the 32 groups starting at `base`,
// one per lane, after `before` rows of the earlier groups; `before` advances past them.
struct GroupRows {
  int64_t begin, rows;
};

__device__ inline GroupRows NextGroupRows(const int32_t* sizes, int64_t num_groups,
                                          int64_t extent, int64_t base, int64_t* before) {
  const int64_t g = base + threadIdx.x % 32;
  const int64_t size = g < num_groups ? ClampedSize(sizes[g]) : 0;
  const int64_t incl = WarpInclusiveSum(size);
  const int64_t begin = MinI64(extent, *before + incl - size);
  const GroupRows r{begin, MinI64(extent, *before + incl) - begin};
  *before += __shfl_sync(0xffffffffu, incl, 31);
  return r;
}

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_WARP_GROUP_SCAN_CUH_
