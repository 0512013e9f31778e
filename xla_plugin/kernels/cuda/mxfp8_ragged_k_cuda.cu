// The fused MXFP8 wgrad: out[g] = x_g^T . dy_g on the values dequantized on load. A block owns
// 64 output rows (of K) of one group; its threads own 8 columns each (a block spans up to 2048
// columns of N, more loop). The group's x values for the block's rows are dequantized once
// into shared memory.
//
// Groups of at most 8 rows (every group in decode) are streamed with f32 multiply-adds: each
// thread dequantizes its dy values once into registers, then computes and stores the block's
// output rows one after another (like the BF16 streamed wgrad, ragged_k_streamed.cu), so the
// kernel runs at the speed of writing the result. Groups of kMmaMinRows to 128 rows run on
// tensor cores (bf16 mma of the exact dequantized values; MmaGroup below). The others
// accumulate 8 output rows per thread at a time over all their token rows in f32 (128 staged
// at a time), decoding their dy codes again for each 8 (rows of one 32-row block share scale
// factors, computed once per block).
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

#include <algorithm>
#include <type_traits>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/bf16_fast_scales.cuh"
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
// the rows past the group multiplied by zeros), the block's output rows out[0, out_rows):
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

// --- groups of kMmaMinRows to 128 rows on tensor cores -------------------------------------
// out[k][n] += sum over token rows t of x[t][k] dy[t][n] as bf16 mma.sync m16n8k16 (f32
// accumulation) on the dequantized values, converted as the wgmma kernel converts them
// (bf16_fast_scales.cuh): while every nonzero code's scale is in FastScales' range and no
// code or scale is NaN (or Inf), the bf16 values and their products are exact and normal, so
// the result is an f32 sum of exact products, as the dequantize backend's BF16 GEMM, in the
// tensor cores' order (a block that falls back sums in another: last-bit differences). A
// block that meets another scale or code redoes its outputs on the multiply-add path.
// x's values for the block's 64 output rows are staged once ([token][k], bf16); each warp then
// takes 16-column strips of the chunk, staging dy's values of 64 token rows at a time in its
// own [token][n] tile (the next window's loads in flight meanwhile), and reads both as mma
// fragments with ldmatrix.trans (the contraction runs along the tiles' rows).
constexpr int kMmaPad = 8;                      // bf16 per shared row: conflict-free ldmatrix
constexpr int kStripCols = 16;                  // a warp's columns at a time: two mma n-tiles
constexpr int kWindowTokens = 64;               // dy token rows a warp stages at a time
constexpr int kMmaSteps = kWindowTokens / 16;   // mma k-steps of a window
// Groups of fewer rows take the multiply-add path, which beats a tensor-core block there.
// H200 (2026-11-30), decode-zipf / decode wgrad ms (multiply-adds for every group: 0.276 /
// 0.214): tensor cores from 9 rows 0.235 / 0.218, from 16 0.231 / 0.214, from 32 0.222 /
// 0.213 (with codes converted through f32, before: from 9 0.249 / 0.222, from 32 0.231).
constexpr int kMmaMinRows = 32;

struct MmaShared {
  __nv_bfloat16 x[kStagedRows][kBlockRows + kMmaPad];                                // 18 KB
  __nv_bfloat16 dy[kMaxThreads / 32][kWindowTokens][kStripCols + kMmaPad];           // 24 KB
};

// 8 codes times their scales as 8 bf16 (4 words), by ExactScaling's integer conversion;
// `exact` is cleared where a nonzero code's scale is outside FastScales' range, a scale is
// the NaN scale or a code is NaN or Inf (see above).
template <Fp8Format kFormat>
__device__ inline uint4 DequantizeBf16x8(uint2 codes, uint2 scales, bool* exact) {
  using F = FastScales<kFormat>;
  const uint32_t words[2] = {codes.x, codes.y}, scale_words[2] = {scales.x, scales.y};
  uint32_t out[4], outside_codes = 0;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    uint32_t factors[2];
    outside_codes |= words[w] & F::Factors4(scale_words[w], factors);
    F::Exact::Convert(words[w], factors, &out[2 * w]);
  }
  if (F::Exact::AnySpecial(words) || (outside_codes & 0x7F7F7F7Fu) != 0 ||
      AnyNanScale(scales.x) || AnyNanScale(scales.y))
    *exact = false;
  return make_uint4(out[0], out[1], out[2], out[3]);
}

