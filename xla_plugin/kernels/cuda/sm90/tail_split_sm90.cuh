// The last round of a grouped GEMM's tiles, split along K.
//
// CUTLASS's persistent group scheduler gives CTA c the tiles c, c + W, c + 2W, ... of the W
// CTAs' grid, so a GEMM of T tiles runs ceil(T / W) rounds of whole tiles, and a last round of
// r = T mod W tiles keeps W - r SMs idle for a whole tile's time (qwen3-30b's forward: 1719
// tiles on 132 SMs, a 14th round of 3 tiles). Here, where r is small, each of those r tiles is
// split into s pieces of its K range (s <= W / r, so they still run in one round), each piece
// on its own CTA: the last round takes about 1 / s of a tile's time, plus a reduction.
// Measured on an H100 (docs/PERFORMANCE.md, 2026-11-28): a last round of a few tiles costs
// only about a third of a full round's tile time (those tiles run alone, with all of the
// memory and power), so the split gains 1-3% of the anchor GEMMs it applies to.
//
// The reduction: the pieces but the last write their f32 accumulators to a slot of the
// workspace (TailSplitRegion, workspace.h) and count themselves in the tile's flag, one
// increment per warp; the last piece waits for the others' warps, adds their slots in piece
// order (so a call's results are the same every run) and runs the epilogue. The pieces of a
// tile run in the same round on different CTAs, all resident (one CTA per SM, a grid of SMs),
// and only the last waits, so the wait always ends.
//
// Which tiles split is decided on the device, from the problem shapes the preparation wrote:
// every thread sums the tiles of all problems (a warp's lanes a problem each) and derives the
// same plan. The plan is carried in each work tile's `is_valid_tile` word (below), the one
// field of CUTLASS's WorkTileInfo the kernel reads only through is_valid(), so CUTLASS's
// response pipeline carries it unchanged. CUTLASS's ptr-array cooperative kernel already asks
// its scheduler for each work tile's K range and calls its fixup and compute_epilogue (the
// hooks of its stream-K scheduler); the scheduler here answers them.
//
// The scheduler is swapped in through the problem shape type: CUTLASS picks the grouped
// kernel's scheduler by (tag, architecture, tile, cluster, stages, problem shape), so a problem
// shape of our own selects ours and leaves every other instantiation on CUTLASS's. Ragged-row
// GEMMs (forward, dgrad) only: their problems share K, which the plan needs.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_TAIL_SPLIT_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_TAIL_SPLIT_SM90_CUH_

#include <climits>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cuda/sm90/group_scheduler_sm90.cuh"

namespace jgg::cuda::sm90 {

// Our grouped problem shape with the split's workspace: flags == nullptr, no split.
template <class Underlying>
struct TailSplitProblemShape : BandedProblemShape<Underlying> {
  int32_t* flags = nullptr;     // kTailSplitFlags, zeroed by the preparation
  float4* partials = nullptr;   // kTailSplitSlots slots of kTailSplitSlotBytes
};

// Each piece has at least this many k-tiles: shorter ones would not pay for their slot.
inline constexpr int kMinKTilesPerPiece = 4;
inline constexpr int kMaxPieces = 4;

// A work tile's piece, packed into its is_valid_tile word: bit 0 valid; bits 1-3 pieces (0:
// the whole tile); bits 4-5 piece; bits 6-12 the split tile's index among the round's split
// tiles (its flag; its slots follow from it); bits 13-30 the piece's first k-tile.
struct TailPiece {
  int pieces = 0, piece = 0, tile = 0;
  uint32_t k_start = 0;

  static constexpr int kMaxTile = 127;
  static constexpr uint32_t kMaxKStart = (1u << 18) - 1;

