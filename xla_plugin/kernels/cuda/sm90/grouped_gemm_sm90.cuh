// CUTLASS SM90 ptr-array grouped GEMM with device-side problem shapes: the
// building block of the Hopper tensor-core path. Included only by the
// instantiation files next to it (one kernel configuration per .cu, so they
// compile in parallel and cache separately: ~55 s and 3.4 GB each).
//
// Problem shapes, pointers and strides, and each problem's TMA descriptors, are
// written by a small kernel from the group sizes on the device, and CUTLASS runs
// with host_problem_shapes = nullptr: no host reads of group sizes, no sync, no
// allocation (CUTLASS's own workspace comes from ours), so the launch is
// graph-capturable.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_CUH_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "xla_plugin/common/environment.h"
#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cuda/cutlass_grouped.cuh"
#include "xla_plugin/kernels/cuda/sm90/group_tensormaps_sm90.cuh"
#include "xla_plugin/kernels/cuda/sm90/dynamic_tiles_sm90.cuh"
#include "xla_plugin/kernels/cuda/sm90/grouped_gemm_sm90.h"
#include "xla_plugin/kernels/cuda/sm90/tail_split_sm90.cuh"

namespace jgg::cuda::sm90 {

using namespace cute;  // NOLINT: CUTLASS's shape vocabulary (Shape, _128, ...)

// A tile configuration is data: tile, cluster, the two schedules, the bytes per row of the
// epilogue's subtiles (0: CUTLASS's choice) and the tile scheduling: CUTLASS's static order,
// its last round of tiles split along K (tail_split_sm90.cuh; ragged rows, no cluster,
// 128x256 tiles), or tiles on demand (dynamic_tiles_sm90.cuh; wgrad).
enum class Scheduling { kStatic, kTailSplit, kTilesOnDemand };

template <class Tile, class Cluster, class Mainloop, class Epilogue, int kEpiRowBytes = 0,
          Scheduling kScheduling = Scheduling::kStatic>
struct TileConfig {
  using TileShape = Tile;
  using ClusterShape = Cluster;
  using KernelSchedule = Mainloop;
  using EpilogueSchedule = Epilogue;
  static constexpr int kEpilogueSubtileRowBytes = kEpiRowBytes;
  static constexpr bool kTailSplit = kScheduling == Scheduling::kTailSplit;
  static constexpr bool kTilesOnDemand = kScheduling == Scheduling::kTilesOnDemand;
};

// Cooperative 128x256x64 (two consumer warpgroups share one 128x256 tile): the best
// tile of the BUILD_NOTES probe on the large anchor shapes. A cluster shares operand
// tiles between CTAs through TMA multicast, but CUTLASS's group scheduler also rounds
// every group's tile counts up to the cluster shape, and the padding tiles run their
// whole mainloop: a 2x1 cluster pads each group's row tiles to an even count. So ragged
// rows (forward, dgrad) run without a cluster: fastest on 11 of 12 anchor rows, 1-10%
// above 2x1 (docs/PERFORMANCE.md, 2026-11-24 third session). Wgrad's tile counts are not
// ragged (its rows are the fixed hidden size), so it keeps 2x1's multicast.
//
// The epilogue stores each tile through shared memory in 128-row subtiles, two buffers deep,
// each behind barriers of both consumer warpgroups while no MMA runs. Subtiles of 256 bytes a
// row (128x128 in bf16/f16, 128x64 in f32) take two rounds a tile where CUTLASS's 128x32
// takes eight; their 64 KB of buffers leave the mainloop 3 stages of 48 KB instead of 4. On
// an H200 that is 0-4.4% faster on every cooperative row measured, forward, dgrad and wgrad,
// from 32 (wgrad) or 96 rows per group to mixtral's 2048 (docs/PERFORMANCE.md, 2026-12-01).
constexpr int kEpilogueRowBytes = 256;
using Cooperative128x256 = TileConfig<Shape<_128, _256, _64>, Shape<_1, _1, _1>,
                                      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                      cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
                                      kEpilogueRowBytes, Scheduling::kTailSplit>;
// Wgrad's: 2x1 cluster, tiles on demand.
using Cooperative128x256Cluster2x1 =
    TileConfig<Shape<_128, _256, _64>, Shape<_2, _1, _1>,
               cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
               cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, kEpilogueRowBytes,
               Scheduling::kTilesOnDemand>;

// 64x128x128 ping-pong (two consumer warpgroups alternate tiles, so one's
// epilogue hides behind the other's mainloop), no cluster: for groups of few
// rows (decode, many small experts), where a 128-row tile would be mostly
// empty and the kernel is bound by streaming the weights.
using Pingpong64x128 = TileConfig<Shape<_64, _128, _128>, Shape<_1, _1, _1>,
                                  cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                  cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;

// CUTLASS's kernel behind one wait for the grid before it on the stream (the preparation,
// whose problem arrays it reads): with that wait the GEMM can be launched as a programmatic
// dependent of the preparation (RunGrouped), so its launch and the placement of its CTAs
// overlap the preparation instead of following it. Launched the ordinary way, the wait
// returns at once. Past the wait it lets a programmatic dependent of its own launch: wgrad's
// streamed kernel, which writes other groups than the GEMM and reads only what the
// preparation wrote, takes the SMs the GEMM's CTAs leave as they finish (a dependent
// launched the ordinary way still waits for the whole GEMM). kExtraSharedBytes more shared
// memory follow CUTLASS's storage.
template <class Base, int kExtraSharedBytes = 0>
struct WaitsForPreparation : Base {
  static constexpr int SharedStorageSize = Base::SharedStorageSize + kExtraSharedBytes;
  static_assert(Base::SharedStorageSize % 16 == 0 && SharedStorageSize <= 227 * 1024);

