// What our tile schedulers built on CUTLASS's persistent group scheduler share (the tail
// split, tail_split_sm90.cuh; tiles on demand, dynamic_tiles_sm90.cuh).
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_SCHEDULER_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_SCHEDULER_SM90_CUH_

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace jgg::cuda::sm90 {

// The linear index of this CTA's first work unit, as CUTLASS's group scheduler numbers them:
// along the raster's minor grid dimension first. For a cluster, index mod cluster size is the
// CTA's place in its cluster, from which CUTLASS takes the cluster's major tile offset.
CUTLASS_DEVICE uint64_t FirstLinearUnit(cutlass::gemm::kernel::detail::RasterOrder raster) {
  return raster == cutlass::gemm::kernel::detail::RasterOrder::AlongN
             ? uint64_t(blockIdx.x) + uint64_t(blockIdx.y) * gridDim.x
             : uint64_t(blockIdx.x) * gridDim.y + blockIdx.y;
}

// Calls visit(m, n, k) for each problem with tiles (M, N > 0), the warp's lanes a problem
// each in turn: a warp's lanes together see every such problem once.
template <class Shapes, class Visit>
CUTLASS_DEVICE void ForEachProblemWithTiles(const Shapes& shapes, Visit&& visit) {
  for (int g = threadIdx.x % 32; g < shapes.groups(); g += 32) {
    const auto s = shapes.get_problem_shape(g);
    const int m = cute::get<0>(s), n = cute::get<1>(s), k = cute::get<2>(s);
    if (m > 0 && n > 0) visit(m, n, k);
  }
}

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_SCHEDULER_SM90_CUH_
