// What the dispatchers need to know of the current GPU: host queries only (no stream work, so
// launches stay capturable), cached per device ordinal since they cost microseconds per call.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_DEVICE_INFO_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_DEVICE_INFO_H_

#include <cuda_runtime_api.h>

namespace jgg::cuda {

struct DeviceInfo {
  int device;
  int sm_count;
  int major, minor;  // compute capability
};

cudaError_t QueryDevice(DeviceInfo* info);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_DEVICE_INFO_H_
