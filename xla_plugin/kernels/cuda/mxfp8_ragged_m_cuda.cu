// One block computes up to 8 rows of one group for 256 output columns: its 4 warps split K,
// each thread streams 8 weight bytes per row of K (16 rows in flight, one 32-row scale block
// at a time), dequantizes them in registers and accumulates them against the group rows held
// in shared memory; the warps' sums are added in a fixed order. Blocks are "slots": every
// group's passes of 8 rows in group order (located by a warp scan of the group sizes, so no
// schedule in HBM), then one slot zeroing the rows of no group.
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"

namespace jgg::cuda {
namespace {

using mxfp8::Fp8Format;
using mxfp8::RaggedMOperands;
using mxfp8::RaggedMProblem;

constexpr int kCols = 8;                  // output columns per thread: 8 weight bytes per row
constexpr int kWarps = 4;                 // a block's warps split K
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockCols = 32 * kCols;    // output columns per block
constexpr int kPassRows = 8;              // group rows per pass over the weights
constexpr int kChunkK = 1024;             // lhs columns staged in shared memory at a time
constexpr int kWarpK = kChunkK / kWarps;  // a multiple of the 32-row scale block
constexpr int kUnroll = 16;               // weight rows in flight per thread
static_assert(kWarpK % mxfp8::kBlockSize == 0 && mxfp8::kBlockSize % kUnroll == 0,
              "an unrolled step must stay inside one scale block");
constexpr int kMinBlocksPerSm = 4;        // 128 registers: enough rows in flight per SM
constexpr int64_t kMaxGridY = 65535;      // more slots loop

union SharedTile {
  float lhs[kChunkK][kPassRows];                 // dequantized lhs rows of a pass, [k][row]
  float partial[kWarps][kPassRows][kBlockCols];  // each warp's sums over its part of K
};

// A block's work: up to kPassRows rows of one group, or (tail) the rows no group covers.
struct Pass {
  int64_t group;
  int64_t row_begin;  // first output (and lhs) row
  int64_t rows;
  bool tail;
  int64_t lhs_scale_rows[kPassRows];  // of each lhs row: its scale row, -1 in no lhs group
};

__device__ inline int64_t WarpInclusiveSum(int64_t v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int64_t up = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += up;
  }
  return v;
}

// Rows [begin, begin + rows) of the clamped group sizes (ragged_layout.h) of the 32 groups
// starting at `base`, one per lane, after `before` rows of the earlier groups; `before`
// advances past them.
struct GroupRows {
  int64_t begin, rows;
};

__device__ inline GroupRows NextGroupRows(const int32_t* sizes, int64_t num_groups,
                                          int64_t extent, int64_t base, int64_t* before) {
  const int64_t g = base + threadIdx.x % 32;
  const int64_t size = g < num_groups ? ClampedSize(sizes[g]) : 0;
  const int64_t incl = WarpInclusiveSum(size);
  const int64_t begin = MinI64(extent, *before + incl - size);
  const GroupRows r{begin, MinI64(extent, *before + incl) - begin};
  *before += __shfl_sync(0xffffffffu, incl, 31);
  return r;
}

// Warp 0: the pass of `slot` (all but its lhs scale rows), written to *pass by one lane;
// false when the slot has no work.
__device__ bool LocatePass(const RaggedMProblem& p, const int32_t* sizes, int64_t slot,
                           Pass* pass) {
  const int lane = threadIdx.x % 32;
  int64_t rows_before = 0, passes_before = 0;
  for (int64_t base = 0; base < p.num_groups; base += 32) {
    const GroupRows group = NextGroupRows(sizes, p.num_groups, p.rows, base, &rows_before);
    const int64_t passes = CeilDiv(group.rows, kPassRows);
    const int64_t passes_incl = WarpInclusiveSum(passes);
    const int64_t first_pass = passes_before + passes_incl - passes;
    const unsigned hit = __ballot_sync(0xffffffffu, slot >= first_pass && slot < first_pass + passes);
    if (hit != 0) {
      if (lane == __ffs(hit) - 1) {
        const int64_t in_group = (slot - first_pass) * kPassRows;
        pass->group = base + lane;
        pass->row_begin = group.begin + in_group;
        pass->rows = MinI64(kPassRows, group.rows - in_group);
        pass->tail = false;
      }
      return true;
    }
    passes_before += __shfl_sync(0xffffffffu, passes_incl, 31);
  }
  if (slot != passes_before) return false;
  const int64_t covered = MinI64(p.rows, rows_before);
  if (lane == 0) {
    pass->group = p.num_groups;
    pass->row_begin = covered;
    pass->rows = p.rows - covered;
    pass->tail = true;
  }
  return covered < p.rows;
}

// Warp 0: pass->lhs_scale_rows. A grouped lhs's groups have scale matrices of
// 128 * ceil(rows / 128) rows, one after another (mxfp8_layout.h).
__device__ void LocateLhsScaleRows(const RaggedMProblem& p, const int32_t* lhs_sizes,
                                   Pass* pass) {
  const int lane = threadIdx.x % 32;
  if (!p.lhs_grouped) {
    if (lane < kPassRows) pass->lhs_scale_rows[lane] = pass->row_begin + lane;
    return;
  }
  if (lane < kPassRows) pass->lhs_scale_rows[lane] = -1;
  __syncwarp();
  int64_t rows_before = 0, scale_rows_before = 0;
  for (int64_t base = 0; base < p.lhs_num_groups; base += 32) {
    const GroupRows group = NextGroupRows(lhs_sizes, p.lhs_num_groups, p.rows, base, &rows_before);
    const int64_t scale_rows = CeilDiv(group.rows, mxfp8::kScaleTileRows) * mxfp8::kScaleTileRows;
    const int64_t scale_incl = WarpInclusiveSum(scale_rows);
    for (int r = 0; r < pass->rows && r < kPassRows; ++r) {
      const int64_t row = pass->row_begin + r;
      if (row >= group.begin && row < group.begin + group.rows)
        pass->lhs_scale_rows[r] = scale_rows_before + scale_incl - scale_rows + row - group.begin;
    }
    scale_rows_before += __shfl_sync(0xffffffffu, scale_incl, 31);
  }
}

template <Fp8Format kFormat>
__device__ inline float4 Fp8QuadToFloat4(uint32_t q, float scale) {
  const float2 lo = Fp8PairToFloat2<kFormat>(q & 0xFFFFu);
  const float2 hi = Fp8PairToFloat2<kFormat>(q >> 16);
  return make_float4(__fmul_rn(lo.x, scale), __fmul_rn(lo.y, scale), __fmul_rn(hi.x, scale),
                     __fmul_rn(hi.y, scale));
}

// Eight fp8 elements (the bytes of q, first lowest) times their columns' scales, exactly.
template <Fp8Format kFormat>
__device__ inline void Fp8x8ToScaledFloats(uint2 q, const float (&scale)[kCols],
                                           float (&out)[kCols]) {
#pragma unroll
  for (int pair = 0; pair < kCols / 2; ++pair) {
    const uint32_t word = pair < 2 ? q.x : q.y;
    const float2 v = Fp8PairToFloat2<kFormat>((word >> (16 * (pair % 2))) & 0xFFFFu);
    out[2 * pair] = __fmul_rn(v.x, scale[2 * pair]);
    out[2 * pair + 1] = __fmul_rn(v.y, scale[2 * pair + 1]);
  }
}

// tile.lhs[k][r] = deq(lhs)[row_begin + r, k0 + k] for r < kRows (0 past the pass's rows,
// in rows of no lhs group and past K).
template <Fp8Format kFormat, int kRows>
__device__ void StageLhs(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass,
                         int64_t k0, SharedTile& tile) {
  constexpr int kQuads = kChunkK / 4;
  const int64_t scale_row_bytes = mxfp8::LhsScaleRowBytes(p);
  // Neighbouring threads take neighbouring rows of one quad: 4-way bank conflicts on the
  // stores instead of 32-way.
  for (int t = threadIdx.x; t < kRows * kQuads; t += kThreads) {
    const int r = t % kRows, quad = t / kRows;
    const int64_t k = k0 + 4 * quad;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int64_t scale_row = r < pass.rows ? pass.lhs_scale_rows[r] : -1;
    if (scale_row >= 0 && k < p.k) {
      const uint32_t q = __ldg(reinterpret_cast<const uint32_t*>(o.lhs + (pass.row_begin + r) * p.k + k));
      const uint8_t e = __ldg(o.lhs_scales + scale_row * scale_row_bytes + k / mxfp8::kBlockSize);
      v = Fp8QuadToFloat4<kFormat>(q, __uint_as_float(mxfp8::ScaleBits(e)));
    }
    tile.lhs[4 * quad][r] = v.x;
    tile.lhs[4 * quad + 1][r] = v.y;
    tile.lhs[4 * quad + 2][r] = v.z;
    tile.lhs[4 * quad + 3][r] = v.w;
  }
}

template <Fp8Format kLhs, Fp8Format kRhs, int kRows, typename O>
__device__ void RunPass(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass,
                        SharedTile& tile) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kBlockCols;
  const int64_t n0 = col0 + lane * kCols;
  const bool has_cols = n0 < p.n;  // all 8 or none: N is a multiple of 8
  const uint8_t* w = o.rhs + pass.group * p.k * p.n + n0;
  const uint8_t* w_scales = o.rhs_scales + pass.group * mxfp8::RhsGroupScaleBytes(p) + n0;
  const int64_t w_scale_row_bytes = mxfp8::RhsScaleRowBytes(p);

