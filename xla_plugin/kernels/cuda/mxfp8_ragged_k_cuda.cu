// f32 multiply-adds on the values dequantized on load. A block owns 64 output rows (of K) of
// one group; its threads own 8 columns each (a block spans up to 2048 columns of N, more loop).
// The group's x values for the block's rows are dequantized once into shared memory.
//
// Groups of at most 8 rows (every group in decode) are streamed: each thread dequantizes its
// dy values once into registers, then computes and stores the block's output rows one after
// another (like the BF16 streamed wgrad, ragged_k_streamed.cu), so the kernel runs at the
// speed of writing the result. Larger groups accumulate 8 output rows per thread at a time
// over all their token rows (128 staged at a time), decoding their dy codes again for each 8
// (rows of one 32-row block share scale factors, computed once per block).
//
// Before its first store a block waits for the group walk (one round trip per 128 groups),
// then for its dy and x loads, issued together. Where x and dy are grouped by the GEMM's own
// sizes (an MoE layer's: the same buffer) the walk also gives their scale rows; H200
// (2026-11-30), decode wgrad 0.248 -> 0.215 ms against a walk per operand after the GEMM's
// and the x values staged before the dy loads were issued.
//
// Scales: a token row's colwise scale row depends on which of the operand's own groups holds
// it (mxfp8_gemm_problem.h), found by warp scans of that operand's group sizes; a row of no
// operand group reads as 0, a NaN scale (0xFF) or code gives NaN, like the dequantize op.
// Every dequantized value is exact in f32 (no flush to zero here), so the result is the
// f32 matmul of the dequantized operands.
#include "xla_plugin/kernels/cuda/mxfp8_ragged_k_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/launch_limits.h"
#include "xla_plugin/kernels/cuda/warp_group_scan.cuh"

