// f32 multiply-adds on the dequantized values, with the output tile in registers.
//
// Work: a block owns 64 output rows (of K) of one group and loops over N in chunks of 256
// columns; warp w holds rows 8w .. 8w + 7 and lane l columns 8l .. 8l + 7 of a chunk, 64
// accumulators a lane. The group's token rows go in chunks of 32: each chunk's x values for the
// block's 64 rows are dequantized once into shared memory (read by every warp as broadcasts),
// and each lane dequantizes its 8 dy values of a token row, then adds 8 x 8 products. A group
// of at most 32 rows (every group in decode) stages its x values once for all of N.
//
// Scales: a token row's colwise scale row depends on which of the operand's own groups holds
// it (mxfp8_gemm_problem.h), found by warp scans of that operand's group sizes; a row of no
// operand group reads as 0, a NaN scale (0xFF) or code gives NaN, like the dequantize op.
// Every dequantized value is exact in f32 (no flush to zero here), so the result is the
// f32 matmul of the dequantized operands.
#include "xla_plugin/kernels/cuda/mxfp8_ragged_k_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/warp_group_scan.cuh"

namespace jgg::cuda {
namespace {

using mxfp8::Fp8Format;
using mxfp8::RaggedKOperands;
using mxfp8::RaggedKProblem;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kVector = 8;                     // a lane's columns, and a thread's staged x values
constexpr int kWarpRows = 8;                   // output rows per warp
constexpr int kBlockRows = kWarps * kWarpRows;  // output rows per block
constexpr int kChunkCols = 32 * kVector;       // output columns per chunk
constexpr int kChunkRows = 32;                 // token rows staged at a time
constexpr int kStagers = kBlockRows / kVector;  // threads staging one token row
static_assert(kChunkRows * kStagers == kThreads, "one staging step: every thread 8 values");
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kTargetBlocks = 1024;  // enough to fill every SM a few times over

struct Shared {
  float x[kChunkRows][kBlockRows];  // deq(x)[token row of the chunk][output row of the block]
  int64_t x_scale_row[kChunkRows];  // byte offset of each token row's scale row, -1: no group
  int64_t dy_scale_row[kChunkRows];
  int64_t begin, rows;              // the GEMM group's token rows
};

// Warp-wide: for token rows [first, first + count), count <= 32, the byte offset of each one's
// scale row in a colwise operand grouped by `sizes` (group h's scale matrix has
// 4 * ceil(rows_h / 128) rows of `row_bytes` and follows the earlier groups'), -1 for a row
// of no group; lane r writes offsets[r].
__device__ void LocateScaleRows(const int32_t* sizes, int64_t num_groups, int64_t extent,
                                int64_t row_bytes, int64_t first, int count, int64_t* offsets) {
  const int lane = threadIdx.x % 32;
  const int64_t row = first + lane;
  int64_t found = -1, rows_before = 0, scale_rows_before = 0;
  for (int64_t base = 0; base < num_groups && rows_before < first + count; base += 32) {
    const GroupRows group = NextGroupRows(sizes, num_groups, extent, base, &rows_before);
    const int64_t scale_rows =
        mxfp8::kScaleTileCols * CeilDiv(group.rows, mxfp8::kScaleTileRows);
    const int64_t scale_incl = WarpInclusiveSum(scale_rows);
    const int64_t scale_begin = scale_rows_before + scale_incl - scale_rows;
    for (int j = 0; j < 32; ++j) {  // lane r's row among the window's groups
      const int64_t begin = __shfl_sync(0xffffffffu, group.begin, j);
      const int64_t rows = __shfl_sync(0xffffffffu, group.rows, j);
      const int64_t scale_row = __shfl_sync(0xffffffffu, scale_begin, j);
      if (row >= begin && row < begin + rows)
        found = (scale_row + (row - begin) / mxfp8::kBlockSize) * row_bytes;
    }
    scale_rows_before += __shfl_sync(0xffffffffu, scale_incl, 31);
  }
  if (lane < count) offsets[lane] = found;
}

// The 8 values at `codes` (8-byte aligned) with their 8 scales at `scales`, dequantized.
template <Fp8Format kFormat>
__device__ inline void Dequantize8(const uint8_t* codes, const uint8_t* scales,
                                   float (&v)[kVector]) {
  const uint2 c = __ldg(reinterpret_cast<const uint2*>(codes));
  const uint2 s = __ldg(reinterpret_cast<const uint2*>(scales));
  const uint32_t words[2] = {c.x, c.y}, scale_words[2] = {s.x, s.y};
#pragma unroll
  for (int e = 0; e < kVector; e += 2) {
    const float2 pair = Fp8PairToFloat2<kFormat>(words[e / 4] >> (8 * (e % 4)));
    v[e] = pair.x * __uint_as_float(mxfp8::ScaleBits((scale_words[e / 4] >> (8 * (e % 4))) & 0xFF));
    v[e + 1] =
        pair.y * __uint_as_float(mxfp8::ScaleBits((scale_words[e / 4] >> (8 * (e % 4 + 1))) & 0xFF));
  }
}

// Grid: x = blocks of 64 output rows, y = column chunks (strided when fewer than the chunks),
// z = group.
template <Fp8Format kX, Fp8Format kDy, typename O>
__global__ void __launch_bounds__(kThreads, 2)
    Mxfp8RaggedKKernel(RaggedKProblem p, RaggedKOperands o) {
  __shared__ Shared s;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t g = blockIdx.z, k0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  if (warp == 0) {
    int64_t before = 0;
    GroupRows group{};
    for (int64_t base = 0; base <= g; base += 32)
      group = NextGroupRows(o.group_sizes, p.num_groups, p.rows, base, &before);
    if (lane == g % 32) {
      s.begin = group.begin;
      s.rows = group.rows;
    }
  }
  __syncthreads();
  const int64_t begin = s.begin, rows = s.rows;
  const int64_t x_row_bytes = mxfp8::ColwiseScaleRowBytes(p.k);
  const int64_t dy_row_bytes = mxfp8::ColwiseScaleRowBytes(p.n);

  // Token rows [c0, c0 + count) of the group: their scale rows, then their x values.
  int64_t staged = -1;  // the chunk in shared memory
  const auto stage = [&](int64_t c0, int count) {
    if (staged == c0) return;
    __syncthreads();  // every warp is done with the previous chunk
    if (warp == 0)
      LocateScaleRows(o.lhs_group_sizes, p.num_groups, p.rows, x_row_bytes, begin + c0, count,
                      s.x_scale_row);
    if (warp == 1)
      LocateScaleRows(o.rhs_group_sizes, p.num_groups, p.rows, dy_row_bytes, begin + c0, count,
                      s.dy_scale_row);
    __syncthreads();
    const int r = threadIdx.x / kStagers, i0 = threadIdx.x % kStagers * kVector;
    float v[kVector] = {};
    if (r < count && s.x_scale_row[r] >= 0 && k0 + i0 < p.k) {  // K % 8 == 0: all 8 inside
      Dequantize8<kX>(o.lhs + (begin + c0 + r) * p.k + k0 + i0,
                      o.lhs_scales + s.x_scale_row[r] + k0 + i0, v);
    }
    float4* dst = reinterpret_cast<float4*>(&s.x[r][i0]);
    dst[0] = make_float4(v[0], v[1], v[2], v[3]);
    dst[1] = make_float4(v[4], v[5], v[6], v[7]);
    __syncthreads();
    staged = c0;
  };

  O* out = static_cast<O*>(o.out) + (g * p.k + k0 + warp * kWarpRows) * p.n;
  const int warp_rows = static_cast<int>(MinI64(kWarpRows, p.k - k0 - warp * kWarpRows));
  const int64_t chunks = CeilDiv(p.n, kChunkCols);
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t n0 = chunk * kChunkCols + lane * kVector;
    const bool inside = n0 < p.n;  // N % 8 == 0: all 8 columns or none
    float acc[kWarpRows][kVector] = {};
    for (int64_t c0 = 0; c0 < rows; c0 += kChunkRows) {
      const int count = static_cast<int>(MinI64(kChunkRows, rows - c0));
      stage(c0, count);
      if (!inside) continue;
      for (int r = 0; r < count; ++r) {
        float y[kVector] = {};
        const int64_t scale_row = s.dy_scale_row[r];
        if (scale_row >= 0)
          Dequantize8<kDy>(o.rhs + (begin + c0 + r) * p.n + n0, o.rhs_scales + scale_row + n0, y);
        const float4 a0 = *reinterpret_cast<const float4*>(&s.x[r][warp * kWarpRows]);
        const float4 a1 = *reinterpret_cast<const float4*>(&s.x[r][warp * kWarpRows + 4]);
        const float a[kWarpRows] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
        for (int i = 0; i < kWarpRows; ++i) {
#pragma unroll
          for (int e = 0; e < kVector; ++e) acc[i][e] = fmaf(a[i], y[e], acc[i][e]);
        }
      }
    }
    if (!inside) continue;
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i) {
      if (i < warp_rows) StoreEvictFirst(acc[i], out + i * p.n + n0);
    }
  }
}