  float acc[kRows][kCols] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += kChunkK) {
    __syncthreads();  // the previous chunk's readers are done with tile.lhs
    StageLhs<kLhs, kRows>(p, o, pass, k0, tile);
    __syncthreads();
    if (!has_cols) continue;
    const int64_t k_begin = k0 + warp * kWarpK, k_end = MinI64(p.k, k_begin + kWarpK);
    for (int64_t k = k_begin; k < k_end; k += kUnroll) {
      const uint2 scale_bytes = __ldg(reinterpret_cast<const uint2*>(
          w_scales + (k / mxfp8::kBlockSize) * w_scale_row_bytes));
      const int steps = static_cast<int>(MinI64(kUnroll, k_end - k));
      uint2 q[kUnroll];
      if (steps == kUnroll) {  // all loads issued before the first use
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          q[u] = __ldg(reinterpret_cast<const uint2*>(w + (k + u) * p.n));
      } else {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          q[u] = u < steps ? __ldg(reinterpret_cast<const uint2*>(w + (k + u) * p.n))
                           : make_uint2(0, 0);
      }
      float s[kCols];
#pragma unroll
      for (int e = 0; e < kCols; ++e) {
        const uint32_t word = e < 4 ? scale_bytes.x : scale_bytes.y;
        s[e] = __uint_as_float(mxfp8::ScaleBits(static_cast<uint8_t>(word >> (8 * (e % 4)))));
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (u >= steps) break;
        float wv[kCols];
        Fp8x8ToScaledFloats<kRhs>(q[u], s, wv);
        const float* a = tile.lhs[k + u - k0];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float ar = a[r];
#pragma unroll
          for (int e = 0; e < kCols; ++e) acc[r][e] = fmaf(ar, wv[e], acc[r][e]);
        }
      }
    }
  }

  __syncthreads();  // tile.lhs is reused for the partial sums
  if (has_cols) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int e = 0; e < kCols; ++e) tile.partial[warp][r][lane * kCols + e] = acc[r][e];
  }
  __syncthreads();
  O* out = static_cast<O*>(o.out);
  for (int t = threadIdx.x; t < pass.rows * kBlockCols; t += kThreads) {
    const int r = t / kBlockCols, c = t % kBlockCols;
    if (col0 + c >= p.n) continue;
    float sum = tile.partial[0][r][c];
#pragma unroll
    for (int v = 1; v < kWarps; ++v) sum += tile.partial[v][r][c];
    out[(pass.row_begin + r) * p.n + col0 + c] = FromFloat<O>(sum);
  }
}