  CUTLASS_HOST_DEVICE static TailPiece Decode(int32_t word) {
    const uint32_t w = static_cast<uint32_t>(word);
    return {static_cast<int>((w >> 1) & 7), static_cast<int>((w >> 4) & 3),
            static_cast<int>((w >> 6) & 127), w >> 13};
  }
  CUTLASS_HOST_DEVICE int32_t Encode() const {
    return static_cast<int32_t>(1u | uint32_t(pieces) << 1 | uint32_t(piece) << 4 |
                                uint32_t(tile) << 6 | k_start << 13);
  }
  CUTLASS_HOST_DEVICE bool split() const { return pieces > 1; }
  CUTLASS_HOST_DEVICE bool last() const { return piece == pieces - 1; }
};

// The f32 slot piece `piece` (< pieces - 1) of split tile `tile` writes: [value / 4][thread].
CUTLASS_DEVICE float4* TailSlot(float4* partials, const TailPiece& p, int piece) {
  constexpr int64_t kSlotVectors = kTailSplitSlotBytes / sizeof(float4);
  return partials + (static_cast<int64_t>(p.tile) * (p.pieces - 1) + piece) * kSlotVectors;
}

CUTLASS_DEVICE int32_t LoadAcquire(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The reduction of a split tile, by every consumer thread (num_warpgroups warpgroups).
template <class Frg>
CUTLASS_DEVICE void ReduceTailPiece(int32_t* flags, float4* partials, const TailPiece& p,
                                    Frg& accumulators, uint32_t num_warpgroups,
                                    uint32_t warpgroup) {
  constexpr int kVectors = decltype(cute::size(accumulators))::value / 4;
  static_assert(decltype(cute::size(accumulators))::value % 4 == 0);
  static_assert(kVectors * sizeof(float4) * 2 * cutlass::NumThreadsPerWarpGroup <=
                    kTailSplitSlotBytes,
                "a slot holds a tile's accumulators (two consumer warpgroups)");
  const int threads = static_cast<int>(num_warpgroups) * cutlass::NumThreadsPerWarpGroup;
  const int t = static_cast<int>(warpgroup) * cutlass::NumThreadsPerWarpGroup +
                static_cast<int>(threadIdx.x) % cutlass::NumThreadsPerWarpGroup;
  const bool lane0 = threadIdx.x % 32 == 0;
  int32_t* flag = flags + p.tile;
  if (!p.last()) {
    float4* slot = TailSlot(partials, p, p.piece) + t;
#pragma unroll
    for (int i = 0; i < kVectors; ++i) {
      __stcg(slot + i * threads, make_float4(accumulators(4 * i), accumulators(4 * i + 1),
                                             accumulators(4 * i + 2), accumulators(4 * i + 3)));
    }
    __threadfence();  // the slot before the flag
    __syncwarp();
    if (lane0) atomicAdd(flag, 1);
    return;
  }
  const int32_t arrivals = (p.pieces - 1) * threads / 32;
  if (lane0) {
    while (LoadAcquire(flag) < arrivals) __nanosleep(32);
  }
  __syncwarp();
  __threadfence();
  for (int q = 0; q < p.pieces - 1; ++q) {
    const float4* slot = TailSlot(partials, p, q) + t;
#pragma unroll
    for (int i = 0; i < kVectors; ++i) {
      const float4 v = __ldcg(slot + i * threads);
      accumulators(4 * i) += v.x;
      accumulators(4 * i + 1) += v.y;
      accumulators(4 * i + 2) += v.z;
      accumulators(4 * i + 3) += v.w;
    }
  }
}

template <class ProblemShape, int kStages>
struct TailSplitScheduler
    : cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Group<ProblemShape, kStages> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Group<ProblemShape, kStages>;
  using typename Base::Params;
  using typename Base::WorkTileInfo;
  using Base::Base;

  // Every thread, once, before any other call.
  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    grid_ = uint64_t(gridDim.x) * gridDim.y * gridDim.z;
    unit_ = FirstLinearUnit(this->scheduler_params.raster_order_);
    Plan();
    return WorkOfUnit(unit_);
  }

  // The scheduler warp, for each work tile after the CTA's first.
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto advance_to_next_work(Pipeline& pipeline, PipelineState state,
                                           uint32_t advance_count = 1) {
    unit_ += grid_ * advance_count;
    const WorkTileInfo work = WorkOfUnit(unit_);
    pipeline.producer_acquire(state);
    Respond(pipeline, state, this->response_ptr_, work);
    return cute::make_tuple(work, true);
  }

  template <class ProblemShapeMNKL, class TileShape>
  CUTLASS_HOST_DEVICE static int get_work_k_tile_count(WorkTileInfo const& work,
                                                       ProblemShapeMNKL problem_shape,
                                                       TileShape tile) {
    const int k_tiles = Base::get_work_k_tile_count(work, problem_shape, tile);
    const TailPiece p = TailPiece::Decode(work.is_valid_tile);
    if (!p.split()) return k_tiles;
    return (p.piece + 1) * k_tiles / p.pieces - p.piece * k_tiles / p.pieces;
  }

  CUTLASS_HOST_DEVICE static uint32_t get_work_k_tile_start(WorkTileInfo const& work) {
    const TailPiece p = TailPiece::Decode(work.is_valid_tile);
    return p.split() ? p.k_start : 0u;
  }