namespace jgg::cuda {
namespace {

using mxfp8::Fp8Format;
using mxfp8::RaggedKOperands;
using mxfp8::RaggedKProblem;

constexpr int kMaxThreads = 256;
constexpr int kVector = 8;              // a thread's columns, and a thread's staged x values
constexpr int kBlockRows = 64;          // output rows per block
constexpr int kOutRows = 8;             // output rows a thread accumulates at a time
constexpr int kStagedRows = 128;        // token rows staged at a time
constexpr int kLoadRows = 4;            // token rows whose dy values load together
constexpr int kStreamRows = 8;          // groups of at most this many rows stream their output

struct Shared {
  int64_t x_scale_row[kStagedRows];  // byte offset of each token row's scale row, -1: no group
  int64_t dy_scale_row[kStagedRows];
  int64_t begin, rows;              // the GEMM group's token rows
  int64_t scale_begin;              // its first scale row in an operand grouped by the GEMM's sizes
};

// Rows of a group's colwise scale matrix: 4 per 128 token rows (whole 128x4 tiles).
__device__ inline int64_t ScaleRowsOf(int64_t rows) {
  return mxfp8::kScaleTileCols * CeilDiv(rows, mxfp8::kScaleTileRows);
}

// Warp 0: group g's token rows and its first scale row in an operand grouped by `sizes` into
// *s, one round trip per 128 groups (NextLaneGroups).
__device__ void LocateGroup(const RaggedKProblem& p, const int32_t* sizes, int64_t g, Shared* s) {
  const int lane = threadIdx.x % 32;
  int64_t rows_before = 0, scale_rows_before = 0;
  for (int64_t base = 0; base <= g; base += kWindowGroups) {
    const LaneGroups groups = NextLaneGroups(sizes, p.num_groups, base, &rows_before);
    int64_t lane_scale_rows = 0, row = groups.row;
#pragma unroll
    for (int j = 0; j < kLaneGroups; ++j) {
      lane_scale_rows += ScaleRowsOf(GroupRowsAt(row, groups.size[j], p.rows).rows);
      row += groups.size[j];
    }
    int64_t window_scale_rows;
    int64_t scale_row = scale_rows_before + WarpExclusiveSum(lane_scale_rows, &window_scale_rows);
    if (g - base < kWindowGroups && lane == (g - base) / kLaneGroups) {
      row = groups.row;
      for (int j = 0; j < kLaneGroups; ++j) {
        const GroupRows group = GroupRowsAt(row, groups.size[j], p.rows);
        if (base + kLaneGroups * lane + j == g) {
          s->begin = group.begin;
          s->rows = group.rows;
          s->scale_begin = scale_row;
        }
        scale_row += ScaleRowsOf(group.rows);
        row += groups.size[j];
      }
    }
    scale_rows_before += window_scale_rows;
  }
}

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
    const int64_t scale_rows = ScaleRowsOf(group.rows);
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

// The dequantization factors 2^(e - 127) of 8 scale bytes (two little-endian words).
__device__ inline void ScaleFactors8(uint2 scales, float (&f)[kVector]) {
  const uint32_t words[2] = {scales.x, scales.y};
#pragma unroll
  for (int e = 0; e < kVector; ++e)
    f[e] = __uint_as_float(mxfp8::ScaleBits((words[e / 4] >> (8 * (e % 4))) & 0xFF));
}

// 8 codes (two little-endian words) times their factors.
template <Fp8Format kFormat>
__device__ inline void Decode8(uint2 codes, const float (&f)[kVector], float (&v)[kVector]) {
  const uint32_t words[2] = {codes.x, codes.y};
#pragma unroll
  for (int e = 0; e < kVector; e += 2) {
    const float2 pair = Fp8PairToFloat2<kFormat>(words[e / 4] >> (8 * (e % 4)));
    v[e] = pair.x * f[e];
    v[e + 1] = pair.y * f[e + 1];
  }
}

template <Fp8Format kFormat>
__device__ inline void Dequantize8(uint2 codes, uint2 scales, float (&v)[kVector]) {
  float f[kVector];
  ScaleFactors8(scales, f);
  Decode8<kFormat>(codes, f, v);
}

// The same from memory: codes and scales 8-byte aligned.
template <Fp8Format kFormat>
__device__ inline void Dequantize8(const uint8_t* codes, const uint8_t* scales,
                                   float (&v)[kVector]) {
  Dequantize8<kFormat>(__ldg(reinterpret_cast<const uint2*>(codes)),
                       __ldg(reinterpret_cast<const uint2*>(scales)), v);
}

// The 8 dequantized dy values of token row `row` at columns n0.. (zeros for scale_row < 0).
template <Fp8Format kDy>
__device__ inline void LoadDyRow(const RaggedKProblem& p, const RaggedKOperands& o, int64_t row,
                                 int64_t scale_row, int64_t n0, float (&y)[kVector]) {
  uint2 codes = make_uint2(0, 0), scales = make_uint2(0, 0);
  if (scale_row >= 0) {
    codes = __ldg(reinterpret_cast<const uint2*>(o.rhs + row * p.n + n0));
    scales = __ldg(reinterpret_cast<const uint2*>(o.rhs_scales + scale_row + n0));
  }
  Dequantize8<kDy>(codes, scales, y);  // zero codes and scales: +0 (padding rows too)
}

// A group of at most kRows token rows (rows, from token row `begin`; kRows a power of two,
// the rows past the group multiplied by zeros), the block's output rows [k0, k0 + out_rows):
// each thread's dy values for its 8 columns are dequantized once into registers, then every
// output row is computed from them and x_by_row (x_by_row[i][r]: one 16-byte broadcast per 4
// token rows) and stored at once, so stores stream like a copy's. The first columns' dy loads
// are issued before x is staged (`stage_x`, which ends with a barrier every thread reaches),
// so their latency and x's overlap. Scale rows: dy_scale_row[r] (byte offsets).
template <int kRows, Fp8Format kDy, typename O, typename StageX>
__device__ void StreamGroup(const RaggedKProblem& p, const RaggedKOperands& o, int64_t begin,
                            int rows, const int64_t* dy_scale_row,
                            const float (*x_by_row)[kStreamRows], int out_rows, O* out,
                            StageX stage_x) {
  const int64_t column_step = static_cast<int64_t>(gridDim.y) * blockDim.x * kVector;
  int64_t n0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kVector;
  float y[kRows][kVector];
  const auto load_dy = [&] {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      LoadDyRow<kDy>(p, o, begin + r, r < rows ? dy_scale_row[r] : -1, n0, y[r]);
  };
  if (n0 < p.n) load_dy();
  stage_x();
  for (bool first = true; n0 < p.n; n0 += column_step, first = false) {
    if (!first) load_dy();
    for (int i = 0; i < out_rows; ++i) {
      float a[kStreamRows];
#pragma unroll
      for (int q = 0; q < (kRows + 3) / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(&x_by_row[i][4 * q]);
        a[4 * q] = v.x, a[4 * q + 1] = v.y, a[4 * q + 2] = v.z, a[4 * q + 3] = v.w;
      }
      float acc[kVector] = {};
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int e = 0; e < kVector; ++e) acc[e] = fmaf(a[r], y[r][e], acc[e]);
      }
      StoreEvictFirst(acc, out + i * p.n + n0);
    }
  }
}

