// What our tile schedulers built on CUTLASS's persistent group scheduler share (the tail
// split, tail_split_sm90.cuh; tiles on demand, dynamic_tiles_sm90.cuh).
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_SCHEDULER_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_SCHEDULER_SM90_CUH_

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
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

// CUTLASS's grouped problem shape with the height of the bands our schedulers walk each
// group's tiles in (InRowBands; 0: CUTLASS's order): the base of their problem shapes.
template <class Underlying>
struct BandedProblemShape : cutlass::gemm::GroupProblemShape<Underlying> {
  int row_tiles_per_band = 0;
};

// The order of a group's tiles in bands of row tiles. CUTLASS's group scheduler (raster
// along M) walks a group's tiles one column of row tiles after another, so a wave of W CTAs
// over a group of R row tiles covers W / R columns of all R rows: for a group of many rows
// (a hot expert) each wave reads the group's whole A, which past L2's size comes from HBM
// again wave after wave. Cut into bands of about `row_tiles_per_band` row tiles, walked one
// after another and each column by column, a wave covers a band's rows of W / band columns:
// its A and B bytes are about equal for band = sqrt(W * tile_n / tile_m), and a band's A
// stays in L2 while the band sweeps across N. The bands of a group are of equal height
// (within one row tile): a thin last band would read all of B for a sliver of A. A group of
// fewer than 1.5 bands of row tiles stays one band: CUTLASS's order. A cluster's CTAs keep
// their places in it (bands count cluster rows). `work` is CUTLASS's tile for a linear index
// along M; the result is a bijection on each group's tiles.
template <class WorkTileInfo, class Params>
CUTLASS_DEVICE WorkTileInfo InRowBands(WorkTileInfo work, const Params& params) {
  const int cluster_m = params.cluster_shape_.m();
  const int band = params.problem_shapes_.row_tiles_per_band / cluster_m;  // in cluster rows
  if (band <= 0 || !work.is_valid() || params.cluster_shape_.n() != 1 ||
      params.raster_order_ != cutlass::gemm::kernel::detail::RasterOrder::AlongM)
    return work;
  const auto s = params.problem_shapes_.get_problem_shape(work.L_idx);
  const int64_t tile_m = params.cta_shape_.m(), tile_n = params.cta_shape_.n();
  const int64_t row_tiles = (cute::get<0>(s) + tile_m - 1) / tile_m;
  const int64_t rows = (row_tiles + cluster_m - 1) / cluster_m;  // cluster rows
  const int64_t columns = (cute::get<1>(s) + tile_n - 1) / tile_n;
  const int64_t bands = (rows + band / 2) / band;  // rows / band, rounded
  if (bands <= 1) return work;
  // The first `tall` bands have `height` + 1 rows, the others `height`.
  const int64_t height = rows / bands, tall = rows % bands;
  int64_t t = work.M_idx / cluster_m + int64_t(work.N_idx) * rows;  // CUTLASS's: M fastest
  int64_t first_row = 0, band_rows = height + 1;
  if (t >= tall * (height + 1) * columns) {
    t -= tall * (height + 1) * columns;
    first_row = tall * (height + 1);
    band_rows = height;
  }
  const int64_t b = t / (band_rows * columns);
  first_row += b * band_rows;
  t -= b * band_rows * columns;
  work.M_idx = static_cast<int32_t>((first_row + t % band_rows) * cluster_m + work.M_idx % cluster_m);
  work.N_idx = static_cast<int32_t>(t / band_rows);
  return work;
}

// Hands `work` to the CTA's consumers through CUTLASS's scheduler response pipeline, whose
// slot the scheduler warp has acquired.
template <class Pipeline, class PipelineState, class WorkTileInfo>
CUTLASS_DEVICE void Respond(Pipeline& pipeline, PipelineState state, WorkTileInfo* responses,
                            const WorkTileInfo& work) {
  if (cute::elect_one_sync()) {
    responses[state.index()] = work;
    cutlass::arch::fence_view_async_shared();
    pipeline.producer_commit(state);
  }
}

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_SCHEDULER_SM90_CUH_
