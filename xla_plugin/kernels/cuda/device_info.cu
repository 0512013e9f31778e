#include "xla_plugin/kernels/cuda/device_info.h"

#include <atomic>
#include <utility>

namespace jgg::cuda {

cudaError_t QueryDevice(DeviceInfo* info) {
  // sm_count 0: not asked yet. Each value is written before the count that publishes it.
  static std::atomic<int> sm_count[kMaxDevices], major[kMaxDevices], minor[kMaxDevices];
  if (cudaError_t e = cudaGetDevice(&info->device); e != cudaSuccess) return e;
  const int d = info->device;
  if (d < 0 || d >= kMaxDevices) return cudaErrorInvalidDevice;
  if (sm_count[d].load() == 0) {
    int sms = 0, cc_major = 0, cc_minor = 0;
    for (auto [value, attribute] : {std::pair{&sms, cudaDevAttrMultiProcessorCount},
                                    std::pair{&cc_major, cudaDevAttrComputeCapabilityMajor},
                                    std::pair{&cc_minor, cudaDevAttrComputeCapabilityMinor}}) {
      if (cudaError_t e = cudaDeviceGetAttribute(value, attribute, d); e != cudaSuccess) return e;
    }
    major[d].store(cc_major);
    minor[d].store(cc_minor);
    sm_count[d].store(sms);
  }
  info->sm_count = sm_count[d].load();
  info->major = major[d].load();
  info->minor = minor[d].load();
  return cudaSuccess;
}

}  // namespace jgg::cuda
