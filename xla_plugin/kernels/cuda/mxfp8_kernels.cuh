// Grouped MXFP8 quantize / dequantize on Hopper: memory-bound streaming kernels over the jobs
// of mxfp8_jobs.cuh, in 8-byte strips (mxfp8_wide_kernels.cuh has the 16-byte tiles).
//
// Each thread owns an 8-byte column strip (4 bf16/f16 or 2 f32 values; dequantize: 4 fp8 bytes)
// of a tile's 32 rows and issues the 32 loads of its strip before it uses any (256 bytes in
// flight per thread), so:
//   rowwise: a 32-element block spans 32 / 4 = 8 (or 16) neighbouring lanes: amax by xor-shuffle
//            (two rows per shuffle, packed);
//   colwise: a thread holds whole 32x1 blocks of its columns: amax and conversion in registers;
//   both:    one read of the input from DRAM does both (the rows wait in shared memory between
//            the two passes), nothing is read twice from DRAM.
// Tiles wholly inside their group (nearly all) take a path with no per-row bounds or scalar
// fallbacks: at 4 elements per thread and row, those cost more instructions than the
// conversion. Elements use the hardware cvt.rn.satfinite (bit-identical to common/mxfp8_math.h's
// integer rounding, which the CPU path uses; the tests compare both with one NumPy reference).
//
// Device code only (the launches are in mxfp8_cuda.cu, their grids in mxfp8_launch_config.cuh),
// so that tests/test_mxfp8_emulated.py can run these exact kernels on the CPU under a SIMT
// emulator.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_KERNELS_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_KERNELS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/mxfp8_math.h"
#include "xla_plugin/common/mxfp8_problem.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_jobs.cuh"

