// Launches of the grouped MXFP8 kernels (mxfp8_kernels.cuh) on the caller's stream.
#include "xla_plugin/kernels/cuda/mxfp8_cuda.h"

#include "xla_plugin/kernels/cuda/mxfp8_kernels.cuh"

namespace jgg::cuda {
namespace {

using namespace mxfp8_kernels;  // NOLINT: the kernels, grids and dispatch of this op

struct QuantizeLaunch {
  const mxfp8::QuantizeProblem& p;
  const mxfp8::QuantizeOperands& o;
  cudaStream_t stream;

  template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
  cudaError_t Run() {
    const Grid grid = QuantizeGrid(p, o, Strip<In>::kCount);
    const int64_t ctas = grid.data_tiles + TailChunks(grid);
    if (ctas == 0) return cudaSuccess;
    const int threads = static_cast<int>(grid.tile_cols / Strip<In>::kCount);
    QuantizeKernel<In, kRow, kCol, kFormat><<<ctas, threads, 0, stream>>>(grid, o, p.swizzled);
    return cudaGetLastError();
  }
};

struct DequantizeLaunch {
  const mxfp8::DequantizeProblem& p;
  const mxfp8::DequantizeOperands& o;
  cudaStream_t stream;

  template <typename Out, Fp8Format kFormat>
  cudaError_t Run() {
    constexpr int kVec = 16 / sizeof(Out);
    const Grid grid = DequantizeGrid(p, o, kVec);
    if (grid.data_tiles == 0) return cudaSuccess;
    const int threads = static_cast<int>(grid.tile_cols / kVec);
    DequantizeKernel<Out, kFormat><<<grid.data_tiles, threads, 0, stream>>>(grid, o, p.colwise,
                                                                            p.swizzled);
    return cudaGetLastError();
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