  CUTLASS_DEVICE void operator()(typename Base::Params const& params, char* shared_storage) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    Base::operator()(params, shared_storage);
  }
};

template <class Config, class ElementIn, class ElementOut, class LayoutA, class LayoutB>
struct GroupedGemm {
  static constexpr bool kTailSplit = Config::kTailSplit;
  static constexpr bool kTilesOnDemand = Config::kTilesOnDemand;
  using ProblemShape =  // (M, N, K) per problem; the type selects the tile scheduler
      std::conditional_t<kTailSplit, TailSplitProblemShape<Shape<int, int, int>>,
                         std::conditional_t<kTilesOnDemand, DynamicTilesProblemShape<Shape<int, int, int>>,
                                            cutlass::gemm::GroupProblemShape<Shape<int, int, int>>>>;
  static constexpr int kExtraSharedBytes = kTilesOnDemand ? kMailboxBytes : 0;
  static constexpr int kAlignIn = 16 / sizeof(ElementIn);
  static constexpr int kAlignOut = 16 / sizeof(ElementOut);
  using EpilogueTile = std::conditional_t<
      Config::kEpilogueSubtileRowBytes == 0, cutlass::epilogue::collective::EpilogueTileAuto,
      Shape<_128, Int<Config::kEpilogueSubtileRowBytes / static_cast<int>(sizeof(ElementOut))>>>;

  using CollectiveEpilogue = EpilogueWithGroupTensormaps<typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::TileShape,
      typename Config::ClusterShape, EpilogueTile, float, float,
      void, cutlass::layout::RowMajor*, kAlignOut,  // no source operand C
      ElementOut, cutlass::layout::RowMajor*, kAlignOut, typename Config::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementOut, float, void, float>>::CollectiveOp>;

  using CollectiveMainloop = MainloopWithGroupTensormaps<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, LayoutA*, kAlignIn,
      ElementIn, LayoutB*, kAlignIn, float, typename Config::TileShape,
      typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage)) + kExtraSharedBytes>,
      typename Config::KernelSchedule>::CollectiveOp>;

  using Kernel = WaitsForPreparation<cutlass::gemm::kernel::GemmUniversal<
      ProblemShape, CollectiveMainloop, CollectiveEpilogue>, kExtraSharedBytes>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  using A = ElementIn;
  using D = ElementOut;
};

// One problem in CUTLASS's form.
template <class G>
struct CutlassProblem {
  typename G::Shape3 shape;
  const typename G::A* a;
  const typename G::A* b;
  typename G::D* d;
  typename G::StrideA stride_a;
  typename G::StrideB stride_b;
  typename G::StrideD stride_d;

  CUTLASS_HOST_DEVICE static CutlassProblem Of(const ProblemDescription& p) {
    return {{p.m, p.n, p.k},
            static_cast<const typename G::A*>(p.a),
            static_cast<const typename G::A*>(p.b),
            static_cast<typename G::D*>(p.d),
            cutlass::make_cute_packed_stride(typename G::StrideA{}, {p.m, p.k, 1}),
            cutlass::make_cute_packed_stride(typename G::StrideB{}, {p.n, p.k, 1}),
            cutlass::make_cute_packed_stride(typename G::StrideD{}, {p.m, p.n, 1})};
  }
};

