// The CUDA MXFP8 kernels (xla_plugin/kernels/cuda/mxfp8_*.cuh), unchanged, run on the CPU
// through simt_shim.h; C entry points for tests/test_mxfp8_emulated.py (ctypes).
#include "tests/emulation/simt_shim.h"
#include "xla_plugin/kernels/cuda/mxfp8_launch_config.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_small_kernels.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_wide_kernels.cuh"

namespace {

using namespace jgg::cuda::mxfp8_kernels;  // NOLINT

// A small "GPU": every CTA loops over many jobs and several locate rounds (kJobsPerLocate),
// and small calls still get one job per CTA.
constexpr int64_t kResidentCtas = 3;

// Launches pass a zeroed job counter (the dynamic job split) when set, none (static) otherwise.
bool g_job_counter = false;
// Every call the small kernels serve takes them when set (the CUDA launcher: the small calls).
bool g_small = false;

// Widths as EmulateJobs returns them, for the small kernels: their tile width plus this.
constexpr int kSmallWidthBase = 100000;

// Runs a small kernel (mxfp8_small_kernels.cuh) over `grid`, as the CUDA launch would.
template <typename Kernel, typename Operands, typename... Args>
int EmulateSmall(Kernel kernel, const Grid& grid, Operands ops, Args... args) {
  if (grid.ctas > 0) simt::Launch(grid.ctas, kSmallThreads, [&] { kernel(grid, ops, args...); });
  return kSmallWidthBase + static_cast<int>(grid.tile_cols);
}

// Runs kernel(grid, args...) on every CTA of `grid`, as the CUDA launch would; returns the CTA
// width for strips, minus the tile width in columns for wide tiles (the tests' coverage checks).
template <typename Kernel, typename Operands, typename... Args>
int EmulateJobs(Kernel kernel, Grid grid, Operands ops, Args... args) {
  unsigned long long counter = 0;
  ops.job_counter = g_job_counter ? &counter : nullptr;
  SetCtas(grid, kResidentCtas, DynamicJobs(grid, ops.job_counter));
  simt::Launch(grid.ctas, grid.threads, [&] { kernel(grid, ops, args...); });
  return grid.wide ? -static_cast<int>(grid.tile_cols) : grid.threads;
}

struct EmulatedQuantize {
  const jgg::mxfp8::QuantizeProblem& p;
  const jgg::mxfp8::QuantizeOperands& o;
  template <typename In, bool kRow, bool kCol, jgg::mxfp8::Fp8Format kFormat>
  int Run() {
    const int small_chunk = SmallQuantizeChunk(p, o, sizeof(In));
    if (g_small && small_chunk > 0) {
      return EmulateSmall(QuantizeSmallKernel<In, kRow, kCol, kFormat>,
                          SmallGrid(p.shape, small_chunk, true), o, p.swizzled);
    }
    const Grid grid = QuantizeGrid(p, o, sizeof(In));
    if (grid.wide) return EmulateJobs(QuantizeWideKernel<In, kRow, kCol, kFormat>, grid, o, p.swizzled);
    return EmulateJobs(QuantizeKernel<In, kRow, kCol, kFormat>, grid, o, p.swizzled);
  }
};

struct EmulatedDequantize {
  const jgg::mxfp8::DequantizeProblem& p;
  const jgg::mxfp8::DequantizeOperands& o;
  template <typename Out, jgg::mxfp8::Fp8Format kFormat>
  int Run() {
    const int small_chunk = SmallDequantizeChunk(p, o);
    if (g_small && small_chunk > 0) {
      const Grid grid = SmallGrid(p.shape, small_chunk, false);
      if (small_chunk == 16) {
        return EmulateSmall(DequantizeSmallKernel<Out, kFormat, 16>, grid, o, p.colwise, p.swizzled);
      }
      return EmulateSmall(DequantizeSmallKernel<Out, kFormat, 8>, grid, o, p.colwise, p.swizzled);
    }
    const Grid grid = DequantizeGrid(p, o);
    if (grid.wide && grid.tile_cols == 32 * kWideDequantChunk) {
      return EmulateJobs(WideDequantizeKernelFor<Out, kFormat, kWideDequantChunk>(p.colwise), grid,
                         o, p.colwise, p.swizzled);
    }
    if (grid.wide) {
      return EmulateJobs(WideDequantizeKernelFor<Out, kFormat, kWideDequantHalfChunk>(p.colwise),
                         grid, o, p.colwise, p.swizzled);
    }
    return EmulateJobs(DequantizeKernel<Out, kFormat>, grid, o, p.colwise, p.swizzled);
  }
};

jgg::mxfp8::GroupedShape Shape(int layout, int64_t groups, int64_t rows, int64_t cols) {
  return {static_cast<jgg::mxfp8::GroupedLayout>(layout), groups, rows, cols};
}

}  // namespace

// on: a zeroed job counter, else none; reverse: CTAs run last to first; small: the small
// kernels wherever they serve.
extern "C" void SetEmulatedJobCounter(int on, int reverse, int small) {
  g_job_counter = on != 0;
  simt::reverse_cta_order = reverse != 0;
  g_small = small != 0;
}

