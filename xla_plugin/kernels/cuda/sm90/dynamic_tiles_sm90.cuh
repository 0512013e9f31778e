// Wgrad's tiles handed out in order of demand.
//
// A wgrad tile's mainloop runs over its group's rows, so under a skewed routing its tiles
// differ in length by orders of magnitude (qwen3-30b-zipf: 17800 rows in the largest of 128
// groups, a few dozen in the smallest). CUTLASS's persistent group scheduler gives CTA c the
// tiles c, c + W, c + 2W, ... of the W CTAs' grid whatever they cost, so the CTAs that drew
// the long tiles finish long after the others. Here each cluster's next tile is the next
// ticket of a counter in the workspace (zeroed by the preparation): the problems run largest
// first (ragged_problems_sm90.cuh), and each cluster takes the next tile when it is ready for
// one, so the long tiles start in the first rounds and the short ones fill in around them
// (list scheduling, longest first). Forward and dgrad keep the static order: their tiles
// are equal, and their L2 reuse rests on the tiles in flight being consecutive
// (docs/PERFORMANCE.md, 2026-11-28). So does a wgrad whose contractions are even and short
// (TilesGoOnDemand below): there the ticket costs about as much as it balances.
//
// The two CTAs of a 2x1 cluster must compute the same tile (their operands arrive by
// multicast). Rank 0's scheduler warp takes the ticket and writes it, tagged with its
// sequence number, into the mailbox of each other CTA of the cluster (distributed shared
// memory, release); their scheduler warps wait for the tag (acquire). A CTA's scheduler warp
// runs at most kLookahead tiles ahead of its own consumers, and the cluster's CTAs consume in
// lockstep (each multicast stage waits for every CTA's consumers), so rank 0 is never more than
// about two lookaheads ahead of another CTA's scheduler warp: kMailboxSlots is ample.
//
// The lookahead: CUTLASS's grouped kernel lets its scheduler warp run as many tiles ahead as
// its scheduler's pipeline has stages (8 by default). Dynamic tickets taken that early would
// commit a cluster to tiles long before it is ready for them, so this scheduler has kLookahead
// stages: the kernel takes its pipeline's stages from the scheduler type.
//
// The scheduler is swapped in through the problem shape type, as the tail split's is
// (tail_split_sm90.cuh); tile_counter == nullptr keeps CUTLASS's static order, and so do
// contractions too even and short for `when`, decided by the scheduler warp from the problems the
// preparation wrote (the same on every CTA).
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_DYNAMIC_TILES_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_DYNAMIC_TILES_SM90_CUH_

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "xla_plugin/kernels/cuda/sm90/group_scheduler_sm90.cuh"

namespace jgg::cuda::sm90 {

// Which wgrad GEMMs hand their tiles out on demand: none (JGG_SM90_WGRAD_TILES=static), those
// whose contractions are uneven (=uneven), those whose contractions are uneven or long (the
// default), or all (=demand). The overrides are for A/B runs.
enum class OnDemand { kNever, kUneven, kUnevenOrLong, kAlways };

// Over the problems with tiles, uneven: the longest contraction more than 1.5 times the mean;
// long: a mean of at least kLongContraction rows. The uniform anchors' routings lie at
// 1.03-1.11 times the mean. Where their tiles are short (qwen3-30b, 512 rows: 8 k-tiles) the
// ticket and the mailbox cost 0.4-1.2% against the static order in group order; where they
// are long (deepseek-ep8 1024 rows, mixtral 2048) they cost little beside a tile, and
// balancing the last rounds gained 0.3-2.1%. The Zipf anchors' routings lie at 3.4-35, where
// tiles on demand, largest first, gain up to 20% (docs/PERFORMANCE.md, 2026-11-30).
inline constexpr int64_t kLongContraction = 1024;

CUTLASS_HOST_DEVICE constexpr bool TilesGoOnDemand(OnDemand when, int64_t problems, int64_t sum,
                                                   int64_t longest) {
  const bool uneven = 2 * longest * problems > 3 * sum;
  const bool long_tiles = sum >= kLongContraction * problems;
  return when == OnDemand::kAlways || (when == OnDemand::kUneven && uneven) ||
         (when == OnDemand::kUnevenOrLong && (uneven || long_tiles));
}

template <class Underlying>
struct DynamicTilesProblemShape : BandedProblemShape<Underlying> {
  unsigned long long* tile_counter = nullptr;  // zeroed by the preparation; null: static order
  OnDemand when = OnDemand::kNever;
};

inline constexpr int kLookahead = 2;
inline constexpr int kMailboxSlots = 32;
// Shared memory the kernel asks for beyond CUTLASS's storage (GroupedGemm's kExtraSharedBytes,
// grouped_gemm_sm90.cuh).
inline constexpr int kMailboxBytes = kMailboxSlots * 8;

// This CTA's mailbox: the last kMailboxBytes of its dynamic shared memory (past CUTLASS's
// storage, whose swizzled stages need its start to stay 1024-byte aligned).
CUTLASS_DEVICE uint32_t MailboxAddress(int slot) {
  extern __shared__ char dynamic_shared[];
  uint32_t bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return static_cast<uint32_t>(__cvta_generic_to_shared(dynamic_shared)) + bytes - kMailboxBytes +
         8u * static_cast<uint32_t>(slot);
}

template <class ProblemShape, int kStages>
struct DynamicTileScheduler
    : cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Group<ProblemShape, kLookahead> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Group<ProblemShape, kLookahead>;
  using typename Base::Params;
  using typename Base::WorkTileInfo;

  DynamicTileScheduler() = default;