namespace jgg::cuda::mxfp8_kernels {

// --- 8-byte strips of elements -----------------------------------------------------------------

// Element k of T elements packed little-endian in 32-bit words, as f32 (exact).
template <typename T>
__device__ inline float PackedValue(const uint32_t* w, int k) {
  if constexpr (sizeof(T) == 4) return __uint_as_float(w[k]);
  const uint32_t bits = (w[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(bits << 16);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// The first kCount elements of T packed in `w`, as f32.
template <typename T, int kCount>
__device__ inline void UnpackValues(const uint32_t* w, float (&v)[kCount]) {
#pragma unroll
  for (int k = 0; k < kCount; ++k) v[k] = PackedValue<T>(w, k);
}

// Rows of a 32-row tile that lie below `remaining` rows of the region (clamped to [0, 32]).
__device__ inline int TileRowsBelow(int64_t remaining) {
  return remaining <= 0 ? 0 : remaining >= kTileRows ? kTileRows : static_cast<int>(remaining);
}

template <typename T>
struct Strip {
  static constexpr int kCount = kStripBytes / sizeof(T);
  static constexpr int kBits = 8 * sizeof(T);
  static __device__ float Get(const uint2& v, int k) {
    const uint32_t w[2] = {v.x, v.y};
    return PackedValue<T>(w, k);
  }
  // The first `count` elements at `p` (the rest 0), element by element: ragged edges and
  // unaligned pointers (whole aligned strips take one 8-byte load instead).
  static __device__ uint2 LoadPartial(const T* p, int64_t count) {
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      if (k < count) {
        if constexpr (kBits == 32) {
          w[k] = __ldg(reinterpret_cast<const uint32_t*>(p) + k);
        } else {
          w[k / 2] |= static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(p) + k))
                      << (16 * (k % 2));
        }
      }
    }
    return make_uint2(w[0], w[1]);
  }
};

// Stores n <= 4 fp8 bytes (packed little-endian in `bytes`) at p: one store when whole/aligned.
template <int kCount>
__device__ inline void StoreBytes(uint8_t* p, uint32_t bytes, int64_t count, bool vector) {
  if (count >= kCount && vector) {
    if constexpr (kCount == 4) {
      *reinterpret_cast<uint32_t*>(p) = bytes;
    } else {
      *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(bytes);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    if (k < count) p[k] = static_cast<uint8_t>(bytes >> (8 * k));
  }
}

// --- element math (hardware) ----------------------------------------------------------------

template <Fp8Format kFormat>
__device__ inline float MaxNormRcp() {
  return __uint_as_float(kFormat == Fp8Format::kE4M3 ? 0x3B124925u : 0x37924925u);
}

// TE's float_to_e8m0(amax * fl32(1/max_norm)) with the FPU: the GPU multiplies denormals
// exactly (no ftz), so this equals mxfp8::ScaleExponent's integer rounding. amax is never NaN
// here (maxima start at 0 and ignore NaN), so s is finite or +Inf, and the rounding up to a power
// of two is one add: a non-zero mantissa carries into the exponent; the clamp keeps exponent
// 0xFE and Inf at 0xFE (TE never rounds up to 0xFF), and fp32-denormal s <= 2^-127 gives 0.
template <Fp8Format kFormat>
__device__ inline uint8_t ScaleExponentOf(float amax) {
  const uint32_t s = __float_as_uint(__fmul_rn(amax, MaxNormRcp<kFormat>()));
  const uint32_t e = (s + 0x7FFFFFu) >> 23;
  return s <= 0x400000u ? 0 : static_cast<uint8_t>(e < 0xFEu ? e : 0xFEu);
}

// Elementwise max(a, |b|) of two packed pairs of 16-bit elements (a >= 0), a NaN ignored as
// fmaxf ignores it (max.bf16x2 / max.f16x2 return the other operand; two NaNs give NaN):
// maxima without unpacking the elements.
template <typename T>
__device__ inline uint32_t AbsMaxPair(uint32_t a, uint32_t b) {
  using Pair = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
  const Pair m =
      __hmax2(*reinterpret_cast<const Pair*>(&a), __habs2(*reinterpret_cast<const Pair*>(&b)));
  return *reinterpret_cast<const uint32_t*>(&m);
}

// kCount values scaled by their blocks' factors, as packed fp8 bytes (element k in byte k of
// `bytes`, ceil(kCount / 4) words). The library's fp8 NaN is 0x7F whatever the sign
// or payload (the CPU path writes the same): FMUL turns any NaN into the canonical 0x7FFFFFFF
// and satfinite converts that to 0x7F (e4m3 and e5m2; H200, 2026-11-29,
// tools/device/nan_probe.cu), so the scaling multiply is the whole NaN fix.
template <Fp8Format kFormat, int kCount>
__device__ inline void QuantizeValues(const float* v, const float* factor, uint32_t* bytes) {
  constexpr __nv_fp8_interpretation_t kKind = kFormat == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
#pragma unroll
  for (int b = 0; b < (kCount + 3) / 4; ++b) bytes[b] = 0;
#pragma unroll
  for (int k = 0; k < kCount; k += 2) {
    const uint32_t pair = __nv_cvt_float2_to_fp8x2(
        make_float2(__fmul_rn(v[k], factor[k]), __fmul_rn(v[k + 1], factor[k + 1])),
        __NV_SATFINITE, kKind);
    bytes[k / 4] |= pair << (8 * (k % 4));
  }
}

// The same of kCount packed elements of type In.
template <typename In, Fp8Format kFormat, int kCount>
__device__ inline void QuantizePacked(const uint32_t* w, const float* factor, uint32_t* bytes) {
  float v[kCount];
  UnpackValues<In>(w, v);
  QuantizeValues<kFormat, kCount>(v, factor, bytes);
}

// The strip's elements scaled by their blocks' factors, as packed fp8 bytes.
template <typename In, Fp8Format kFormat>
__device__ inline uint32_t QuantizeStrip(const uint2& v, const float* factor) {
  const uint32_t w[2] = {v.x, v.y};
  uint32_t bytes[1];
  QuantizePacked<In, kFormat, Strip<In>::kCount>(w, factor, bytes);
  return bytes[0];
}

// --- quantize ---------------------------------------------------------------------------------

// Where one thread's strip of a tile lives. kFull (whole tile inside the region's data and
// capacity, vector access): the compiler drops every per-row bound and scalar path, which
// otherwise cost more instructions than the conversion itself; the choice is per CTA, so that
// shuffles stay in one code path per warp.
struct StripSpan {
  int64_t stride;     // elements between rows
  int64_t base;       // element offset of the strip's first element
  int64_t col0;       // region-relative column of the strip
  int64_t data_cols;  // strip columns (from col0) holding group data, and inside the capacity
  int64_t cap_cols;
  int data_rows;      // tile rows holding group data (the rest read as 0) / inside the capacity
  int cap_rows;
  bool vector;        // whole-strip accesses are aligned
};

template <int kVec>
__device__ inline StripSpan MakeStripSpan(const Grid& grid, const TileJob& job) {
  const Region& r = job.region;
  StripSpan t;
  t.stride = grid.shape.cols;
  const int64_t row0 = job.row_tile * kTileRows;
  t.col0 = job.col_tile * grid.tile_cols + threadIdx.x * kVec;
  t.base = r.elem_offset + row0 * t.stride + t.col0;
  t.data_cols = r.cols - t.col0;
  t.cap_cols = r.cap_cols - t.col0;
  t.data_rows = t.data_cols > 0 ? TileRowsBelow(r.rows - row0) : 0;
  t.cap_rows = t.cap_cols > 0 ? TileRowsBelow(r.cap_rows - row0) : 0;
  t.vector = grid.aligned && r.elem_offset % kVec == 0 && t.stride % kVec == 0;
  return t;
}

// The same for every thread of the CTA: the whole tile holds data and is written with vectors.
__device__ inline bool FullTile(const Grid& grid, const TileJob& job) {
  const Region& r = job.region;
  const int64_t row_end = (job.row_tile + 1) * kTileRows;
  const int64_t col_end = (job.col_tile + 1) * grid.tile_cols;
  return grid.aligned && r.elem_offset % 4 == 0 && grid.shape.cols % 4 == 0 &&
         row_end <= r.rows && row_end <= r.cap_rows && col_end <= r.cols && col_end <= r.cap_cols;
}

// Amax over their 32-element blocks of two rows, each kWords packed words of In per lane (the
// lanes of a block exchange by xor-shuffle; full-warp shuffles). 16-bit elements: both rows
// travel in one packed word, halving the shuffles; NaN is ignored as fmaxf ignores it.
template <typename In, int kLanesPerBlock, int kWords>
__device__ inline void PairRowAmax(const uint32_t (&a)[kWords], const uint32_t (&b)[kWords],
                                   float (&amax)[2]) {
  if constexpr (sizeof(In) == 4) {
    const uint32_t* rows[2] = {a, b};
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      amax[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < kWords; ++k) amax[u] = fmaxf(amax[u], fabsf(__uint_as_float(rows[u][k])));
#pragma unroll
      for (int d = 1; d < kLanesPerBlock; d <<= 1) {
        amax[u] = fmaxf(amax[u], __shfl_xor_sync(0xFFFFFFFFu, amax[u], d));
      }
    }
  } else {
    uint32_t ma = 0, mb = 0;
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      ma = AbsMaxPair<In>(ma, a[k]);
      mb = AbsMaxPair<In>(mb, b[k]);
    }
    // (row a, row b) of the even and of the odd columns
    uint32_t m = AbsMaxPair<In>((ma & 0xFFFFu) | (mb << 16), (ma >> 16) | (mb & 0xFFFF0000u));
#pragma unroll
    for (int d = 1; d < kLanesPerBlock; d <<= 1) {
      m = AbsMaxPair<In>(m, __shfl_xor_sync(0xFFFFFFFFu, m, d));
    }
    amax[0] = PackedValue<In>(&m, 0);
    amax[1] = PackedValue<In>(&m, 1);
  }
}

