// Portable CUDA kernels for the ragged GEMMs: correct for every shape, dtype
// and group-size pattern, f32 accumulation in FFMA. They are the fallback for
// what the tensor-core path does not take (f32 inputs, unaligned K/N, other
// GPUs) and the reference the tensor-core path is tested against on the GPU.
#include "xla_plugin/kernels/cuda/ragged_dot_simt.h"

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/launch_limits.h"
#include "xla_plugin/kernels/cuda/ragged_schedule.h"

namespace jgg::cuda {
namespace {

constexpr int kTileM = 64, kTileN = 64, kTileK = 16;
constexpr int kThreads = 256;  // 16 x 16 threads, each owning a 4 x 4 strided micro-tile
constexpr int kMicro = 4;

// acc[i][j] covers row ty + 16 i, column tx + 16 j of the tile.
struct Accumulator {
  float v[kMicro][kMicro];
  __device__ void Clear() {
#pragma unroll
    for (int i = 0; i < kMicro; ++i)
#pragma unroll
      for (int j = 0; j < kMicro; ++j) v[i][j] = 0.0f;
  }
  __device__ void Mma(const float (&a)[kTileK][kTileM + 1], const float (&b)[kTileK][kTileN + 1],
                      int ty, int tx) {
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float ar[kMicro], br[kMicro];
#pragma unroll
      for (int i = 0; i < kMicro; ++i) ar[i] = a[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < kMicro; ++j) br[j] = b[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < kMicro; ++i)
#pragma unroll
        for (int j = 0; j < kMicro; ++j) v[i][j] = fmaf(ar[i], br[j], v[i][j]);
    }
  }
};

template <typename O>
__device__ void StoreTile(const Accumulator& acc, O* out, int64_t ld, int64_t row0, int64_t rows,
                          int64_t col0, int64_t cols, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
    const int64_t r = ty + 16 * i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < kMicro; ++j) {
      const int64_t c = tx + 16 * j;
      if (c < cols) out[(row0 + r) * ld + col0 + c] = FromFloat<O>(acc.v[i][j]);
    }
  }
}

// Forward / dgrad. Flat block index = (row slot, column tile). Row slots first
// cover the tiles of the local groups (from the schedule), then the rows of no
// local group, which are zero-filled.
template <typename T, typename O, bool kRhsTransposed>
__global__ void __launch_bounds__(kThreads) RaggedMKernel(RaggedMProblem p, const T* lhs,
                                                          const T* rhs, O* out,
                                                          const void* workspace) {
  __shared__ float a_tile[kTileK][kTileM + 1];
  __shared__ float b_tile[kTileK][kTileN + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t b = blockIdx.z;
  const int64_t n_tiles = CeilDiv(p.n, kTileN);
  const int64_t slot = blockIdx.x / n_tiles;
  const int64_t col0 = (blockIdx.x % n_tiles) * kTileN;
  const int64_t cols = MinI64(kTileN, p.n - col0);
  const RaggedSchedule s = ScheduleOfBatch(const_cast<void*>(workspace), b, p.num_local_groups);
  const int64_t group_tiles = s.tile_begin[p.num_local_groups];
  O* out_b = out + b * p.rows * p.n;

  if (slot >= group_tiles) {
    const RowSpan span = UncoveredTile(slot - group_tiles, s.row_begin[0],
                                       s.row_begin[p.num_local_groups], p.rows, kTileM);
    for (int64_t e = threadIdx.x; e < (span.end - span.begin) * cols; e += kThreads)
      out_b[(span.begin + e / cols) * p.n + col0 + e % cols] = FromFloat<O>(0.0f);
    return;
  }
  const int64_t g = GroupOfTile(s.tile_begin, p.num_local_groups, slot);
  const int64_t row0 = s.row_begin[g] + (slot - s.tile_begin[g]) * kTileM;
  const int64_t rows = MinI64(kTileM, s.row_begin[g + 1] - row0);
  const T* lhs_b = lhs + b * p.rows * p.k;
  const T* rhs_g = rhs + (g * p.batch + b) * p.k * p.n;

  Accumulator acc;
  acc.Clear();
  for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
    for (int e = threadIdx.x; e < kTileM * kTileK; e += kThreads) {
      const int r = e / kTileK, kk = e % kTileK;
      a_tile[kk][r] = (r < rows && k0 + kk < p.k) ? ToFloat(lhs_b[(row0 + r) * p.k + k0 + kk]) : 0.0f;
    }
    for (int e = threadIdx.x; e < kTileN * kTileK; e += kThreads) {
      int c, kk;
      if (kRhsTransposed) { c = e / kTileK; kk = e % kTileK; } else { kk = e / kTileN; c = e % kTileN; }
      const bool inside = c < cols && k0 + kk < p.k;
      const int64_t index = kRhsTransposed ? (col0 + c) * p.k + k0 + kk : (k0 + kk) * p.n + col0 + c;
      b_tile[kk][c] = inside ? ToFloat(rhs_g[index]) : 0.0f;
    }
    __syncthreads();
    acc.Mma(a_tile, b_tile, ty, tx);
    __syncthreads();
  }
  StoreTile(acc, out_b, p.n, row0, rows, col0, cols, ty, tx);
}

