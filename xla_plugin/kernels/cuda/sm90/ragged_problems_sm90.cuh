// How the canonical ragged GEMMs become CUTLASS grouped problems: one problem
// per (local group, batch entry), computed on the device from the group sizes in
// the launch before the GEMM (which also writes, for RaggedK, the row boundaries that the
// streamed kernel after the GEMM reads and, for RaggedM, zeroes the rows of no group). Each
// block of that launch computes the row boundaries of its own few groups from the group
// sizes (StageGroups).
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_

#include <type_traits>

#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cuda/ragged_schedule.cuh"
#include "xla_plugin/kernels/cuda/sm90/grouped_gemm_sm90.cuh"

namespace jgg::cuda::sm90 {

// The problems of the ragged GEMMs, in the protocol of PrepareProblemsKernel
// (grouped_gemm_sm90.cuh): problem g * batch + b is local group g of batch entry b.
template <class Problem>
struct RaggedProblems {
  static constexpr int kPrepareThreads = kScheduleThreads;
  Problem p;
  RaggedOperands o;

  __host__ __device__ int64_t batch() const { return p.batch; }
  __host__ __device__ int64_t groups() const { return p.num_local_groups; }
  // Problem index of local group g of batch entry b: group order.
  __device__ int64_t Position(int64_t g, int64_t b) const { return g * p.batch + b; }

  // The row boundaries of local groups [lo, hi] of batch entry b, for operator() below.
  __device__ void StageGroups(int64_t b, int64_t lo, int64_t hi) const {
    Slice& slice = StagedSlice();
    if (threadIdx.x == 0) slice.lo = lo;
    SliceRowBegins<kProblemsPerPreparationBlock>(Window(b), p.rows, lo, hi, slice.row_begin);
  }

 protected:
  struct Slice {
    int64_t lo;
    int64_t row_begin[kProblemsPerPreparationBlock + 1];
  };
  static __device__ Slice& StagedSlice() {
    __shared__ Slice slice;
    return slice;
  }
  // Rows [begin, end) of a staged local group.
  struct Rows {
    int64_t begin, end;
  };
  __device__ Rows RowsOf(int64_t g) const {
    const Slice& slice = StagedSlice();
    return {slice.row_begin[g - slice.lo], slice.row_begin[g + 1 - slice.lo]};
  }

  __device__ LocalWindow Window(int64_t b) const {
    return LocalWindowOf(o.group_sizes, o.group_offset, p.num_global_groups, p.num_local_groups, b);
  }
};

// RaggedM: problem (g, b) is lhs[b, rows of g] [m_g, K] . rhs[g, b] -> out[b, rows of g].
// A row-major; B row-major [K, N] or, with rhs_transposed, column-major [N, K]. Rows of
// no group are zeroed here, by all kPrepareParts blocks of the batch entry.
template <class T, class O>
struct RaggedMProblems : RaggedProblems<RaggedMProblem> {
  static constexpr int kPrepareParts = 32;  // blocks that zero the rows of no group

  __device__ void PrepareBatch(int64_t b, int64_t part, int64_t parts) const {
    ZeroUncoveredRows(this->p, this->o, sizeof(O), b, part, parts);
  }