// Grid: x = blocks of kBlockRows output rows, y = column chunks of blockDim.x * 8 (strided when
// fewer than the chunks), z = group.
template <Fp8Format kX, Fp8Format kDy, typename O>
__global__ void __launch_bounds__(kMaxThreads, 2)
    Mxfp8RaggedKKernel(RaggedKProblem p, RaggedKOperands o) {
  __shared__ float x_values[kStagedRows][kBlockRows];  // deq(x)[token row][output row]
  __shared__ Shared s;
  static_assert(kStreamRows <= kStagedRows, "x_by_row fits in x_values");
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int64_t g = blockIdx.z, k0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int block_rows = static_cast<int>(MinI64(kBlockRows, p.k - k0));
  O* out = static_cast<O*>(o.out) + (g * p.k + k0) * p.n;
  if (warp == 0) LocateGroup(p, o.group_sizes, g, &s);
  __syncthreads();
  const int64_t begin = s.begin, rows = s.rows;
  const int64_t x_row_bytes = mxfp8::ColwiseScaleRowBytes(p.k);
  const int64_t dy_row_bytes = mxfp8::ColwiseScaleRowBytes(p.n);
  // Operands grouped by the GEMM's own sizes (x and dy of an MoE layer: the same buffer) have
  // the scale rows LocateGroup found; others are located row by row (LocateScaleRows).
  const bool gemm_grouped = o.lhs_group_sizes == o.group_sizes && o.rhs_group_sizes == o.group_sizes;

  // The scale rows of token rows [c0, c0 + count) of the group (count <= kStagedRows) into
  // s.x_scale_row and s.dy_scale_row, visible to every thread when it returns.
  int64_t located = -1;  // the first token row whose scale rows are in shared memory
  const auto locate = [&](int64_t c0, int count) {
    if (located == c0) return;
    __syncthreads();  // every warp is done with the previous rows
    if (gemm_grouped) {
      for (int r = threadIdx.x; r < count; r += blockDim.x) {
        const int64_t scale_row = s.scale_begin + (c0 + r) / mxfp8::kBlockSize;
        s.x_scale_row[r] = scale_row * x_row_bytes;
        s.dy_scale_row[r] = scale_row * dy_row_bytes;
      }
    } else {
      const int windows = (count + 31) / 32;
      for (int task = warp; task < 2 * windows; task += warps) {  // x's windows, then dy's
        const int w = task % windows, first = 32 * w, n = min(32, count - first);
        if (task < windows)
          LocateScaleRows(o.lhs_group_sizes, p.num_groups, p.rows, x_row_bytes,
                          begin + c0 + first, n, s.x_scale_row + first);
        else
          LocateScaleRows(o.rhs_group_sizes, p.num_groups, p.rows, dy_row_bytes,
                          begin + c0 + first, n, s.dy_scale_row + first);
      }
    }
    __syncthreads();
    located = c0;
  };

  // The x values of token rows [c0, c0 + count) (scale rows located) for the block's output
  // rows, by output row (x_by_row[i][r]: the streamed path) or by token row (x_values[r][i]);
  // every thread reaches the barrier at the end.
  float (*x_by_row)[kStreamRows] = reinterpret_cast<float (*)[kStreamRows]>(&x_values[0][0]);
  const auto stage_x = [&](int64_t c0, int count, bool by_output_row) {
    const int stagers = block_rows / kVector;  // K % 8 == 0
    for (int t = threadIdx.x; t < count * stagers; t += blockDim.x) {
      const int r = t / stagers, i0 = t % stagers * kVector;
      float v[kVector] = {};
      if (s.x_scale_row[r] >= 0) {
        Dequantize8<kX>(o.lhs + (begin + c0 + r) * p.k + k0 + i0,
                        o.lhs_scales + s.x_scale_row[r] + k0 + i0, v);
      }
      if (by_output_row) {
#pragma unroll
        for (int e = 0; e < kVector; ++e) x_by_row[i0 + e][r] = v[e];
      } else {
        float4* dst = reinterpret_cast<float4*>(&x_values[r][i0]);
        dst[0] = make_float4(v[0], v[1], v[2], v[3]);
        dst[1] = make_float4(v[4], v[5], v[6], v[7]);
      }
    }
    __syncthreads();
  };

  if (rows <= kStreamRows) {  // every group in decode
    const int count = static_cast<int>(rows);
    locate(0, count);
    // Token rows past the group read as 0 (the streamed path rounds their number up to 2^j
    // and multiplies them with zeros): disjoint from what stage_x writes, so no barrier.
    for (int t = threadIdx.x; t < kBlockRows * kStreamRows; t += blockDim.x) {
      if (t % kStreamRows >= count) x_by_row[t / kStreamRows][t % kStreamRows] = 0.0f;
    }
    const auto stream = [&](auto rows_tag) {
      StreamGroup<decltype(rows_tag)::value, kDy>(
          p, o, begin, count, s.dy_scale_row, x_by_row, block_rows, out,
          [&] { stage_x(0, count, /*by_output_row=*/true); });
    };
    if (count <= 1) stream(std::integral_constant<int, 1>{});
    else if (count <= 2) stream(std::integral_constant<int, 2>{});
    else if (count <= 4) stream(std::integral_constant<int, 4>{});
    else stream(std::integral_constant<int, 8>{});
    return;
  }

  // Larger groups: each thread accumulates 8 output rows at a time over all token rows
  // (staged kStagedRows at a time).
  int64_t staged = -1;  // the first token row whose x values are in shared memory
  const auto stage = [&](int64_t c0, int count) {
    if (staged == c0) return;
    locate(c0, count);  // its first barrier: every warp is done with the previous x values
    stage_x(c0, count, /*by_output_row=*/false);
    staged = c0;
  };
  const int64_t chunk_cols = static_cast<int64_t>(blockDim.x) * kVector;
  const int64_t chunks = CeilDiv(p.n, chunk_cols);
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t n0 = chunk * chunk_cols + threadIdx.x * kVector;
    const bool inside = n0 < p.n;  // N % 8 == 0: all 8 columns or none
    // 8 output rows at a time, so the block writes whole rows of its chunk together.
    for (int i0 = 0; i0 < block_rows; i0 += kOutRows) {
      float acc[kOutRows][kVector] = {};
      for (int64_t c0 = 0; c0 < rows; c0 += kStagedRows) {
        const int count = static_cast<int>(MinI64(kStagedRows, rows - c0));
        stage(c0, count);
        if (!inside) continue;
        // kLoadRows token rows at a time: their dy codes are loaded before any is used, so
        // the loads' latency is paid once per kLoadRows rows. Rows of one 32-row block share
        // their scales: the factors are computed when the scale row changes.
        float factors[kVector];
        int64_t factor_row = -2;
        for (int r0 = 0; r0 < count; r0 += kLoadRows) {
          uint2 codes[kLoadRows];
#pragma unroll
          for (int j = 0; j < kLoadRows; ++j) {
            const int64_t scale_row = r0 + j < count ? s.dy_scale_row[r0 + j] : -1;
            codes[j] = scale_row < 0 ? make_uint2(0, 0)
                                     : __ldg(reinterpret_cast<const uint2*>(
                                           o.rhs + (begin + c0 + r0 + j) * p.n + n0));
          }
#pragma unroll
          for (int j = 0; j < kLoadRows; ++j) {
            if (r0 + j >= count) break;
            const int64_t scale_row = s.dy_scale_row[r0 + j];
            if (scale_row != factor_row) {  // the same for every thread of the block
              ScaleFactors8(scale_row < 0 ? make_uint2(0, 0)
                                          : __ldg(reinterpret_cast<const uint2*>(
                                                o.rhs_scales + scale_row + n0)),
                            factors);
              factor_row = scale_row;
            }
            float y[kVector];
            Decode8<kDy>(codes[j], factors, y);
            const float4 a0 = *reinterpret_cast<const float4*>(&x_values[r0 + j][i0]);
            const float4 a1 = *reinterpret_cast<const float4*>(&x_values[r0 + j][i0 + 4]);
            const float a[kOutRows] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
            for (int i = 0; i < kOutRows; ++i) {
#pragma unroll
              for (int e = 0; e < kVector; ++e) acc[i][e] = fmaf(a[i], y[e], acc[i][e]);
            }
          }
        }
      }
      if (!inside) continue;
#pragma unroll
      for (int i = 0; i < kOutRows; ++i) {
        if (i0 + i < block_rows) StoreEvictFirst(acc[i], out + (i0 + i) * p.n + n0);
      }
    }
  }
}