template <typename O>
__device__ void ZeroRows(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass) {
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kBlockCols;
  const int64_t cols = MinI64(kBlockCols, p.n - col0);
  O* out = static_cast<O*>(o.out);
  for (int64_t t = threadIdx.x; t < pass.rows * cols; t += kThreads)
    out[(pass.row_begin + t / cols) * p.n + col0 + t % cols] = FromFloat<O>(0.0f);
}

template <Fp8Format kLhs, Fp8Format kRhs, typename O>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) Mxfp8RaggedMKernel(RaggedMProblem p,
                                                               RaggedMOperands o, int64_t slots) {
  __shared__ SharedTile tile;
  __shared__ Pass pass;
  __shared__ bool has_work;
  for (int64_t slot = blockIdx.y; slot < slots; slot += gridDim.y) {
    __syncthreads();  // the previous slot is done with `pass`
    if (threadIdx.x < 32) {
      const bool found = LocatePass(p, o.group_sizes, slot, &pass);
      __syncwarp();  // pass.row_begin and rows, written by one lane
      if (found && !pass.tail) LocateLhsScaleRows(p, o.lhs_group_sizes, &pass);
      if (threadIdx.x == 0) has_work = found;
    }
    __syncthreads();
    if (!has_work) continue;
    // `pass` stays in shared memory (read there) until the next slot's first barrier.
    if (pass.tail) {
      ZeroRows<O>(p, o, pass);
    } else if (pass.rows <= 1) {  // unrolled for the next power of two of the pass's rows
      RunPass<kLhs, kRhs, 1, O>(p, o, pass, tile);
    } else if (pass.rows <= 2) {
      RunPass<kLhs, kRhs, 2, O>(p, o, pass, tile);
    } else if (pass.rows <= 4) {
      RunPass<kLhs, kRhs, 4, O>(p, o, pass, tile);
    } else {
      RunPass<kLhs, kRhs, 8, O>(p, o, pass, tile);
    }
  }
}