  __device__ ProblemDescription operator()(int64_t g, int64_t b) const {
    const RaggedMProblem& p = this->p;
    const auto [begin, end] = this->RowsOf(g);
    const int64_t rows = end - begin;
    return {static_cast<int>(rows), static_cast<int>(p.n), static_cast<int>(p.k),
            static_cast<const T*>(this->o.lhs) + (b * p.rows + begin) * p.k,
            static_cast<const T*>(this->o.rhs) + (g * p.batch + b) * p.k * p.n,
            static_cast<O*>(this->o.out) + (b * p.rows + begin) * p.n};
  }
};

// RaggedK: problem (g, b) is lhs[b, rows of g]^T [P, m_g] . rhs[b, rows of g] [m_g, N]
// -> out[g, b] [P, N]. A is lhs read column-major in place. A group of at most
// `left_rows` rows gets an empty problem (M = 0: no tiles) and is written by the
// caller: empty groups always are, since a GEMM with K = 0 has no defined
// epilogue in CUTLASS.
//
// A batch entry's problems run in order of rows, most first (ties in group order), where its
// contractions and `largest_first` send its tiles on demand (TilesGoOnDemand,
// dynamic_tiles_sm90.cuh): a wgrad tile's mainloop runs over its group's rows, and a
// persistent scheduler hands out tiles in problem order, so in group order a skewed routing's
// few long tiles can fall late and leave most CTAs idle at the end, where largest first puts
// them in the first rounds and ends on short tiles. An even routing of short contractions
// keeps group order.
template <class T, class O>
struct RaggedKProblems : RaggedProblems<RaggedKProblem> {
  // Each group's rank is a scan of the batch entry's group lengths in shared memory, G
  // broadcast reads by each thread that writes one of its problems: about a microsecond at
  // this many groups; larger calls keep group order.
  static constexpr int kMaxOrderedGroups = 1024;
  int left_rows;
  OnDemand largest_first;

  // What StageRanking stages for Position, in the block's shared memory.
  struct Ranking {
    int32_t row_begin[kMaxOrderedGroups + 1];
    int32_t rows[kMaxOrderedGroups];  // each group's
    uint32_t with_tiles, sum, longest;  // over the groups with tiles (rows > left_rows)
    bool ordered;                       // largest first
  };
  static __device__ Ranking& Staged() {
    __shared__ Ranking ranking;
    return ranking;
  }

  static constexpr int kPrepareParts = 1;

  __device__ bool MayOrder() const {
    return largest_first != OnDemand::kNever && this->p.num_local_groups <= kMaxOrderedGroups;
  }

  // The row boundaries of the schedule (RaggedSchedule::row_begin; tile_begin is not
  // written), which the streamed kernel after the GEMM reads: CUTLASS tiles each problem
  // itself.
  __device__ void PrepareBatch(int64_t b, int64_t, int64_t) const {
    const RaggedSchedule s = ScheduleOfBatch(this->o.workspace, b, this->p.num_local_groups);
    ForEachRowBegin(this->Window(b), this->p.num_local_groups, this->p.rows,
                    [&](int64_t j, int64_t row) { s.row_begin[j] = row; });
  }

  // The rows of groups [lo, hi]: where the problems may be ordered, among the boundaries of
  // every group that StageRanking stages to order them.
  __device__ void StageGroups(int64_t b, int64_t lo, int64_t hi) const {
    if (MayOrder()) {
      StageRanking(b);
    } else {
      RaggedProblems<RaggedKProblem>::StageGroups(b, lo, hi);
    }
  }
  __device__ Rows RowsOf(int64_t g) const {
    if (!MayOrder()) return RaggedProblems<RaggedKProblem>::RowsOf(g);
    const Ranking& r = Staged();
    return {r.row_begin[g], r.row_begin[g + 1]};
  }