  // Every thread of the CTA, before the kernel's cluster barrier: the mailbox starts empty
  // (tags count from 1) before any other CTA of the cluster can write to it.
  CUTLASS_DEVICE DynamicTileScheduler(Params const& params, typename Base::SchedulerResponse* response)
      : Base(params, response) {
    if (threadIdx.x < kMailboxSlots) {
      asm volatile("st.shared.u64 [%0], 0;" ::"r"(MailboxAddress(threadIdx.x)) : "memory");
      asm volatile("fence.acq_rel.cluster;" ::: "memory");
    }
  }

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape cluster) {
    grid_ = uint64_t(gridDim.x) * gridDim.y * gridDim.z;
    cluster_ctas_ = uint64_t(cute::size(cluster));
    unit_ = FirstLinearUnit(this->scheduler_params.raster_order_);
    offset_in_cluster_ = unit_ % cluster_ctas_;
    return Tile(unit_);
  }

  // The scheduler warp, for each work tile after the CTA's first: CUTLASS's static sequence
  // (the CTA's first tile plus multiples of the grid) or the cluster's next ticket.
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto advance_to_next_work(Pipeline& pipeline, PipelineState state,
                                           uint32_t advance_count = 1) {
    const bool on_demand = TilesOnDemand();
    pipeline.producer_acquire(state);  // first: a ticket is taken when a slot is free
    if (on_demand) {
      // Tickets count clusters past the first round; a cluster's CTAs keep their offsets in it.
      const uint64_t ticket = ClusterTicket(this->scheduler_params.problem_shapes_.tile_counter);
      unit_ = grid_ + ticket * cluster_ctas_ + offset_in_cluster_;
    } else {
      unit_ += grid_ * advance_count;
    }
    const WorkTileInfo work = Tile(unit_);
    Respond(pipeline, state, this->response_ptr_, work);
    return cute::make_tuple(work, true);
  }

 private:
  // Tile t of the GEMM, in the order of its group's bands.
  CUTLASS_DEVICE WorkTileInfo Tile(uint64_t t) {
    return InRowBands(this->get_current_work_for_linear_idx(t), this->scheduler_params);
  }

  // Whether this GEMM's tiles go on demand; decided at the scheduler warp's first call (the
  // whole warp), from the problems the preparation wrote.
  CUTLASS_DEVICE bool TilesOnDemand() {
    if (on_demand_ < 0) {
      const auto& shapes = this->scheduler_params.problem_shapes_;
      int64_t problems = 0, sum = 0;
      int longest = 0;
      if (shapes.tile_counter != nullptr) {
        ForEachProblemWithTiles(shapes, [&](int, int, int k) {
          ++problems;
          sum += k;
          longest = k > longest ? k : longest;
        });
      }
#pragma unroll
      for (int d = 16; d > 0; d /= 2) {
        problems += __shfl_xor_sync(0xffffffffu, problems, d);
        sum += __shfl_xor_sync(0xffffffffu, sum, d);
        longest = max(longest, __shfl_xor_sync(0xffffffffu, longest, d));
      }
      on_demand_ = problems > 0 && TilesGoOnDemand(shapes.when, problems, sum, longest);
    }
    return on_demand_ > 0;
  }

  // The cluster's next ticket, the same on each of its CTAs; the whole scheduler warp.
  CUTLASS_DEVICE uint64_t ClusterTicket(unsigned long long* counter) {
    const int slot = static_cast<int>(sequence_ % kMailboxSlots);
    const uint64_t tag = (sequence_ + 1) << 32;  // tickets stay below 2^32 (int tile indices)
    ++sequence_;
    const bool lane0 = threadIdx.x % 32 == 0;
    uint64_t ticket = 0;
    if (cute::block_rank_in_cluster() == 0) {
      if (lane0) {
        ticket = atomicAdd(counter, 1ull);
        for (uint32_t peer = 1; peer < cluster_ctas_; ++peer) {
          uint32_t remote;
          asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                       : "=r"(remote) : "r"(MailboxAddress(slot)), "r"(peer));
          asm volatile("st.release.cluster.shared::cluster.u64 [%0], %1;"
                       ::"r"(remote), "l"(tag | ticket) : "memory");
        }
      }
    } else if (lane0) {
      uint64_t word;
      // Rank 0 may be a whole tile from taking it: poll gently, beside the CTA's MMAs.
      while (true) {
        asm volatile("ld.acquire.cluster.shared::cta.u64 %0, [%1];"
                     : "=l"(word) : "r"(MailboxAddress(slot)) : "memory");
        if ((word & ~uint64_t(0xFFFFFFFFu)) == tag) break;
        __nanosleep(64);
      }
      ticket = word & 0xFFFFFFFFu;
    }
    return __shfl_sync(0xffffffffu, ticket, 0);
  }

  uint64_t grid_ = 1, cluster_ctas_ = 1, offset_in_cluster_ = 0, sequence_ = 0, unit_ = 0;
  int on_demand_ = -1;  // -1: not yet decided
};

}  // namespace jgg::cuda::sm90

// CUTLASS's scheduler choice for the grouped SM90 kernels, for our problem shape (see
// tail_split_sm90.cuh).
namespace cutlass::gemm::kernel::detail {
template <class TileShape, class ClusterShape, uint32_t kStages, class Underlying>
struct TileSchedulerSelector<GroupScheduler, arch::Sm90, TileShape, ClusterShape, kStages,
                             jgg::cuda::sm90::DynamicTilesProblemShape<Underlying>> {
  using Scheduler = jgg::cuda::sm90::DynamicTileScheduler<
      jgg::cuda::sm90::DynamicTilesProblemShape<Underlying>, kStages>;
};
}  // namespace cutlass::gemm::kernel::detail

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_DYNAMIC_TILES_SM90_CUH_
