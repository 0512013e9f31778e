// How long writing TMA descriptors takes, by one block or spread over many: the question behind
// kProblemsPerPreparationBlock (sm90/grouped_gemm_sm90.cuh). Each descriptor is written as the
// preparation writes one: a 128-byte template copied to shared memory, its address, 5 dims and
// 4 strides replaced there (tensormap.replace), then copied out, behind a tensormap release fence.
// The descriptors' bits are arbitrary: the GEMM never reads them here.
//
// On the device (no Bazel there):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o tensormap_write_bench \
//     tools/bench/tensormap_write_bench.cu && ./tensormap_write_bench
// Prints, per layout, the kernel's time from its first block's start to its last block's end
// (%globaltimer, mean of 200 launches) and the time per launch of 200 back-to-back launches.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

struct alignas(128) Descriptor {
  uint64_t words[16];
};

__device__ unsigned long long first_start, last_end;

__device__ uint64_t Now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void WriteDescriptor(int i, const Descriptor& pattern, Descriptor& staging,
                                Descriptor* out) {
  staging = pattern;
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(&staging));
  const uint64_t address = 0x100000ull * i, stride = 4096;
  const uint32_t rows = 128 + i, cols = 2048, one = 1;
  asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;" ::"r"(s), "l"(address));
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %1;" ::"r"(s), "r"(rows));
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %1;" ::"r"(s), "r"(cols));
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 2, %1;" ::"r"(s), "r"(one));
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 3, %1;" ::"r"(s), "r"(one));
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 4, %1;" ::"r"(s), "r"(one));
  const uint64_t row_bytes = stride, plane_bytes = stride * cols;
  asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %1;" ::"r"(s), "l"(row_bytes));
  asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 1, %1;" ::"r"(s), "l"(plane_bytes));
  asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 2, %1;" ::"r"(s), "l"(plane_bytes));
  asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 3, %1;" ::"r"(s), "l"(plane_bytes));
  out[i] = staging;
}

// `count` descriptors: by every thread of one block in turn (per_block == 0), or `per_block`
// per block, one per thread of its first warp.
__global__ void WriteDescriptors(int count, int per_block, const __grid_constant__ Descriptor pattern,
                                 Descriptor* out) {
  __shared__ Descriptor staging[1024];
  if (threadIdx.x == 0) atomicMin(&first_start, Now());
  if (per_block == 0) {
    for (int i = threadIdx.x; i < count; i += blockDim.x) WriteDescriptor(i, pattern, staging[threadIdx.x], out);
  } else {
    const int i = blockIdx.x * per_block + threadIdx.x;
    if (threadIdx.x < per_block && i < count) WriteDescriptor(i, pattern, staging[threadIdx.x], out);
  }
  asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&last_end, Now());
}

}  // namespace

int main() {
  constexpr int kLaunches = 200;
  Descriptor* out;
  if (cudaMalloc(&out, 4096 * sizeof(Descriptor)) != cudaSuccess) return 1;
  Descriptor pattern{};
  for (int i = 0; i < 16; ++i) pattern.words[i] = 0x0123456789abcdefull * (i + 1);
  struct Layout {
    const char* name;
    int blocks, count, per_block;
  };
  const Layout layouts[] = {
      {"1 block of 256 threads, 24 descriptors", 1, 24, 0},
      {"1 block of 256 threads, 96 descriptors", 1, 96, 0},
      {"1 block of 256 threads, 384 descriptors", 1, 384, 0},
      {"3 blocks of 128 descriptors", 3, 384, 128},
      {"32 blocks of 12 descriptors", 32, 384, 12},
      {"48 blocks of 8 descriptors", 48, 384, 8},
  };
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  for (const Layout& l : layouts) {
    double inside_us = 0;
    for (int r = 0; r < kLaunches + 10; ++r) {
      const unsigned long long never = ~0ull, zero = 0;
      cudaMemcpyToSymbol(first_start, &never, 8);
      cudaMemcpyToSymbol(last_end, &zero, 8);
      WriteDescriptors<<<l.blocks, 256>>>(l.count, l.per_block, pattern, out);
      unsigned long long start, stop;
      cudaMemcpyFromSymbol(&start, first_start, 8);
      cudaMemcpyFromSymbol(&stop, last_end, 8);
      if (r >= 10) inside_us += (stop - start) / 1000.0 / kLaunches;  // after 10 warm-ups
    }
    cudaEventRecord(begin);
    for (int r = 0; r < kLaunches; ++r) WriteDescriptors<<<l.blocks, 256>>>(l.count, l.per_block, pattern, out);
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    float ms;
    cudaEventElapsedTime(&ms, begin, end);
    std::printf("%-42s kernel %6.2f us   back-to-back %6.2f us a launch   %s\n", l.name, inside_us,
                1000.0 * ms / kLaunches, cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