// CUTLASS's per-problem argument arrays, carved out of our workspace.
template <class G>
struct ProblemArrays {
  typename G::Shape3* shapes;
  const typename G::A** a;
  const typename G::A** b;
  typename G::D** d;
  typename G::StrideA* stride_a;
  typename G::StrideB* stride_b;
  typename G::StrideD* stride_d;

  static ProblemArrays Carve(char* region, int64_t count) {
    static_assert(CarvedBytesPerProblem<typename G::Shape3, void*, void*, void*,
                                        typename G::StrideA, typename G::StrideB,
                                        typename G::StrideD>() <= kProblemArgumentBytes,
                  "kProblemArgumentBytes is too small");
    ProblemArrays arrays;
    CarveArrays(region, count, arrays.shapes, arrays.a, arrays.b, arrays.d, arrays.stride_a,
                arrays.stride_b, arrays.stride_d);
    return arrays;
  }

  // The arrays from problem `first` on.
  ProblemArrays From(int64_t first) const {
    return {shapes + first,   a + first,        b + first,       d + first,
            stride_a + first, stride_b + first, stride_d + first};
  }

  CUTLASS_DEVICE void Store(int64_t p, const CutlassProblem<G>& problem) const {
    shapes[p] = problem.shape;
    a[p] = problem.a;
    b[p] = problem.b;
    d[p] = problem.d;
    stride_a[p] = problem.stride_a;
    stride_b[p] = problem.stride_b;
    stride_d[p] = problem.stride_d;
  }
  CUTLASS_DEVICE CutlassProblem<G> Load(int64_t p) const {
    return {shapes[p], a[p], b[p], d[p], stride_a[p], stride_b[p], stride_d[p]};
  }
};

// Where the GEMM's TMA copies of A, B and D want each problem's descriptors, and the copies
// themselves, whose descriptors fix everything but the tensor (group_tensormaps_sm90.cuh).
template <class G>
struct ProblemTensormaps {
  typename G::CollectiveMainloop::Params mainloop;
  typename G::CollectiveEpilogue::Params epilogue;

  static constexpr int kOperands = 3;  // A, B, D

  // Writes descriptor `operand` of problem p, unless p has no tiles (no CTA reads its
  // descriptors then).
  __device__ void Write(int64_t p, int operand, const CutlassProblem<G>& problem,
                        cute::TmaDescriptor& staging) const {
    const int m = get<0>(problem.shape), n = get<1>(problem.shape), k = get<2>(problem.shape);
    if (m == 0 || n == 0) return;
    cute::TmaDescriptor* ab = G::CollectiveMainloop::Descriptors(mainloop, static_cast<int>(p));
    if (operand == 0) {
      WriteDescriptor(mainloop.tma_load_a,
                      make_tensor(problem.a, make_shape(m, k, Int<1>{}), problem.stride_a),
                      staging, ab);
    } else if (operand == 1) {
      WriteDescriptor(mainloop.tma_load_b,
                      make_tensor(problem.b, make_shape(n, k, Int<1>{}), problem.stride_b),
                      staging, ab + 1);
    } else {
      WriteDescriptor(epilogue.tma_store_d,
                      make_tensor(problem.d, make_shape(m, n, Int<1>{}), problem.stride_d),
                      staging, G::CollectiveEpilogue::Descriptors(epilogue, static_cast<int>(p)));
    }
  }
};

// A GEMM of more than kProblemsPerGroupedGemm problems runs as several, the first's
// descriptors written by the preparation and each next one's by this kernel: launched
// after the GEMM before it, which reads the descriptors it overwrites.
inline constexpr int kTensormapThreads = 128;

template <class G>
__global__ void __launch_bounds__(kTensormapThreads)
    WriteTensormapsKernel(ProblemArrays<G> problems, int64_t count,
                          const __grid_constant__ ProblemTensormaps<G> tensormaps) {
  __shared__ cute::TmaDescriptor staging[kTensormapThreads];
  constexpr int kOperands = ProblemTensormaps<G>::kOperands;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < kOperands * count) {
    tensormaps.Write(i / kOperands, static_cast<int>(i % kOperands), problems.Load(i / kOperands),
                     staging[threadIdx.x]);
  }
  cute::tma_descriptor_fence_release();  // the GEMM reads them through the tensormap proxy
}

