// What a GPU's memory gives to streams that read one byte for every two they write (MXFP8
// dequantize's mix), against a plain copy, a read-only and a write-only stream, and what the
// store's cache hint and the warp's store pattern change. A probe, not part of the library:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//     tools/device/stream_mix_probe.cu -o build/dev/stream_mix_probe
//   build/dev/stream_mix_probe [input MiB, default 64 (the mixtral activation's fp8 codes)]
// Each kernel is a grid-stride loop over 16-byte chunks, 4 chunks per thread in flight; the
// widening kernels write 32 bytes per 16 read. Prints GB/s of bytes read + written, median of
// 9 timings of 20 launches each.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

enum class Store { kDefault, kStreaming, kEvictFirst, kNoAllocate };

template <Store kStore>
__device__ inline void StoreChunk(uint4* p, uint4 v) {
  if constexpr (kStore == Store::kDefault) {
    *p = v;
  } else if constexpr (kStore == Store::kStreaming) {
    __stcs(p, v);
  } else if constexpr (kStore == Store::kEvictFirst) {
    asm volatile(
        "{\n .reg .b64 pol;\n createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
        " st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, pol;\n}\n" ::"l"(p),
        "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
        : "memory");
  } else {
    asm volatile("st.global.L1::no_allocate.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  }
}

// Zero-extends the low (kHigh = false) or high 8 bytes of v to 16-bit lanes, as a u8 -> u16
// widening would (the probe's stand-in for dequantize's arithmetic).
template <bool kHigh>
__device__ inline uint4 Widen(uint4 v) {
  const uint32_t a = kHigh ? v.z : v.x, b = kHigh ? v.w : v.y;
  return make_uint4(__byte_perm(a, 0, 0x4140), __byte_perm(a, 0, 0x4342),
                    __byte_perm(b, 0, 0x4140), __byte_perm(b, 0, 0x4342));
}

constexpr int kUnroll = 4;

// Grid-stride loop over n chunks: kUnroll loads issued before the first use, then use(j, chunk)
// for each.
template <typename Use>
__device__ inline void ForEachChunk(const uint4* __restrict__ in, long n, Use use) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = i + u * stride < n ? __ldg(in + i + u * stride) : uint4{};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < n) use(i + u * stride, v[u]);
    }
  }
}

// 1:1 copy of n chunks.
template <Store kStore>
__global__ void Copy(const uint4* __restrict__ in, uint4* __restrict__ out, long n) {
  ForEachChunk(in, n, [&](long j, uint4 v) { StoreChunk<kStore>(out + j, v); });
}

// Reads n chunks, writes 2n. kPaired: chunk i's two outputs at 2i, 2i + 1 (a warp's store
// instruction covers every other 16 bytes of 1 KB, as the dequantize kernels store); otherwise
// each store instruction of a warp covers 512 contiguous bytes (the outputs of 32 chunks in
// halves: the byte order differs from a true widening, the traffic is the same).
template <Store kStore, bool kPaired>
__global__ void Widen2(const uint4* __restrict__ in, uint4* __restrict__ out, long n) {
  ForEachChunk(in, n, [&](long j, uint4 v) {
    const long lane = j % 32, warp_base = 2 * (j - lane);
    StoreChunk<kStore>(kPaired ? out + 2 * j : out + warp_base + lane, Widen<false>(v));
    StoreChunk<kStore>(kPaired ? out + 2 * j + 1 : out + warp_base + 32 + lane, Widen<true>(v));
  });
}

__global__ void WriteOnly(uint4* __restrict__ out, long n) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = make_uint4(static_cast<uint32_t>(i), 0, 0, 0);
  }
}

__global__ void ReadOnly(const uint4* __restrict__ in, long n, uint32_t* sink) {
  uint32_t acc = 0;
  ForEachChunk(in, n, [&](long, uint4 v) { acc ^= v.x ^ v.y ^ v.z ^ v.w; });
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

template <typename Launch>
double MedianGbPerS(Launch launch, double bytes) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 20; ++i) launch();
  std::vector<double> rates;
  for (int r = 0; r < 9; ++r) {
    CHECK(cudaEventRecord(start));
    for (int i = 0; i < 20; ++i) launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    rates.push_back(bytes * 20 / (ms * 1e-3) / 1e9);
  }
  CHECK(cudaGetLastError());
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

int main(int argc, char** argv) {
  const long in_mib = argc > 1 ? std::atol(argv[1]) : 64;
  const long n = in_mib * (1 << 20) / 16;  // input chunks
  const long big = (512L << 20) / 16;       // the 1 GiB copy: 512 MiB each way
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint4 *in, *out;
  uint32_t* sink;
  CHECK(cudaMalloc(&in, std::max(n, big) * 16));
  CHECK(cudaMalloc(&out, std::max(2 * n, big) * 16));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(in, 0x5a, std::max(n, big) * 16));
  const int threads = 256;
  std::printf("input %ld MiB, %d SMs, %d threads per block\n", in_mib, sms, threads);
  std::printf("| stream | blocks per SM | GB/s (read + written) |\n|---|---:|---:|\n");
  auto row = [&](const char* name, int per_sm, double bytes, auto kernel_launch) {
    const int blocks = per_sm * sms;
    const double rate = MedianGbPerS([&] { kernel_launch(blocks); }, bytes);
    std::printf("| %s | %d | %.0f |\n", name, per_sm, rate);
  };
  for (int per_sm : {4, 8}) {
    row("copy 1 GiB (512 MiB each way)", per_sm, 2.0 * big * 16,
        [&](int b) { Copy<Store::kDefault><<<b, threads>>>(in, out, big); });
    row("copy, same input", per_sm, 2.0 * n * 16,
        [&](int b) { Copy<Store::kDefault><<<b, threads>>>(in, out, n); });
    row("read only", per_sm, 1.0 * n * 16,
        [&](int b) { ReadOnly<<<b, threads>>>(in, n, sink); });
    row("write only (2x input)", per_sm, 2.0 * n * 16,
        [&](int b) { WriteOnly<<<b, threads>>>(out, 2 * n); });
    using WidenKernel = void (*)(const uint4*, uint4*, long);
    const auto widen = [&](const char* name, WidenKernel kernel) {
      row(name, per_sm, 3.0 * n * 16, [&](int b) { kernel<<<b, threads>>>(in, out, n); });
    };
    widen("widen 1:2, paired stores", Widen2<Store::kDefault, true>);
    widen("widen 1:2, contiguous stores", Widen2<Store::kDefault, false>);
    widen("widen 1:2, paired, st.global.cs", Widen2<Store::kStreaming, true>);
    widen("widen 1:2, paired, L2 evict_first", Widen2<Store::kEvictFirst, true>);
    widen("widen 1:2, paired, L1::no_allocate", Widen2<Store::kNoAllocate, true>);
    widen("widen 1:2, contiguous, L2 evict_first", Widen2<Store::kEvictFirst, false>);
  }
  return 0;
}