// Wgrad: one block per (P tile x N tile, local group, batch entry) walks the
// group's rows; an empty group stores its zero accumulator.
template <typename T, typename O>
__global__ void __launch_bounds__(kThreads) RaggedKKernel(RaggedKProblem p, const T* lhs,
                                                          const T* rhs, O* out,
                                                          const void* workspace) {
  __shared__ float a_tile[kTileK][kTileM + 1];
  __shared__ float b_tile[kTileK][kTileN + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t g = blockIdx.y, b = blockIdx.z;
  const int64_t n_tiles = CeilDiv(p.n, kTileN);
  const int64_t p0 = (blockIdx.x / n_tiles) * kTileM;
  const int64_t col0 = (blockIdx.x % n_tiles) * kTileN;
  const int64_t ps = MinI64(kTileM, p.p - p0), cols = MinI64(kTileN, p.n - col0);
  const RaggedSchedule s = ScheduleOfBatch(const_cast<void*>(workspace), b, p.num_local_groups);
  const int64_t begin = s.row_begin[g], end = s.row_begin[g + 1];
  const T* lhs_b = lhs + b * p.rows * p.p;
  const T* rhs_b = rhs + b * p.rows * p.n;

  Accumulator acc;
  acc.Clear();
  for (int64_t r0 = begin; r0 < end; r0 += kTileK) {
    for (int e = threadIdx.x; e < kTileM * kTileK; e += kThreads) {
      const int kk = e / kTileM, i = e % kTileM;
      a_tile[kk][i] = (i < ps && r0 + kk < end) ? ToFloat(lhs_b[(r0 + kk) * p.p + p0 + i]) : 0.0f;
    }
    for (int e = threadIdx.x; e < kTileN * kTileK; e += kThreads) {
      const int kk = e / kTileN, c = e % kTileN;
      b_tile[kk][c] = (c < cols && r0 + kk < end) ? ToFloat(rhs_b[(r0 + kk) * p.n + col0 + c]) : 0.0f;
    }
    __syncthreads();
    acc.Mma(a_tile, b_tile, ty, tx);
    __syncthreads();
  }
  StoreTile(acc, out + (g * p.batch + b) * p.p * p.n, p.n, p0, ps, col0, cols, ty, tx);
}

// Calls fn(T{}, O{}) with the C++ types of the two element types.
template <typename Fn>
cudaError_t DispatchTypes(ElementType in, ElementType out, Fn fn) {
  auto with_out = [&](auto in_tag) -> cudaError_t {
    switch (out) {
      case ElementType::kF32: return fn(in_tag, float{});
      case ElementType::kBF16: return fn(in_tag, __nv_bfloat16{});
      case ElementType::kF16: return fn(in_tag, __half{});
    }
    return cudaErrorInvalidValue;
  };
  switch (in) {
    case ElementType::kF32: return with_out(float{});
    case ElementType::kBF16: return with_out(__nv_bfloat16{});
    case ElementType::kF16: return with_out(__half{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchRaggedMSimt(const RaggedMProblem& p, const RaggedOperands& o,
                              cudaStream_t stream) {
  const int64_t slots = MaxGroupTiles(p.rows, p.num_local_groups, kTileM) +
                        MaxUncoveredTiles(p.rows, kTileM);
  const int64_t blocks = slots * CeilDiv(p.n, kTileN);
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  if (cudaError_t e = LaunchRaggedSchedule(p.batch, p.num_global_groups, p.num_local_groups,
                                           p.rows, kTileM, o, stream); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(blocks), 1, static_cast<unsigned>(p.batch));
  return DispatchTypes(p.in_type, p.out_type, [&](auto t, auto u) {
    using T = decltype(t);
    using O = decltype(u);
    if (p.rhs_transposed) {
      RaggedMKernel<T, O, true><<<grid, kThreads, 0, stream>>>(
          p, static_cast<const T*>(o.lhs), static_cast<const T*>(o.rhs), static_cast<O*>(o.out),
          o.workspace);
    } else {
      RaggedMKernel<T, O, false><<<grid, kThreads, 0, stream>>>(
          p, static_cast<const T*>(o.lhs), static_cast<const T*>(o.rhs), static_cast<O*>(o.out),
          o.workspace);
    }
    return cudaGetLastError();
  });
}

cudaError_t LaunchRaggedKSimt(const RaggedKProblem& p, const RaggedOperands& o,
                              cudaStream_t stream) {
  const int64_t blocks = CeilDiv(p.p, kTileM) * CeilDiv(p.n, kTileN);
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  if (cudaError_t e = LaunchRaggedSchedule(p.batch, p.num_global_groups, p.num_local_groups,
                                           p.rows, kTileM, o, stream); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.num_local_groups),
                  static_cast<unsigned>(p.batch));
  return DispatchTypes(p.in_type, p.out_type, [&](auto t, auto u) {
    using T = decltype(t);
    using O = decltype(u);
    RaggedKKernel<T, O><<<grid, kThreads, 0, stream>>>(
        p, static_cast<const T*>(o.lhs), static_cast<const T*>(o.rhs), static_cast<O*>(o.out),
        o.workspace);
    return cudaGetLastError();
  });
}

}  // namespace jgg::cuda