// What the preparation zeroes for the first GEMM's tile scheduler (both null: CUTLASS's order).
struct SchedulerScratch {
  int32_t* tail_split_flags = nullptr;         // kTailSplitFlags, of the split last round
  unsigned long long* tile_counter = nullptr;  // the next ticket of tiles on demand
};

// Problems per block of the preparation. Its TMA descriptors are written by tensormap.replace
// in shared memory, which an SM serializes: 384 descriptors (qwen3-30b's 128 problems) take
// one block 8.8 us, 48 blocks of 8 take 1.0 us (docs/PERFORMANCE.md, 2026-11-30 fiftieth).
inline constexpr int kProblemsPerPreparationBlock = 4;

// The one launch before the GEMM. `Problems` describes a grouped launch on the device:
//   batch(), groups()         problem p = g * batch() + b is group g of batch entry b;
//   kPrepareParts             blocks per batch entry for PrepareBatch;
//   PrepareBatch(b, x, n)     block x of n of batch entry b prepares it (wgrad's row
//                             boundaries, the forward's zero fills), all kPrepareThreads
//                             threads together;
//   StageGroups(b, lo, hi)    stages in the block's shared memory what the two below need
//                             for groups [lo, hi) of batch entry b, all threads together;
//   operator()(g, b)          what group g of batch entry b computes, and
//   Position(g, b)            its problem index (a permutation of g * batch() + b over g).
// The first kPrepareParts blocks of each batch entry prepare it; each further block writes
// the problems of kProblemsPerPreparationBlock of its groups in CUTLASS's form, and the TMA
// descriptors of those among the first GEMM's `first_gemm_problems`: one thread per
// descriptor, from registers.
template <class Problems>
int64_t PreparationBlocks(const Problems& problems) {
  return Problems::kPrepareParts + CeilDiv(problems.groups(), kProblemsPerPreparationBlock);
}

template <class G, class Problems>
__global__ void __launch_bounds__(Problems::kPrepareThreads)
    PrepareProblemsKernel(Problems problems, ProblemArrays<G> out, int64_t first_gemm_problems,
                          const __grid_constant__ ProblemTensormaps<G> tensormaps,
                          SchedulerScratch scratch) {
  // The GEMM may launch now: it waits for this whole grid before reading what it writes.
  asm volatile("griddepcontrol.launch_dependents;");
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    if (scratch.tail_split_flags != nullptr) {
      for (int i = threadIdx.x; i < kTailSplitFlags; i += blockDim.x) scratch.tail_split_flags[i] = 0;
    }
    if (scratch.tile_counter != nullptr && threadIdx.x == 0) *scratch.tile_counter = 0;
  }
  const int64_t b = blockIdx.y, parts = Problems::kPrepareParts;
  if (blockIdx.x < parts) {
    problems.PrepareBatch(b, blockIdx.x, parts);
    return;
  }
  constexpr int kOperands = ProblemTensormaps<G>::kOperands;
  const int64_t lo = (blockIdx.x - parts) * kProblemsPerPreparationBlock;
  const int64_t hi = MinI64(problems.groups(), lo + kProblemsPerPreparationBlock);
  problems.StageGroups(b, lo, hi);
  __syncthreads();  // what StageGroups staged is read below
  __shared__ cute::TmaDescriptor staging[kOperands * kProblemsPerPreparationBlock];
  if (threadIdx.x < kOperands * (hi - lo)) {
    const int64_t g = lo + threadIdx.x / kOperands;
    const int operand = static_cast<int>(threadIdx.x % kOperands);
    const int64_t p = problems.Position(g, b);
    const CutlassProblem<G> problem = CutlassProblem<G>::Of(problems(g, b));
    if (operand == 0) out.Store(p, problem);
    if (p < first_gemm_problems) tensormaps.Write(p, operand, problem, staging[threadIdx.x]);
  }
  cute::tma_descriptor_fence_release();  // the GEMM reads them through the tensormap proxy
}

// The A/B switches below are read once per process (each caller's static; EnvironmentSays in
// xla_plugin/common/environment.h).