template <Fp8Format kX, Fp8Format kDy, typename O>
cudaError_t Launch(const RaggedKProblem& p, const RaggedKOperands& o, cudaStream_t stream) {
  const int64_t row_blocks = CeilDiv(p.k, kBlockRows), chunks = CeilDiv(p.n, kChunkCols);
  const int64_t column_blocks =
      MinI64(MinI64(chunks, kMaxGridYZ), CeilDiv(kTargetBlocks, row_blocks * p.num_groups));
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(column_blocks),
                  static_cast<unsigned>(p.num_groups));
  Mxfp8RaggedKKernel<kX, kDy, O><<<grid, kThreads, 0, stream>>>(p, o);
  return cudaGetLastError();
}

template <Fp8Format kX, Fp8Format kDy>
cudaError_t LaunchForOutput(const RaggedKProblem& p, const RaggedKOperands& o,
                            cudaStream_t stream) {
  switch (p.out_type) {
    case ElementType::kF32: return Launch<kX, kDy, float>(p, o, stream);
    case ElementType::kBF16: return Launch<kX, kDy, __nv_bfloat16>(p, o, stream);
    case ElementType::kF16: return Launch<kX, kDy, __half>(p, o, stream);
  }
  return cudaErrorInvalidValue;
}

template <Fp8Format kX>
cudaError_t LaunchForDy(const RaggedKProblem& p, const RaggedKOperands& o, cudaStream_t stream) {
  return p.rhs_format == Fp8Format::kE4M3 ? LaunchForOutput<kX, Fp8Format::kE4M3>(p, o, stream)
                                          : LaunchForOutput<kX, Fp8Format::kE5M2>(p, o, stream);
}

bool Aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

}  // namespace

cudaError_t LaunchMxfp8RaggedK(const RaggedKProblem& p, const RaggedKOperands& o,
                               cudaStream_t stream) {
  if (p.num_groups == 0 || p.k == 0 || p.n == 0) return cudaSuccess;
  if (p.k % kVector != 0 || p.n % kVector != 0 || p.num_groups > kMaxGridYZ ||
      CeilDiv(p.k, kBlockRows) > 0x7FFFFFFF || !Aligned(o.lhs, 8) || !Aligned(o.rhs, 8) ||
      !Aligned(o.lhs_scales, 8) || !Aligned(o.rhs_scales, 8) || !Aligned(o.out, 16))
    return cudaErrorInvalidValue;
  return p.lhs_format == Fp8Format::kE4M3 ? LaunchForDy<Fp8Format::kE4M3>(p, o, stream)
                                          : LaunchForDy<Fp8Format::kE5M2>(p, o, stream);
}

}  // namespace jgg::cuda
