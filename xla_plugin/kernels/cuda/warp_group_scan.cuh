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

// Exclusive prefix sum over the warp's lanes; `total` receives the whole warp's.
__device__ inline int64_t WarpExclusiveSum(int64_t v, int64_t* total) {
  const int64_t incl = WarpInclusiveSum(v);
  *total = __shfl_sync(0xffffffffu, incl, 31);
  return incl - v;
}

// Rows [begin, begin + rows) of a group of `size` rows starting at `row`, clamped to extent.
__device__ inline GroupRows GroupRowsAt(int64_t row, int32_t size, int64_t extent) {
  const int64_t begin = MinI64(extent, row);
  return {begin, MinI64(extent, row + size) - begin};
}

// NextGroupRows for 128 groups a round trip: lane l holds groups base + 4l .. base + 4l + 3
// of a window of kWindowGroups, read by one 16-byte load where the sizes allow. A block that
// locates its work before its first weight load waits for each window's loads in turn: 64
// groups are one window here, two of NextGroupRows. A lane keeps its groups' clamped sizes
// and the (unclamped) row where the first begins, not four begin/rows pairs: the walk's
// registers count against the kernel it is inlined in.
constexpr int kLaneGroups = 4;
constexpr int kWindowGroups = 32 * kLaneGroups;

struct LaneGroups {
  int32_t size[kLaneGroups];
  int64_t row;  // group j begins at row + size[0] + ... + size[j - 1] (GroupRowsAt)
};

__device__ inline LaneGroups NextLaneGroups(const int32_t* sizes, int64_t num_groups,
                                            int64_t base, int64_t* before) {
  const int64_t g0 = base + kLaneGroups * (threadIdx.x % 32);
  LaneGroups r;
  if (g0 + kLaneGroups <= num_groups && reinterpret_cast<uintptr_t>(sizes) % 16 == 0) {
    const int4 v = *reinterpret_cast<const int4*>(sizes + g0);
    r.size[0] = v.x, r.size[1] = v.y, r.size[2] = v.z, r.size[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < kLaneGroups; ++j) r.size[j] = g0 + j < num_groups ? sizes[g0 + j] : 0;
  }
  int64_t lane_rows = 0, window_rows;
#pragma unroll
  for (int j = 0; j < kLaneGroups; ++j) {
    r.size[j] = static_cast<int32_t>(ClampedSize(r.size[j]));
    lane_rows += r.size[j];
  }
  r.row = *before + WarpExclusiveSum(lane_rows, &window_rows);
  *before += window_rows;
  return r;
}

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_WARP_GROUP_SCAN_CUH_