// Tile order of the persistent group scheduler: along M (CUTLASS's default) unless
// JGG_SM90_RASTER=n, for tuning runs. Swizzle stays 1: without host problem shapes CUTLASS
// sizes its swizzle from a (sm_count x 1) grid, so any larger max_swizzle_size is ignored,
// and where it were not, each group's tile counts would be rounded up to it (padding tiles
// that compute nothing).
inline bool RasterAlongN() {
  static const bool value = EnvironmentSays("JGG_SM90_RASTER", "n");
  return value;
}

// Which wgrad GEMMs take their tiles on demand (dynamic_tiles_sm90.cuh): those whose
// contractions are uneven or long, unless JGG_SM90_WGRAD_TILES=static (none), =uneven (those
// uneven) or =demand (all).
inline OnDemand WgradTilesOnDemand() {
  static const OnDemand value = EnvironmentSays("JGG_SM90_WGRAD_TILES", "static")   ? OnDemand::kNever
                                : EnvironmentSays("JGG_SM90_WGRAD_TILES", "uneven") ? OnDemand::kUneven
                                : EnvironmentSays("JGG_SM90_WGRAD_TILES", "demand") ? OnDemand::kAlways
                                                                                    : OnDemand::kUnevenOrLong;
  return value;
}

// Which wgrad batch entries run their problems largest first (ragged_problems_sm90.cuh): those
// whose tiles would go on demand (with static tiles: those uneven or long), unless
// JGG_SM90_WGRAD_ORDER=groups (none).
inline OnDemand WgradLargestFirst() {
  static const OnDemand value = EnvironmentSays("JGG_SM90_WGRAD_ORDER", "groups") ? OnDemand::kNever
                                : WgradTilesOnDemand() == OnDemand::kNever        ? OnDemand::kUnevenOrLong
                                                                                  : WgradTilesOnDemand();
  return value;
}

// Whether the GEMM is launched as a programmatic dependent of its preparation (default), or,
// with JGG_SM90_PDL=0, after it the ordinary way: for A/B runs.
inline bool LaunchAfterPreparation() {
  static const bool value = !EnvironmentSays("JGG_SM90_PDL", "0");
  return value;
}

// Whether a GEMM may split its last round of tiles (tail_split_sm90.cuh): yes, unless
// JGG_SM90_TAIL_SPLIT=0, for A/B runs.
inline bool TailSplitAllowed() {
  static const bool value = !EnvironmentSays("JGG_SM90_TAIL_SPLIT", "0");
  return value;
}

// The scratch of G's tile scheduler: the flags of its split last round (a configuration that
// splits, a workspace with the region) or its tile counter (tiles on demand); none for a call
// of several GEMMs, whose later GEMMs keep CUTLASS's order (the preparation zeroes only the
// first's scratch).
template <class G>
SchedulerScratch SchedulerScratchOf(const GroupedLaunch& launch, int64_t count) {
  SchedulerScratch scratch;
  if (count > kProblemsPerGroupedGemm) return scratch;
  if (G::kTailSplit && launch.tail_split != nullptr && TailSplitAllowed())
    scratch.tail_split_flags = reinterpret_cast<int32_t*>(launch.tail_split);
  if (G::kTilesOnDemand && WgradTilesOnDemand() != OnDemand::kNever) {
    scratch.tile_counter = reinterpret_cast<unsigned long long*>(
        static_cast<char*>(launch.cutlass_workspace) + kCutlassWorkspaceBytes - kTileCounterBytes);
  }
  return scratch;
}

// The preparation kernel with the GEMM's shared-memory carveout, so an SM that ran it takes
// the GEMM's CTAs without reconfiguring its L1 / shared-memory split first.
// A preference, set once per process (on the device current then): the launch is correct
// either way, so a refusal is cleared rather than left for the launch's error check.
template <class Kernel>
void PreferSharedMemoryCarveout(Kernel* kernel) {
  static const bool once = [kernel] {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) != cudaSuccess)
      (void)cudaGetLastError();
    return true;
  }();
  (void)once;
}