// All 32 rows of a thread's strip are loaded before any is used: the loads of the whole tile
// are in flight at once and both orientations convert from the same registers.
template <typename In, bool kRow, bool kCol, Fp8Format kFormat, bool kFull>
__device__ void QuantizeStrips(const mxfp8::QuantizeOperands& o, bool swizzled,
                               const TileJob& job, const StripSpan& t, uint32_t* stash) {
  using S = Strip<In>;
  constexpr int kVec = S::kCount;
  constexpr int kLanesPerBlock = kBlockSize / kVec;
  const Region& r = job.region;
  const int data_rows = kFull ? kTileRows : t.data_rows;
  const int cap_rows = kFull ? kTileRows : t.cap_rows;
  const bool vector = kFull || t.vector;
  const int64_t stride = t.stride;
  // Distinct buffers (XLA never aliases an operand with a result here): lets the compiler
  // keep all loads ahead of the stores.
  const In* __restrict__ x = static_cast<const In*>(o.x) + t.base;

  uint2 v[kTileRows];
  if (kFull || (vector && t.data_cols >= kVec)) {
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      v[i] = i < data_rows ? __ldg(reinterpret_cast<const uint2*>(x + i * stride))
                           : make_uint2(0, 0);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      v[i] = i < data_rows ? S::LoadPartial(x + i * stride, t.data_cols) : make_uint2(0, 0);
    }
  }

  // Colwise scales first (packed maxima over the registers), then the rowwise pass, then the
  // colwise conversions.
  float col_factor[kVec];
  if constexpr (kCol) {
    float col_max[kVec];
    if constexpr (S::kBits == 16) {
      uint32_t acc[2] = {0, 0};  // packed |x| maxima of columns (0, 1) and (2, 3)
#pragma unroll
      for (int i = 0; i < kTileRows; ++i) {
        acc[0] = AbsMaxPair<In>(acc[0], v[i].x);
        acc[1] = AbsMaxPair<In>(acc[1], v[i].y);
      }
#pragma unroll
      for (int k = 0; k < kVec; ++k) col_max[k] = S::Get(make_uint2(acc[0], acc[1]), k);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) col_max[k] = 0.0f;
#pragma unroll
      for (int i = 0; i < kTileRows; ++i) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) col_max[k] = fmaxf(col_max[k], fabsf(S::Get(v[i], k)));
      }
    }
    const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/true);
    uint32_t scale_bytes = 0;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const uint8_t e = ScaleExponentOf<kFormat>(col_max[k]);
      scale_bytes |= static_cast<uint32_t>(e) << (8 * k);
      col_factor[k] = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
    }
    if (data_rows > 0) {
      // Compact scales of kVec neighbouring columns are contiguous and aligned (offsets are
      // multiples of 512, rows of 128): one store; swizzled ones are 16 bytes apart.
      if (!swizzled) {
        StoreBytes<kVec>(
            o.col_scales + r.scale_offset + mxfp8::ScaleIndex(m, true, false, job.row_tile, t.col0),
            scale_bytes, t.data_cols, vector);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          if (k < t.data_cols) {
            o.col_scales[r.scale_offset +
                         mxfp8::ScaleIndex(m, true, true, job.row_tile, t.col0 + k)] =
                static_cast<uint8_t>(scale_bytes >> (8 * k));
          }
        }
      }
    }
  }

  // "Both": the tile goes to shared memory and each pass reads its rows back from there (a
  // thread reads only its own words: no barrier), so the registers of the loads die here. Held
  // in registers, ptxas interleaves the two passes and needs 254 registers (or spills).
  constexpr bool kStash = kRow && kCol;
  if constexpr (kStash) {
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      volatile uint32_t* p = stash + 2 * i * kMaxThreads + threadIdx.x;
      p[0] = v[i].x;
      p[kMaxThreads] = v[i].y;
    }
  }
  auto row_bits = [&](int i) -> uint2 {
    if constexpr (kStash) {
      const volatile uint32_t* p = stash + 2 * i * kMaxThreads + threadIdx.x;
      return make_uint2(p[0], p[kMaxThreads]);
    } else {
      return v[i];
    }
  };

  // Rowwise scale (row0 + i, block): rows are padded_cols bytes apart compact, 16 bytes apart
  // swizzled (the 32 rows of a tile share their 128x4 tile and its row group).
  uint8_t* __restrict__ row_scale = nullptr;
  int64_t row_scale_step = 0;
  if constexpr (kRow) {
    const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/false);
    row_scale = o.row_scales + r.scale_offset +
                mxfp8::ScaleIndex(m, false, swizzled, job.row_tile * kTileRows,
                                  t.col0 / kBlockSize);
    row_scale_step = swizzled ? 16 : m.padded_cols;
  }
  if constexpr (kRow) {
    const bool writes_scale = threadIdx.x % kLanesPerBlock == 0 && (kFull || t.data_cols > 0);
    uint8_t* __restrict__ out = o.row_data + t.base;
#pragma unroll
    for (int i = 0; i < kTileRows; i += 2) {
      // All lanes shuffle (full-warp shuffles), whatever their rows and columns.
      const uint2 rows[2] = {row_bits(i), row_bits(i + 1)};
      float amax[2];
      const uint32_t w0[2] = {rows[0].x, rows[0].y}, w1[2] = {rows[1].x, rows[1].y};
      PairRowAmax<In, kLanesPerBlock, 2>(w0, w1, amax);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int row = i + u;
        const uint8_t e = ScaleExponentOf<kFormat>(amax[u]);
        if (writes_scale && row < data_rows) row_scale[row * row_scale_step] = e;
        if (row < cap_rows) {
          float factor[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) factor[k] = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
          StoreBytes<kVec>(out + row * stride, QuantizeStrip<In, kFormat>(rows[u], factor),
                           kFull ? kVec : t.cap_cols, vector);
        }
      }
    }
  }
  if constexpr (kCol) {
    uint8_t* __restrict__ out = o.col_data + t.base;
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      if (i < cap_rows) {
        StoreBytes<kVec>(out + i * stride, QuantizeStrip<In, kFormat>(row_bits(i), col_factor),
                         kFull ? kVec : t.cap_cols, vector);
      }
    }
  }
}