template <Fp8Format kLhs, Fp8Format kRhs, typename O>
cudaError_t Launch(const RaggedMProblem& p, const RaggedMOperands& o, cudaStream_t stream) {
  const int64_t slots = mxfp8::MaxSumOfTiles(p.rows, p.num_groups, kPassRows) + 1;
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kBlockCols)),
                  static_cast<unsigned>(MinI64(kMaxGridY, slots)));
  Mxfp8RaggedMKernel<kLhs, kRhs, O><<<grid, kThreads, 0, stream>>>(p, o, slots);
  return cudaGetLastError();
}

template <Fp8Format kLhs, Fp8Format kRhs>
cudaError_t LaunchWithFormats(const RaggedMProblem& p, const RaggedMOperands& o,
                              cudaStream_t stream) {
  switch (p.out_type) {
    case ElementType::kF32: return Launch<kLhs, kRhs, float>(p, o, stream);
    case ElementType::kBF16: return Launch<kLhs, kRhs, __nv_bfloat16>(p, o, stream);
    case ElementType::kF16: return Launch<kLhs, kRhs, __half>(p, o, stream);
  }
  return cudaErrorInvalidValue;
}

template <Fp8Format kLhs>
cudaError_t LaunchWithLhsFormat(const RaggedMProblem& p, const RaggedMOperands& o,
                                cudaStream_t stream) {
  return p.rhs_format == Fp8Format::kE4M3 ? LaunchWithFormats<kLhs, Fp8Format::kE4M3>(p, o, stream)
                                          : LaunchWithFormats<kLhs, Fp8Format::kE5M2>(p, o, stream);
}

bool Aligned8(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 8 == 0; }

}  // namespace

cudaError_t LaunchMxfp8RaggedM(const RaggedMProblem& p, const RaggedMOperands& o,
                               cudaStream_t stream) {
  if (p.rows == 0 || p.n == 0) return cudaSuccess;
  if (p.k % 4 != 0 || p.n % 8 != 0 || !Aligned8(o.lhs) || !Aligned8(o.rhs) ||
      !Aligned8(o.rhs_scales))
    return cudaErrorInvalidValue;
  return p.lhs_format == Fp8Format::kE4M3
             ? LaunchWithLhsFormat<Fp8Format::kE4M3>(p, o, stream)
             : LaunchWithLhsFormat<Fp8Format::kE5M2>(p, o, stream);
}

}  // namespace jgg::cuda