// Sets `gemm` up for `count` problems from `arrays` on, and `tensormaps` to match.
template <class G>
cudaError_t InitializeGemm(typename G::Gemm& gemm, const ProblemArrays<G>& arrays,
                           int64_t count, const GroupedLaunch& launch,
                           ProblemTensormaps<G>& tensormaps, SchedulerScratch scratch) {
  typename G::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape.num_groups = static_cast<int>(count);
  args.problem_shape.problem_shapes = arrays.shapes;
  args.problem_shape.host_problem_shapes = nullptr;  // on device only
  if constexpr (G::kTailSplit) {
    args.problem_shape.flags = scratch.tail_split_flags;  // null: no split
    if (scratch.tail_split_flags != nullptr) {
      args.problem_shape.partials =
          reinterpret_cast<float4*>(launch.tail_split + kTailSplitFlagBytes);
    }
  }
  if constexpr (G::kTailSplit || G::kTilesOnDemand) {
    args.problem_shape.row_tiles_per_band = launch.row_tiles_per_band;
  }
  if constexpr (G::kTilesOnDemand) {
    args.problem_shape.tile_counter = scratch.tile_counter;  // null: CUTLASS's order
    args.problem_shape.when = WgradTilesOnDemand();
  }
  args.mainloop = {arrays.a, arrays.stride_a, arrays.b, arrays.stride_b};
  SetPlainEpilogue(args, arrays.d, arrays.stride_d);
  args.scheduler.max_swizzle_size = 1;
  args.scheduler.raster_order = RasterAlongN()
                                    ? cutlass::gemm::kernel::detail::RasterOrderOptions::AlongN
                                    : cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM;
  args.hw_info.device_id = launch.device;
  args.hw_info.sm_count = launch.sm_count;
  if (scratch.tile_counter != nullptr &&
      G::Gemm::get_workspace_size(args) > static_cast<size_t>(kCutlassWorkspaceBytes - kTileCounterBytes))
    return cudaErrorMemoryAllocation;  // CUTLASS's workspace would reach the tile counter
  if (cudaError_t e = InitializeCutlass(gemm, args, launch.cutlass_workspace, launch.stream);
      e != cudaSuccess)
    return e;
  tensormaps = {gemm.params().mainloop, gemm.params().epilogue};
  return cudaSuccess;
}

// Prepares the problems (PrepareProblemsKernel), then runs the grouped GEMM: one GEMM of
// up to kProblemsPerGroupedGemm problems, as launches of any size but the largest vmaps are.
template <class G, class Problems>
cudaError_t RunGrouped(const Problems& problems, const GroupedLaunch& launch) {
  if (problems.batch() == 0) return cudaSuccess;
  const int64_t count = problems.groups() * problems.batch();
  const ProblemArrays<G> arrays = ProblemArrays<G>::Carve(launch.problem_arguments, count);

  // CUTLASS's parameters first: the preparation writes descriptors of its TMA copies.
  typename G::Gemm gemm;
  ProblemTensormaps<G> tensormaps{};
  const int64_t first = std::min(count, kProblemsPerGroupedGemm);
  const SchedulerScratch scratch = SchedulerScratchOf<G>(launch, count);
  if (first > 0) {
    if (cudaError_t e = InitializeGemm<G>(gemm, arrays, first, launch, tensormaps, scratch);
        e != cudaSuccess)
      return e;
  }
  const dim3 grid(static_cast<unsigned>(PreparationBlocks(problems)),
                  static_cast<unsigned>(problems.batch()));
  PreferSharedMemoryCarveout(PrepareProblemsKernel<G, Problems>);
  PrepareProblemsKernel<G><<<grid, Problems::kPrepareThreads, 0, launch.stream>>>(
      problems, arrays, first, tensormaps, scratch);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;  // prepared (rows zeroed), nothing to multiply
  if (cudaError_t e = FromCutlass(gemm.run(launch.stream, /*cuda_adapter=*/nullptr,
                                           LaunchAfterPreparation()));
      e != cudaSuccess)
    return e;

  for (int64_t begin = first; begin < count; begin += kProblemsPerGroupedGemm) {
    const int64_t n = std::min(count - begin, kProblemsPerGroupedGemm);
    const ProblemArrays<G> next = arrays.From(begin);
    if (cudaError_t e = InitializeGemm<G>(gemm, next, n, launch, tensormaps, SchedulerScratch{});
        e != cudaSuccess)
      return e;
    const auto blocks =
        static_cast<unsigned>(CeilDiv(ProblemTensormaps<G>::kOperands * n, kTensormapThreads));
    WriteTensormapsKernel<G><<<blocks, kTensormapThreads, 0, launch.stream>>>(next, n, tensormaps);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e = FromCutlass(gemm.run(launch.stream)); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_CUH_