template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
__device__ void QuantizeTile(const Grid& grid, const mxfp8::QuantizeOperands& o, bool swizzled,
                             const TileJob& job) {
  // "Both": the tile's rows, word w of row i of thread t at [(2 * i + w) * kMaxThreads + t].
  __shared__ uint32_t stash[kRow && kCol ? 2 * kTileRows * kMaxThreads : 1];
  const StripSpan t = MakeStripSpan<Strip<In>::kCount>(grid, job);
  if (FullTile(grid, job)) {
    QuantizeStrips<In, kRow, kCol, kFormat, true>(o, swizzled, job, t, stash);
  } else {
    QuantizeStrips<In, kRow, kCol, kFormat, false>(o, swizzled, job, t, stash);
  }
  if constexpr (kRow) {
    ZeroOwnedScalePadding(job.region, job.row_tile, job.col_tile, grid.tile_cols, false, swizzled,
                          o.row_scales);
  }
  if constexpr (kCol) {
    ZeroOwnedScalePadding(job.region, job.row_tile, job.col_tile, grid.tile_cols, true, swizzled,
                          o.col_scales);
  }
}

template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
__global__ void __launch_bounds__(kMaxThreads, kRow && kCol ? kMinCtasPerSmBoth : kMinCtasPerSm)
    QuantizeKernel(Grid grid, mxfp8::QuantizeOperands o, bool swizzled) {
  ForEachJob(grid, o.group_sizes, o.job_counter, [&](const TileJob& job) {
    if (job.has_tile) {
      QuantizeTile<In, kRow, kCol, kFormat>(grid, o, swizzled, job);
    } else {
      ZeroScaleBytes(o.row_scales, job.tail_begin, job.tail_end, grid.aligned);
      ZeroScaleBytes(o.col_scales, job.tail_begin, job.tail_end, grid.aligned);
    }
  });
}