  // Stages the batch entry's row boundaries and group lengths and decides its order from them.
  __device__ void StageRanking(int64_t b) const {
    Ranking& r = Staged();
    if (threadIdx.x == 0) r.with_tiles = r.sum = r.longest = 0;
    // Lengths <= rows <= INT32_MAX (LaunchRaggedK), so boundaries and sums fit 32 bits.
    ForEachRowBegin(this->Window(b), this->p.num_local_groups, this->p.rows,
                    [&](int64_t j, int64_t row) { r.row_begin[j] = static_cast<int32_t>(row); });
    __syncthreads();  // the boundaries and the zeroed totals, before the reads and sums below
    uint32_t with_tiles = 0, sum = 0, longest = 0;
    for (int64_t j = threadIdx.x; j < this->p.num_local_groups; j += blockDim.x) {
      const uint32_t rows = static_cast<uint32_t>(r.row_begin[j + 1] - r.row_begin[j]);
      r.rows[j] = static_cast<int32_t>(rows);
      if (rows > static_cast<uint32_t>(left_rows)) {
        ++with_tiles;
        sum += rows;
        longest = rows > longest ? rows : longest;
      }
    }
    with_tiles = __reduce_add_sync(0xffffffffu, with_tiles);
    sum = __reduce_add_sync(0xffffffffu, sum);
    longest = __reduce_max_sync(0xffffffffu, longest);
    if (threadIdx.x % 32 == 0) {
      atomicAdd(&r.with_tiles, with_tiles);
      atomicAdd(&r.sum, sum);
      atomicMax(&r.longest, longest);
    }
    __syncthreads();  // the totals, before thread 0 reads them
    if (threadIdx.x == 0) r.ordered = TilesGoOnDemand(largest_first, r.with_tiles, r.sum, r.longest);
    // PrepareProblemsKernel syncs the block before Position.
  }

  __device__ int64_t Position(int64_t g, int64_t b) const {
    const int64_t in_group_order = RaggedProblems<RaggedKProblem>::Position(g, b);
    if (!MayOrder() || !Staged().ordered) return in_group_order;
    const Ranking& r = Staged();
    const int32_t rows = r.rows[g];
    const int groups = static_cast<int>(this->p.num_local_groups);
    int rank = 0;
#pragma unroll 8
    for (int j = 0; j < groups; ++j) rank += r.rows[j] > rows || (r.rows[j] == rows && j < g);
    return rank * this->p.batch + b;
  }

  __device__ ProblemDescription operator()(int64_t g, int64_t b) const {
    const RaggedKProblem& p = this->p;
    const auto [begin, end] = this->RowsOf(g);
    const int64_t rows = end - begin;
    const int m = rows <= left_rows ? 0 : static_cast<int>(p.p);
    return {m, static_cast<int>(p.n), static_cast<int>(rows),
            static_cast<const T*>(this->o.lhs) + (b * p.rows + begin) * p.p,
            static_cast<const T*>(this->o.rhs) + (b * p.rows + begin) * p.n,
            static_cast<O*>(this->o.out) + (g * p.batch + b) * p.p * p.n};
  }
};

template <Tile> struct TileConfigOf;
template <> struct TileConfigOf<Tile::kCoop128x256> { using type = Cooperative128x256; };
template <> struct TileConfigOf<Tile::kPingpong64x128> { using type = Pingpong64x128; };

// B is the weight: row-major [K, N] for the forward, column-major (the forward's weight read
// transposed in place) for dgrad.
template <ElementType kIn, ElementType kOut, Tile kTile, bool kRhsTransposed>
cudaError_t RaggedM(const RaggedMProblem& p, const RaggedOperands& o, const GroupedLaunch& l) {
  using LayoutB = std::conditional_t<kRhsTransposed, cutlass::layout::ColumnMajor,
                                     cutlass::layout::RowMajor>;
  using G = GroupedGemm<typename TileConfigOf<kTile>::type, typename CutlassElement<kIn>::type,
                        typename CutlassElement<kOut>::type, cutlass::layout::RowMajor, LayoutB>;
  return RunGrouped<G>(RaggedMProblems<typename G::A, typename G::D>{{p, o}}, l);
}

template <ElementType kIn, ElementType kOut>
cudaError_t RaggedK(const RaggedKProblem& p, const RaggedOperands& o, const GroupedLaunch& l,
                    int left_rows) {
  using G = GroupedGemm<Cooperative128x256Cluster2x1, typename CutlassElement<kIn>::type,
                        typename CutlassElement<kOut>::type, cutlass::layout::ColumnMajor,
                        cutlass::layout::RowMajor>;
  return RunGrouped<G>(
      RaggedKProblems<typename G::A, typename G::D>{{p, o}, left_rows, WgradLargestFirst()}, l);
}

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_