  template <class Frg>
  CUTLASS_DEVICE static void fixup(Params const& params, WorkTileInfo const& work,
                                   Frg& accumulators, uint32_t num_warpgroups,
                                   uint32_t warpgroup) {
    const TailPiece p = TailPiece::Decode(work.is_valid_tile);
    if (!work.is_valid() || !p.split()) return;
    ReduceTailPiece(params.problem_shapes_.flags, params.problem_shapes_.partials, p,
                    accumulators, num_warpgroups, warpgroup);
  }

  CUTLASS_HOST_DEVICE static bool compute_epilogue(WorkTileInfo const& work, Params const&) {
    const TailPiece p = TailPiece::Decode(work.is_valid_tile);
    return !p.split() || p.last();
  }

 private:
  // The split of the last round (pieces_ == 0: none): the same on every thread of the grid.
  CUTLASS_DEVICE void Plan() {
    const ProblemShape& shapes = this->scheduler_params.problem_shapes_;
    if (shapes.flags == nullptr) return;
    const auto& cta = this->scheduler_params.cta_shape_;
    uint64_t tiles = 0;
    int k_min = INT_MAX, k_max = 0;
    ForEachProblemWithTiles(shapes, [&](int m, int n, int k) {
      tiles += uint64_t((m + cta.m() - 1) / cta.m()) * uint64_t((n + cta.n() - 1) / cta.n());
      k_min = k < k_min ? k : k_min;
      k_max = k > k_max ? k : k_max;
    });
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
      tiles += __shfl_xor_sync(0xffffffffu, tiles, d);
      k_min = min(k_min, __shfl_xor_sync(0xffffffffu, k_min, d));
      k_max = max(k_max, __shfl_xor_sync(0xffffffffu, k_max, d));
    }
    if (k_min != k_max) return;  // problems of different K (or none): no split
    const uint64_t k_tiles = (uint64_t(k_max) + cta.k() - 1) / cta.k();
    const uint64_t r = tiles % grid_;
    if (r == 0 || r > TailPiece::kMaxTile + 1 || k_tiles > TailPiece::kMaxKStart) return;
    for (int s = kMaxPieces; s >= 2; --s) {
      if (r * s <= grid_ && r * (s - 1) <= uint64_t(kTailSplitSlots) &&
          k_tiles >= uint64_t(s) * kMinKTilesPerPiece) {
        pieces_ = s;
        break;
      }
    }
    total_ = tiles;
    full_ = tiles - r;
    k_tiles_ = static_cast<uint32_t>(k_tiles);
  }

  // Unit u of the CTA's sequence: tile u, or, past the full rounds, a piece of a split tile.
  CUTLASS_DEVICE WorkTileInfo WorkOfUnit(uint64_t u) {
    if (pieces_ == 0 || u < full_) return Tile(u);
    const uint64_t v = u - full_, tile = full_ + v / pieces_;
    if (tile >= total_) return WorkTileInfo::invalid_work_tile();
    WorkTileInfo work = Tile(tile);
    if (!work.is_valid()) return work;
    TailPiece p;
    p.pieces = pieces_;
    p.piece = static_cast<int>(v % pieces_);
    p.tile = static_cast<int>(v / pieces_);
    p.k_start = static_cast<uint32_t>(p.piece * k_tiles_ / pieces_);
    work.is_valid_tile = p.Encode();
    return work;
  }

  // Tile t of the GEMM, in the order of its group's bands.
  CUTLASS_DEVICE WorkTileInfo Tile(uint64_t t) {
    return InRowBands(this->get_current_work_for_linear_idx(t), this->scheduler_params);
  }

  uint64_t grid_ = 1, unit_ = 0, total_ = 0, full_ = 0;
  uint32_t k_tiles_ = 0;
  int pieces_ = 0;
};

}  // namespace jgg::cuda::sm90

// CUTLASS's scheduler choice for the grouped SM90 kernels, for our problem shape: the Base
// scheduler's specialization with the problem shape left open is the less specialized one.
// No cluster (the plan counts tiles without cluster padding).
namespace cutlass::gemm::kernel::detail {
template <class TileShape, uint32_t kStages, class Underlying>
struct TileSchedulerSelector<GroupScheduler, arch::Sm90, TileShape, cute::Shape<cute::_1, cute::_1, cute::_1>,
                             kStages, jgg::cuda::sm90::TailSplitProblemShape<Underlying>> {
  using Scheduler = jgg::cuda::sm90::TailSplitScheduler<
      jgg::cuda::sm90::TailSplitProblemShape<Underlying>, kStages>;
};
}  // namespace cutlass::gemm::kernel::detail

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_TAIL_SPLIT_SM90_CUH_
