// Scratch memory of the ragged GEMM handlers. Sized from static shapes only,
// at lowering time (Python asks the native module through workspace_bytes),
// and handed to the handler as an extra u8 result: a CUDA handler never
// allocates, so it stays capturable in a command buffer.
//
// Layout (each region 256-byte aligned):
//   [ schedules: one RaggedSchedule per batch entry                          ]
//   [ problem arrays: per (group, batch) problem shape, pointers and strides  ]
//   [ CUTLASS kernel workspace (TMA descriptors; its last 256 bytes a counter) ]
//   [ tail split: flags and partial tiles of the GEMM's split last round      ]
// The last three serve only the tensor-core CUDA path; the size is the same on
// every platform so that one lowering (and one exported artifact) fits all.
// The tail split region is optional: artifacts exported before it existed
// (2026-11-28) end their workspace before it, and their GEMMs do not split.
#ifndef JGG_XLA_PLUGIN_COMMON_WORKSPACE_H_
#define JGG_XLA_PLUGIN_COMMON_WORKSPACE_H_

#include <cstdint>

#include "xla_plugin/common/ragged_layout.h"

namespace jgg {

inline constexpr int64_t kWorkspaceAlignment = 256;
// Upper bound of what one grouped problem's CUTLASS arguments take: shape
// (3 x int32), four pointers, four strides (at most 3 x int64 each).
inline constexpr int64_t kProblemArgumentBytes = 192;
// Upper bound of CUTLASS's own grouped-GEMM workspace: 512 B of TMA
// descriptors per SM (67,584 B measured at 132 SMs), for up to 1024 SMs.
inline constexpr int64_t kCutlassWorkspaceBytes = 512 * 1024;
// The Hopper grouped GEMM keeps there the TMA descriptors of A, B and D of each of
// its problems instead (128 B each; kernels/cuda/sm90/group_tensormaps_sm90.cuh):
// those of 1024 problems, so a call of more problems runs as several GEMMs.
inline constexpr int64_t kTensormapBytesPerProblem = 3 * 128;
inline constexpr int64_t kProblemsPerGroupedGemm = 1024;
static_assert(kProblemsPerGroupedGemm * kTensormapBytesPerProblem <= kCutlassWorkspaceBytes * 3 / 4,
              "room for the descriptors and CUTLASS's tile scheduler");
// The last bytes of that region, which CUTLASS's workspace never reaches (the GEMM's setup
// checks): the counter of wgrad's tiles on demand (sm90/dynamic_tiles_sm90.cuh).
inline constexpr int64_t kTileCounterBytes = 256;

JGG_HOST_DEVICE inline int64_t AlignUp(int64_t bytes) {
  return CeilDiv(bytes, kWorkspaceAlignment) * kWorkspaceAlignment;
}

// One RaggedSchedule per batch entry: row_begin then tile_begin, each
// num_local_groups + 1 int64 values.
JGG_HOST_DEVICE inline int64_t ScheduleWords(int64_t num_local_groups) {
  return 2 * (num_local_groups + 1);
}

JGG_HOST_DEVICE inline int64_t ScheduleBytes(int64_t batch, int64_t num_local_groups) {
  return AlignUp(batch * ScheduleWords(num_local_groups) * static_cast<int64_t>(sizeof(int64_t)));
}

JGG_HOST_DEVICE inline RaggedSchedule ScheduleOfBatch(void* workspace, int64_t batch,
                                                      int64_t num_local_groups) {
  int64_t* base = static_cast<int64_t*>(workspace) + batch * ScheduleWords(num_local_groups);
  return {base, base + num_local_groups + 1};
}

JGG_HOST_DEVICE inline int64_t ProblemArgumentsBytes(int64_t batch, int64_t num_local_groups) {
  return AlignUp(batch * num_local_groups * kProblemArgumentBytes);
}

inline char* ProblemArgumentsRegion(void* workspace, int64_t batch, int64_t num_local_groups) {
  return static_cast<char*>(workspace) + ScheduleBytes(batch, num_local_groups);
}

inline char* CutlassWorkspaceRegion(void* workspace, int64_t batch, int64_t num_local_groups) {
  return ProblemArgumentsRegion(workspace, batch, num_local_groups) +
         ProblemArgumentsBytes(batch, num_local_groups);
}

// What a handler needs at the least (the workspace of artifacts exported before the tail
// split region).
inline int64_t RequiredRaggedWorkspaceBytes(int64_t batch, int64_t num_local_groups) {
  return ScheduleBytes(batch, num_local_groups) + ProblemArgumentsBytes(batch, num_local_groups) +
         kCutlassWorkspaceBytes;
}

// The tail split (kernels/cuda/sm90/tail_split_sm90.cuh): a flag per split tile, then f32
// partial tiles of 128 x 256 (a tile's accumulators, in the order of its consumer threads).
inline constexpr int64_t kTailSplitFlags = 64;
inline constexpr int64_t kTailSplitFlagBytes = 256;
inline constexpr int64_t kTailSplitSlots = 64;
inline constexpr int64_t kTailSplitSlotBytes = 128 * 256 * 4;
inline constexpr int64_t kTailSplitBytes = kTailSplitFlagBytes + kTailSplitSlots * kTailSplitSlotBytes;
static_assert(kTailSplitFlags * 4 <= kTailSplitFlagBytes, "flags are int32");

// What lowerings of ragged_m ask for (workspace_bytes; ragged_k's GEMM never splits, and its
// lowerings ask for the required bytes only).
inline int64_t RaggedWorkspaceBytes(int64_t batch, int64_t num_local_groups) {
  return RequiredRaggedWorkspaceBytes(batch, num_local_groups) + kTailSplitBytes;
}

// The tail split region of a workspace of `bytes`, or null where it ends before it.
inline char* TailSplitRegion(void* workspace, int64_t bytes, int64_t batch,
                             int64_t num_local_groups) {
  if (bytes < RaggedWorkspaceBytes(batch, num_local_groups)) return nullptr;
  return static_cast<char*>(workspace) + RequiredRaggedWorkspaceBytes(batch, num_local_groups);
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_COMMON_WORKSPACE_H_