// Return the kernel family and width (EmulateJobs), for the tests' coverage checks.
extern "C" int EmulateMxfp8Quantize(int layout, int64_t groups, int64_t rows, int64_t cols,
                                    int in_type, int format, int rowwise, int colwise, int swizzled,
                                    const void* x, const int32_t* group_sizes, uint8_t* row_data,
                                    uint8_t* row_scales, uint8_t* col_data, uint8_t* col_scales) {
  const auto shape = Shape(layout, groups, rows, cols);
  const jgg::mxfp8::QuantizeProblem p{shape,
                                      static_cast<jgg::ElementType>(in_type),
                                      static_cast<jgg::mxfp8::Fp8Format>(format),
                                      rowwise != 0,
                                      colwise != 0,
                                      swizzled != 0,
                                      jgg::mxfp8::ScaleBufferBytes(shape)};
  const jgg::mxfp8::QuantizeOperands o{x, group_sizes, rowwise ? row_data : nullptr,
                                       rowwise ? row_scales : nullptr, colwise ? col_data : nullptr,
                                       colwise ? col_scales : nullptr};
  EmulatedQuantize launch{p, o};
  return DispatchQuantize(p, launch);
}

extern "C" int EmulateMxfp8Dequantize(int layout, int64_t groups, int64_t rows, int64_t cols,
                                      int format, int colwise, int swizzled, int out_type,
                                      const uint8_t* data, const uint8_t* scales,
                                      const int32_t* group_sizes, void* out) {
  const auto shape = Shape(layout, groups, rows, cols);
  const jgg::mxfp8::DequantizeProblem p{shape,
                                        static_cast<jgg::mxfp8::Fp8Format>(format),
                                        colwise != 0,
                                        swizzled != 0,
                                        static_cast<jgg::ElementType>(out_type),
                                        jgg::mxfp8::ScaleBufferBytes(shape)};
  const jgg::mxfp8::DequantizeOperands o{data, scales, group_sizes, out};
  EmulatedDequantize launch{p, o};
  return DispatchDequantize(p, launch);
}

namespace {

// Dequantizes every code with every scale through ExactScaling<Out, kFormat> wherever its
// range and special-code test allow, against the reference element rule.
template <typename Out, jgg::mxfp8::Fp8Format kFormat>
int64_t ExactScalingMismatches(jgg::mxfp8::FloatFormat out_format, int64_t* checked) {
  using Exact = jgg::cuda::ExactScaling<Out, kFormat>;
  constexpr int kWords = sizeof(Out);  // output words per 4 codes
  int64_t bad = 0;
  *checked = 0;
  for (uint32_t e = 0; e < 256; ++e) {
    if (!Exact::InRange(e)) continue;
    uint32_t factors[kWords];
    for (uint32_t& f : factors) f = FactorWord<Out, kFormat>(e, e);
    for (uint32_t first = 0; first < 256; first += 4) {
      const uint32_t codes[1] = {first * 0x01u | (first + 1) << 8 | (first + 2) << 16 | (first + 3) << 24};
      if (Exact::AnySpecial(codes)) {  // then one code at a time, to reach its neighbours
        for (uint32_t c = first; c < first + 4; ++c) {
          const uint32_t single[1] = {c * 0x01010101u};
          if (Exact::AnySpecial(single)) continue;
          uint32_t out[kWords];
          Exact::Convert(single[0], factors, out);
          const uint32_t got = sizeof(Out) == 4 ? out[0] : out[0] & 0xFFFFu;
          bad += got != jgg::mxfp8::DequantizeElement(c, e, kFormat, out_format);
          ++*checked;
        }
        continue;
      }
      uint32_t out[kWords];
      Exact::Convert(codes[0], factors, out);
      for (uint32_t k = 0; k < 4; ++k) {
        const uint32_t got = sizeof(Out) == 4 ? out[k] : (out[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
        bad += got != jgg::mxfp8::DequantizeElement(first + k, e, kFormat, out_format);
        ++*checked;
      }
    }
  }
  return bad;
}

}  // namespace

// Mismatches of the exact integer dequantization path against the element rule over every
// (scale, code) pair it takes; *checked receives how many pairs that is.
extern "C" int64_t EmulateExactScalingMismatches(int out_type, int format, int64_t* checked) {
  using jgg::mxfp8::Fp8Format;
  const bool e4m3 = static_cast<Fp8Format>(format) == Fp8Format::kE4M3;
  switch (static_cast<jgg::ElementType>(out_type)) {
    case jgg::ElementType::kF32:
      return e4m3 ? ExactScalingMismatches<float, Fp8Format::kE4M3>(jgg::mxfp8::F32Format(), checked)
                  : ExactScalingMismatches<float, Fp8Format::kE5M2>(jgg::mxfp8::F32Format(), checked);
    case jgg::ElementType::kBF16:
      return e4m3 ? ExactScalingMismatches<__nv_bfloat16, Fp8Format::kE4M3>(jgg::mxfp8::Bf16Format(), checked)
                  : ExactScalingMismatches<__nv_bfloat16, Fp8Format::kE5M2>(jgg::mxfp8::Bf16Format(), checked);
    default:
      return e4m3 ? ExactScalingMismatches<__half, Fp8Format::kE4M3>(jgg::mxfp8::F16Format(), checked)
                  : ExactScalingMismatches<__half, Fp8Format::kE5M2>(jgg::mxfp8::F16Format(), checked);
  }
}
