// What the dispatchers need to know of the current GPU: host queries only (no stream work, so
// launches stay capturable), cached per device ordinal since they cost microseconds per call.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_DEVICE_INFO_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_DEVICE_INFO_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

namespace jgg::cuda {

struct DeviceInfo {
  int device;
  int sm_count;
  int major, minor;  // compute capability
};

cudaError_t QueryDevice(DeviceInfo* info);

inline constexpr int kMaxDevices = 64;  // device ordinals the per-device caches cover

// Opts `kernel` in to `bytes` of dynamic shared memory on `device` (the current one). The
// attribute belongs to the kernel's copy on one device (a process may drive several), so it is
// set once per device and kernel (a host call; later calls read a bit of `opted_in`).
template <typename Kernel>
cudaError_t AllowSharedBytes(Kernel kernel, int bytes, int device, std::atomic<uint64_t>& opted_in) {
  const uint64_t bit = device >= 0 && device < kMaxDevices ? uint64_t{1} << device : 0;
  if (bit != 0 && (opted_in.load(std::memory_order_relaxed) & bit) != 0) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) opted_in.fetch_or(bit, std::memory_order_relaxed);
  return e;
}

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_DEVICE_INFO_H_
