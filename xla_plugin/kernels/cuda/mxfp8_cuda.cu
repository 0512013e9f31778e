// Launches of the grouped MXFP8 kernels (mxfp8_kernels.cuh, mxfp8_wide_kernels.cuh,
// mxfp8_small_kernels.cuh) on the caller's stream.
#include "xla_plugin/kernels/cuda/mxfp8_cuda.h"

#include <atomic>
#include <cstdlib>

#include "xla_plugin/kernels/cuda/device_info.h"
#include "xla_plugin/kernels/cuda/launch_limits.h"
#include "xla_plugin/kernels/cuda/mxfp8_launch_config.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_small_kernels.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_wide_kernels.cuh"

namespace jgg::cuda {
namespace {

using namespace mxfp8_kernels;  // NOLINT: the kernels, grids and dispatch of this op

// The current device (device_info.h); device -1 if the runtime cannot say (the error is
// cleared: the launch reports its own errors).
DeviceInfo CurrentDevice() {
  DeviceInfo info{};
  if (QueryDevice(&info) != cudaSuccess) {
    cudaGetLastError();
    info.device = -1;
  }
  return info;
}

// CTAs of `kernel` that fit on `gpu` at once with `threads` threads each (0 if the
// runtime cannot say: then one CTA per job). Host queries only (no stream work), so the launch
// stays capturable in command buffers. Cached per device and CTA width in the kernel's own
// `cache` (0: not asked yet): the queries cost microseconds, as much as a small call's kernel.
constexpr int kWidths = kMaxThreads / 32;
using ResidentCache = std::atomic<int64_t>[kMaxDevices][kWidths];

template <typename Kernel>
int64_t ResidentCtas(Kernel kernel, int threads, int shared_bytes, const DeviceInfo& gpu,
                     ResidentCache& cache) {
  const int device = gpu.device;
  if (device < 0) return 0;
  const int width = threads / 32 - 1;
  const bool cached = device < kMaxDevices && width >= 0 && width < kWidths;
  if (cached) {
    const int64_t known = cache[device][width].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared_bytes) !=
      cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const int64_t resident = static_cast<int64_t>(gpu.sm_count) * per_sm;
  if (cached) cache[device][width].store(resident, std::memory_order_relaxed);
  return resident;
}

// JGG_MXFP8_STRIPS=1 keeps every call on the 8-byte strip kernels (measurements of the two
// kernel families in one process).
bool WideAllowed() {
  static const bool allowed = [] {
    const char* value = std::getenv("JGG_MXFP8_STRIPS");
    return value == nullptr || value[0] != '1';
  }();
  return allowed;
}

// Calls of at most this many bytes of high-precision data (quantize's input, dequantize's
// output) take the small kernels where they serve: where the persistent kernels' start (group
// prefix sums, job counter, a wave of CTAs) outweighs their copy stages. Kernel times against
// size (H200, 2026-11-29, tools/device/mxfp8_small_crossover.py): one-orientation quantize ties
// at 8 MB and loses from 10; "both" and dequantize stay ahead to 12 MB and tie or lose at 16.
// JGG_MXFP8_SMALL=0 keeps every call on the persistent kernels, =1 sends every call they serve
// to them (measurements of both in one process).
constexpr int64_t kSmallCallBytes = int64_t{8} << 20;
constexpr int64_t kSmallCallBytesBothOrDequantize = int64_t{12} << 20;

bool TakesSmallKernels(const GroupedShape& s, int elem_bytes, int64_t limit_bytes) {
  static const int forced = [] {
    const char* value = std::getenv("JGG_MXFP8_SMALL");
    return value == nullptr ? -1 : value[0] == '1' ? 1 : 0;
  }();
  if (forced >= 0) return forced == 1;
  return mxfp8::DataElements(s) * elem_bytes <= limit_bytes;
}

// Launches a small kernel (mxfp8_small_kernels.cuh) over `grid`: no job counter, no dynamic
// shared memory.
template <typename Kernel, typename... Args>
cudaError_t LaunchSmall(Kernel kernel, const Grid& grid, cudaStream_t stream, Args... args) {
  if (grid.ctas == 0) return cudaSuccess;
  if (grid.ctas > kMaxGridX) return cudaErrorInvalidConfiguration;
  kernel<<<grid.ctas, kSmallThreads, 0, stream>>>(grid, args...);
  return cudaGetLastError();
}

struct KernelState {  // one per kernel instantiation
  ResidentCache resident;
  std::atomic<uint64_t> shared_opted_in{0};  // a bit per device
};

// Launches `kernel` over grid's jobs: one wave of CTAs taking jobs from the counter, zeroed
// first (a memset node when captured), or each CTA its static share where the call has no
// counter or the kernel cannot use it. Wide kernels take their copy stages, `shared_bytes`, as
// dynamic shared memory (static and dynamic together pass the 48 KB a kernel gets without
// opting in).
template <typename Kernel, typename... Args>
cudaError_t LaunchJobs(Kernel kernel, Grid& grid, int shared_bytes,
                       unsigned long long* job_counter, KernelState& state, cudaStream_t stream,
                       Args... args) {
  const DeviceInfo gpu = CurrentDevice();
  if (shared_bytes > 0) {
    const cudaError_t e = AllowSharedBytes(kernel, shared_bytes, gpu.device, state.shared_opted_in);
    if (e != cudaSuccess) return e;
  }
  const bool dynamic = DynamicJobs(grid, job_counter);
  if (dynamic) {
    const cudaError_t e = cudaMemsetAsync(job_counter, 0, sizeof(*job_counter), stream);
    if (e != cudaSuccess) return e;
  }
  SetCtas(grid, ResidentCtas(kernel, grid.threads, shared_bytes, gpu, state.resident), dynamic);
  kernel<<<grid.ctas, grid.threads, shared_bytes, stream>>>(grid, args...);
  return cudaGetLastError();
}

struct QuantizeLaunch {
  const mxfp8::QuantizeProblem& p;
  const mxfp8::QuantizeOperands& o;
  cudaStream_t stream;

