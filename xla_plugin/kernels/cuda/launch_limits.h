// CUDA's launch limits that the dispatchers check before a launch (a wrapped grid size would
// launch too few blocks), and the extent CUTLASS's int problem shapes hold.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_LAUNCH_LIMITS_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_LAUNCH_LIMITS_H_

#include <cstdint>

namespace jgg::cuda {

inline constexpr int64_t kMaxGridX = 2147483647;  // blocks along a grid's x
inline constexpr int64_t kMaxGridYZ = 65535;      // blocks along its y or z
inline constexpr int64_t kMaxInt32 = 2147483647;  // an int extent (CUTLASS's problem shapes)

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_LAUNCH_LIMITS_H_