__device__ inline void LoadMatrixX4Trans(const void* row, uint32_t (&r)[4]) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// c += a . b, bf16 in, f32 accumulation.
__device__ inline void MmaBf16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// What a lane loads of one window of a strip: token rows window + lane / 2 + 16 j, 8 columns
// at n0 = strip + 8 (lane % 2) (zeros past the group's rows and N).
struct DyWindowLoads {
  uint2 codes[kMmaSteps], scales[kMmaSteps];
};

template <Fp8Format kDy>
__device__ inline DyWindowLoads LoadDyWindow(const RaggedKProblem& p, const RaggedKOperands& o,
                                             int64_t begin, int rows, const int64_t* dy_scale_row,
                                             int window, int64_t strip) {
  const int lane = threadIdx.x % 32;
  const int64_t n0 = strip + 8 * (lane % 2);
  DyWindowLoads l;
#pragma unroll
  for (int j = 0; j < kMmaSteps; ++j) {
    const int t = window + lane / 2 + 16 * j;
    const int64_t scale_row = t < rows && n0 < p.n ? dy_scale_row[t] : -1;
    l.codes[j] = l.scales[j] = make_uint2(0, 0);
    if (scale_row >= 0) {
      l.codes[j] = __ldg(reinterpret_cast<const uint2*>(o.rhs + (begin + t) * p.n + n0));
      l.scales[j] = __ldg(reinterpret_cast<const uint2*>(o.rhs_scales + scale_row + n0));
    }
  }
  return l;
}