  template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
  cudaError_t Run() {
    const int small_chunk = SmallQuantizeChunk(p, o, sizeof(In));
    const int64_t small_limit = kRow && kCol ? kSmallCallBytesBothOrDequantize : kSmallCallBytes;
    if (small_chunk > 0 && TakesSmallKernels(p.shape, sizeof(In), small_limit)) {
      return LaunchSmall(QuantizeSmallKernel<In, kRow, kCol, kFormat>,
                         SmallGrid(p.shape, small_chunk, /*scale_words=*/true), stream, o,
                         p.swizzled);
    }
    Grid grid = QuantizeGrid(p, o, sizeof(In), WideAllowed());
    if (grid.jobs == 0) return cudaSuccess;
    static KernelState wide_state, strip_state;
    if (grid.wide) {
      return LaunchJobs(QuantizeWideKernel<In, kRow, kCol, kFormat>, grid, WideStagesBytes(16),
                        o.job_counter, wide_state, stream, o, p.swizzled);
    }
    return LaunchJobs(QuantizeKernel<In, kRow, kCol, kFormat>, grid, 0, o.job_counter,
                      strip_state, stream, o, p.swizzled);
  }
};

struct DequantizeLaunch {
  const mxfp8::DequantizeProblem& p;
  const mxfp8::DequantizeOperands& o;
  cudaStream_t stream;

  template <typename Out, Fp8Format kFormat>
  cudaError_t Run() {
    const int small_chunk = SmallDequantizeChunk(p, o);
    if (small_chunk > 0 &&
        TakesSmallKernels(p.shape, sizeof(Out), kSmallCallBytesBothOrDequantize)) {
      const Grid grid = SmallGrid(p.shape, small_chunk, /*scale_words=*/false);
      if (small_chunk == 16) {
        return LaunchSmall(DequantizeSmallKernel<Out, kFormat, 16>, grid, stream, o, p.colwise,
                           p.swizzled);
      }
      return LaunchSmall(DequantizeSmallKernel<Out, kFormat, 8>, grid, stream, o, p.colwise,
                         p.swizzled);
    }
    Grid grid = DequantizeGrid(p, o, WideAllowed());
    if (grid.jobs == 0) return cudaSuccess;
    // One state per kernel: 8-byte chunks have a kernel per orientation.
    static KernelState wide_state, half_wide_states[2], strip_state;
    if (grid.wide && grid.tile_cols == 32 * kWideDequantChunk) {
      return LaunchJobs(WideDequantizeKernelFor<Out, kFormat, kWideDequantChunk>(p.colwise), grid,
                        WideStagesBytes(kWideDequantChunk), o.job_counter, wide_state, stream, o,
                        p.colwise, p.swizzled);
    }
    if (grid.wide) {
      return LaunchJobs(WideDequantizeKernelFor<Out, kFormat, kWideDequantHalfChunk>(p.colwise),
                        grid, WideStagesBytes(kWideDequantHalfChunk), o.job_counter,
                        half_wide_states[p.colwise], stream, o, p.colwise, p.swizzled);
    }
    return LaunchJobs(DequantizeKernel<Out, kFormat>, grid, 0, o.job_counter, strip_state,
                      stream, o, p.colwise, p.swizzled);
  }
};

}  // namespace

cudaError_t LaunchMxfp8Quantize(const mxfp8::QuantizeProblem& p,
                                const mxfp8::QuantizeOperands& o, cudaStream_t stream) {
  QuantizeLaunch launch{p, o, stream};
  return DispatchQuantize(p, launch);
}

cudaError_t LaunchMxfp8Dequantize(const mxfp8::DequantizeProblem& p,
                                  const mxfp8::DequantizeOperands& o, cudaStream_t stream) {
  DequantizeLaunch launch{p, o, stream};
  return DispatchDequantize(p, launch);
}

}  // namespace jgg::cuda