// --- dequantize -------------------------------------------------------------------------------

template <typename Out>
__device__ inline uint32_t OutBits(float y) {
  if constexpr (std::is_same_v<Out, float>) {
    return isnan(y) ? 0x7FC00000u : __float_as_uint(y);
  } else if constexpr (std::is_same_v<Out, __nv_bfloat16>) {
    return isnan(y) ? 0x7FC0u : __bfloat16_as_ushort(__float2bfloat16_rn(y));
  } else {
    return isnan(y) ? 0x7E00u : __half_as_ushort(__float2half_rn(y));
  }
}

// One output word's ExactScaling factors: two 16-bit elements' (e0 first), or an f32's (e0).
template <typename Out, Fp8Format kFormat>
__device__ inline uint32_t FactorWord(uint32_t e0, uint32_t e1) {
  using Exact = ExactScaling<Out, kFormat>;
  if constexpr (sizeof(Out) == 4) {
    return Exact::FactorBits(e0);
  } else {
    return Exact::FactorBits(e0) | (Exact::FactorBits(e1) << 16);
  }
}

// The column side of a dequantize tile: the colwise scale bytes of its kCodes columns (one
// block row; 0 where there is no column, and for rowwise tiles), their ExactScaling factor
// words, and whether every one of them allows the exact integer path. Set(), then Finish().
template <typename Out, Fp8Format kFormat, int kCodes>
struct ColumnScales {
  static constexpr int kWords = kCodes * sizeof(Out) / 4;  // of one row's output
  uint32_t e_words[kCodes / 4] = {};  // column k's scale byte in byte k % 4 of word k / 4
  uint32_t factor[kWords];
  bool exact;