// The block's outputs for a group of rows <= kStagedRows (scale rows located) on tensor
// cores; false (every thread) if a value was not exact in bf16, the outputs then unfinished.
template <Fp8Format kX, Fp8Format kDy, typename O>
__device__ bool MmaGroup(const RaggedKProblem& p, const RaggedKOperands& o, const Shared& s,
                         MmaShared& m, int64_t begin, int rows, int64_t k0, int block_rows,
                         O* out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int padded_rows = (rows + 15) / 16 * 16;
  bool exact = true;
  // x's values [token][k] for the block's output rows, zeros past the rows and K: each
  // thread's items kBatch at a time, their loads issued together.
  constexpr int kOctets = kBlockRows / kVector, kBatch = 2;
  const int items = padded_rows * kOctets;
  for (int e0 = threadIdx.x; e0 < items; e0 += kBatch * blockDim.x) {
    uint2 codes[kBatch], scales[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int e = e0 + b * blockDim.x, t = e / kOctets, i0 = e % kOctets * kVector;
      codes[b] = scales[b] = make_uint2(0, 0);
      if (e < items && t < rows && i0 < block_rows && s.x_scale_row[t] >= 0) {
        codes[b] = __ldg(reinterpret_cast<const uint2*>(o.lhs + (begin + t) * p.k + k0 + i0));
        scales[b] =
            __ldg(reinterpret_cast<const uint2*>(o.lhs_scales + s.x_scale_row[t] + k0 + i0));
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int e = e0 + b * blockDim.x;
      if (e < items)
        *reinterpret_cast<uint4*>(&m.x[e / kOctets][e % kOctets * kVector]) =
            DequantizeBf16x8<kX>(codes[b], scales[b], &exact);
    }
  }
  __syncthreads();

  auto& tile = m.dy[warp];
  const int g = lane / 4, q = lane % 4;
  const int64_t chunk_cols = static_cast<int64_t>(blockDim.x) * kVector;
  const int64_t chunks = CeilDiv(p.n, chunk_cols);
  const int windows = (padded_rows + kWindowTokens - 1) / kWindowTokens;
  // The warp's (strip, window) items in order; the next one's loads are issued before the
  // current one is staged and multiplied.
  const auto strip_of = [&](int64_t item, int64_t* strip, int* window) {
    const int64_t strips_per_chunk = chunk_cols / kStripCols;
    const int64_t strip_index = item / windows;  // the warp's strip_index-th strip
    const int64_t global = warp + strip_index * warps;  // strip among the block's chunks' strips
    const int64_t chunk = blockIdx.y + global / strips_per_chunk * gridDim.y;
    *strip = chunk * chunk_cols + global % strips_per_chunk * kStripCols;
    *window = static_cast<int>(item % windows) * kWindowTokens;
    return chunk < chunks && *strip < p.n;
  };
  int64_t strip;
  int window;
  DyWindowLoads next;
  bool has_next = strip_of(0, &strip, &window);
  if (has_next) next = LoadDyWindow<kDy>(p, o, begin, rows, s.dy_scale_row, window, strip);
  float acc[kBlockRows / 16][2][4] = {};
  for (int64_t item = 0; has_next; ++item) {
    const DyWindowLoads current = next;
    const int64_t current_strip = strip;
    const int current_window = window;
    has_next = strip_of(item + 1, &strip, &window);
    if (has_next) next = LoadDyWindow<kDy>(p, o, begin, rows, s.dy_scale_row, window, strip);
    __syncwarp();  // the tile's previous window is read
#pragma unroll
    for (int j = 0; j < kMmaSteps; ++j) {
      *reinterpret_cast<uint4*>(&tile[lane / 2 + 16 * j][8 * (lane % 2)]) =
          DequantizeBf16x8<kDy>(current.codes[j], current.scales[j], &exact);
    }
    __syncwarp();
    const int steps = min(kMmaSteps, (padded_rows - current_window) / 16);
    for (int step = 0; step < steps; ++step) {
      const int t0 = 16 * step;  // in the window
      uint32_t b[4];  // n-tile 0: b[0], b[1]; n-tile 1: b[2], b[3]
      LoadMatrixX4Trans(&tile[t0 + lane % 8 + 8 * (lane / 8 % 2)][8 * (lane / 16)], b);
#pragma unroll
      for (int mt = 0; mt < kBlockRows / 16; ++mt) {
        uint32_t a[4];
        LoadMatrixX4Trans(&m.x[current_window + t0 + lane % 8 + 8 * (lane / 16)]
                              [16 * mt + 8 * (lane / 8 % 2)], a);
        MmaBf16(a, b[0], b[1], acc[mt][0]);
        MmaBf16(a, b[2], b[3], acc[mt][1]);
      }
    }
    if (current_window + kWindowTokens >= padded_rows) {  // the strip's last window: store it
#pragma unroll
      for (int mt = 0; mt < kBlockRows / 16; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int64_t col = current_strip + 8 * nt + 2 * q;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = 16 * mt + g + 8 * h;
            if (row < block_rows && col < p.n)
              StorePair(out + row * p.n + col, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
            acc[mt][nt][2 * h] = acc[mt][nt][2 * h + 1] = 0.0f;
          }
        }
    }
  }
  return __syncthreads_and(exact);
}

// Grid: x = blocks of kBlockRows output rows, y = column chunks of blockDim.x * 8 (strided when
// fewer than the chunks), z = group.
template <Fp8Format kX, Fp8Format kDy, typename O>
__global__ void __launch_bounds__(kMaxThreads, 2)
    Mxfp8RaggedKKernel(RaggedKProblem p, RaggedKOperands o) {
  // deq(x)[token row][output row] for the multiply-add and streamed paths, or the tensor-core
  // path's tiles.
  constexpr size_t kSmemBytes = std::max(sizeof(float[kStagedRows][kBlockRows]), sizeof(MmaShared));
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
  auto& x_values = *reinterpret_cast<float (*)[kStagedRows][kBlockRows]>(smem);
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
  const bool gemm_grouped =
      o.lhs_group_sizes == o.group_sizes && o.rhs_group_sizes == o.group_sizes;

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

  if (rows >= kMmaMinRows && rows <= kStagedRows) {
    locate(0, static_cast<int>(rows));
    if (MmaGroup<kX, kDy, O>(p, o, s, *reinterpret_cast<MmaShared*>(smem), begin,
                             static_cast<int>(rows), k0, block_rows, out))
      return;
    // Not exact in bf16: the multiply-add path below rewrites every output of the block (its
    // first stage is of the located rows, after MmaGroup's closing barrier).
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