template <Fp8Format kX, Fp8Format kDy, typename O>
cudaError_t Launch(const RaggedKProblem& p, const RaggedKOperands& o, cudaStream_t stream) {
  const int64_t vectors = CeilDiv(p.n, kVector);
  const int threads = static_cast<int>(MinI64(kMaxThreads, CeilDiv(vectors, 32) * 32));
  const int64_t row_blocks = CeilDiv(p.k, kBlockRows), chunks = CeilDiv(vectors, threads);
  const dim3 grid(static_cast<unsigned>(row_blocks),
                  static_cast<unsigned>(MinI64(chunks, kMaxGridYZ)),
                  static_cast<unsigned>(p.num_groups));
  Mxfp8RaggedKKernel<kX, kDy, O><<<grid, threads, 0, stream>>>(p, o);
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
!Aligned(o.lhs, 8) || !Aligned(o.rhs, 8) ||
      !Aligned(o.lhs_scales, 8) || !Aligned(o.rhs_scales, 8) || !Aligned(o.out, 16))
    return cudaErrorInvalidValue;
  return p.lhs_format == Fp8Format::kE4M3 ? LaunchForDy<Fp8Format::kE4M3>(p, o, stream)
                                          : LaunchForDy<Fp8Format::kE5M2>(p, o, stream);
}

}  // namespace jgg::cuda
