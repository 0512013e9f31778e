// Scratch memory of the ragged GEMM handlers. Sized from static shapes only,
// at lowering time (Python asks the native module through workspace_bytes),
// and handed to the handler as an extra u8 result: a CUDA handler never
// allocates, so it stays capturable in a command buffer.
#ifndef JGG_XLA_PLUGIN_COMMON_WORKSPACE_H_
#define JGG_XLA_PLUGIN_COMMON_WORKSPACE_H_

#include <cstdint>

#include "xla_plugin/common/ragged_layout.h"

namespace jgg {

// One RaggedSchedule per batch entry: row_begin then tile_begin, each
// num_local_groups + 1 int64 values.
JGG_HOST_DEVICE inline int64_t ScheduleWords(int64_t num_local_groups) {
  return 2 * (num_local_groups + 1);
}

JGG_HOST_DEVICE inline RaggedSchedule ScheduleOfBatch(void* workspace, int64_t batch,
                                                      int64_t num_local_groups) {
  int64_t* base = static_cast<int64_t*>(workspace) + batch * ScheduleWords(num_local_groups);
  return {base, base + num_local_groups + 1};
}

inline int64_t RaggedWorkspaceBytes(int64_t batch, int64_t num_local_groups) {
  return batch * ScheduleWords(num_local_groups) * static_cast<int64_t>(sizeof(int64_t));
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_COMMON_WORKSPACE_H_