  __device__ uint32_t E(int k) const { return (e_words[k / 4] >> (8 * (k % 4))) & 0xFFu; }
  __device__ void Set(int k, uint8_t e) {
    e_words[k / 4] |= static_cast<uint32_t>(e) << (8 * (k % 4));
  }

  __device__ void Finish() {
    constexpr int kPerWord = 4 / sizeof(Out);
    exact = true;
#pragma unroll
    for (int k = 0; k < kCodes; ++k) exact = exact && ExactScaling<Out, kFormat>::InRange(E(k));
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      factor[w] = FactorWord<Out, kFormat>(E(w * kPerWord), E(w * kPerWord + kPerWord - 1));
    }
  }
};

// One row's kCodes fp8 codes (first lowest in codes[0]) as packed Out words. Exactly through
// ExactScaling when the whole row is data, its scales allow it (`scales_exact`, `factors`)
// and no code is NaN/Inf; else element by element from scale_of(k), the f32 factor of code
// k. Elements at or past `valid` (the row's data columns; 0 for a row outside the data) are 0.
template <typename Out, Fp8Format kFormat, int kCodes, typename ScaleOf>
__device__ inline void DequantizeRow(const uint32_t (&codes)[kCodes / 4], bool scales_exact,
                                     const uint32_t (&factors)[kCodes * sizeof(Out) / 4],
                                     int64_t valid, ScaleOf scale_of,
                                     uint32_t (&words)[kCodes * sizeof(Out) / 4]) {
  using Exact = ExactScaling<Out, kFormat>;
  constexpr int kWordsPer4 = sizeof(Out);  // output words per code word
  if (scales_exact && valid >= kCodes && !Exact::AnySpecial(codes)) {
#pragma unroll
    for (int c = 0; c < kCodes / 4; ++c) {
      Exact::Convert(codes[c], &factors[c * kWordsPer4], &words[c * kWordsPer4]);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kCodes; k += 2) {
    const float2 v = Fp8PairToFloat2<kFormat>((codes[k / 4] >> (8 * (k % 4))) & 0xFFFFu);
    const uint32_t b0 = k < valid ? OutBits<Out>(__fmul_rn(v.x, scale_of(k))) : 0u;
    const uint32_t b1 = k + 1 < valid ? OutBits<Out>(__fmul_rn(v.y, scale_of(k + 1))) : 0u;
    if constexpr (sizeof(Out) == 4) {
      words[k] = b0;
      words[k + 1] = b1;
    } else {
      words[k / 2] = b0 | (b1 << 16);
    }
  }
}

// Row i of a dequantize tile, scaled by the tile's column scales (colwise) or by its own
// rowwise scale byte e_row; elements at or past `valid` are 0 (see DequantizeRow).
template <typename Out, Fp8Format kFormat, int kCodes>
__device__ inline void DequantizeTileRow(const uint32_t (&codes)[kCodes / 4], bool colwise,
                                         const ColumnScales<Out, kFormat, kCodes>& cols,
                                         uint32_t e_row, int64_t valid,
                                         uint32_t (&words)[kCodes * sizeof(Out) / 4]) {
  constexpr int kWords = kCodes * sizeof(Out) / 4;
  const float s_row = __uint_as_float(mxfp8::ScaleBits(static_cast<uint8_t>(e_row)));
  uint32_t factors[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    factors[w] = colwise ? cols.factor[w] : FactorWord<Out, kFormat>(e_row, e_row);
  }
  DequantizeRow<Out, kFormat, kCodes>(
      codes, colwise ? cols.exact : ExactScaling<Out, kFormat>::InRange(e_row), factors, valid,
      [&](int k) { return colwise ? __uint_as_float(mxfp8::ScaleBits(static_cast<uint8_t>(cols.E(k)))) : s_row; },
      words);
}

// Each thread converts kDequantVec fp8 bytes of all 32 rows; the loads of the tile (data and
// rowwise scales) are all issued before the first conversion.
template <typename Out, Fp8Format kFormat, bool kFull>
__device__ void DequantizeStrips(const mxfp8::DequantizeOperands& o, bool colwise, bool swizzled,
                                 const TileJob& job, const StripSpan& t) {
  constexpr int kVec = kDequantVec;
  constexpr int kWords = kVec * sizeof(Out) / 4;  // of one row's output
  const Region& r = job.region;
  const int data_rows = kFull ? kTileRows : t.data_rows;
  const int cap_rows = kFull ? kTileRows : t.cap_rows;
  const int64_t data_cols = kFull ? kVec : t.data_cols;
  const int64_t cap_cols = kFull ? kVec : t.cap_cols;
  const bool vector = kFull || t.vector;
  const int64_t stride = t.stride;
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, colwise);
  // Distinct buffers (XLA never aliases an operand with a result here): lets the compiler
  // keep all loads ahead of the stores.
  const uint8_t* __restrict__ data = o.data + t.base;
  Out* __restrict__ out = static_cast<Out*>(o.out) + t.base;

  ColumnScales<Out, kFormat, kVec> cols;
  if (colwise && data_rows > 0) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if (k < data_cols) {
        cols.Set(k, __ldg(o.scales + r.scale_offset +
                          mxfp8::ScaleIndex(m, true, swizzled, job.row_tile, t.col0 + k)));
      }
    }
  }
  cols.Finish();
  // Rowwise scale (row0 + i, block): rows padded_cols bytes apart compact, 16 swizzled.
  const uint8_t* __restrict__ row_scale_p =
      o.scales + r.scale_offset +
      mxfp8::ScaleIndex(m, false, swizzled, job.row_tile * kTileRows, t.col0 / kBlockSize);
  const int64_t row_scale_step = swizzled ? 16 : m.padded_cols;

  uint32_t q[kTileRows];                // the fp8 bytes of each row (0 outside the group)
  uint32_t row_scales[kTileRows / 4] = {};  // rowwise only: row i's in byte i % 4 of word i / 4
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) {
    q[i] = 0;
    if (i < data_rows) {
      const uint8_t* p = data + i * stride;
      if (data_cols >= kVec && vector) {
        q[i] = __ldg(reinterpret_cast<const uint32_t*>(p));
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          if (k < data_cols) q[i] |= static_cast<uint32_t>(__ldg(p + k)) << (8 * k);
        }
      }
      if (!colwise) {
        row_scales[i / 4] |= static_cast<uint32_t>(__ldg(row_scale_p + i * row_scale_step))
                             << (8 * (i % 4));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) {
    if (i >= cap_rows) continue;
    const uint32_t e_row = (row_scales[i / 4] >> (8 * (i % 4))) & 0xFFu;
    const uint32_t codes[1] = {q[i]};
    uint32_t words[kWords];
    DequantizeTileRow<Out, kFormat, kVec>(codes, colwise, cols, e_row,
                                          i < data_rows ? data_cols : 0, words);
    Out* row_out = out + i * stride;
    if (cap_cols >= kVec && vector) {
      if constexpr (kWords == 4) {
        *reinterpret_cast<uint4*>(row_out) = make_uint4(words[0], words[1], words[2], words[3]);
      } else {
        *reinterpret_cast<uint2*>(row_out) = make_uint2(words[0], words[1]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (k < cap_cols) {
          if constexpr (sizeof(Out) == 4) {
            reinterpret_cast<uint32_t*>(row_out)[k] = words[k];
          } else {
            reinterpret_cast<unsigned short*>(row_out)[k] =
                static_cast<unsigned short>(words[k / 2] >> (16 * (k % 2)));
          }
        }
      }
    }
  }
}

template <typename Out, Fp8Format kFormat>
__device__ void DequantizeTile(const Grid& grid, const mxfp8::DequantizeOperands& o, bool colwise,
                               bool swizzled, const TileJob& job) {
  const StripSpan t = MakeStripSpan<kDequantVec>(grid, job);
  if (t.cap_cols <= 0) return;
  if (FullTile(grid, job)) {
    DequantizeStrips<Out, kFormat, true>(o, colwise, swizzled, job, t);
  } else {
    DequantizeStrips<Out, kFormat, false>(o, colwise, swizzled, job, t);
  }
}

template <typename Out, Fp8Format kFormat>
__global__ void __launch_bounds__(kMaxThreads, kMinCtasPerSm)
    DequantizeKernel(Grid grid, mxfp8::DequantizeOperands o, bool colwise, bool swizzled) {
  ForEachJob(grid, o.group_sizes, o.job_counter, [&](const TileJob& job) {
    if (job.has_tile) DequantizeTile<Out, kFormat>(grid, o, colwise, swizzled, job);
  });
}
}  // namespace jgg::cuda::mxfp8_kernels

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_KERNELS_CUH_
