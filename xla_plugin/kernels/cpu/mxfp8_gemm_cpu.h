// The fused MXFP8 grouped GEMMs on the CPU (common/mxfp8_gemm_problem.h): the references the
// CUDA kernels are tested against, and what a CPU run of the same lowering computes.
#ifndef JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_GEMM_CPU_H_
#define JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_GEMM_CPU_H_

#include "xla_plugin/common/mxfp8_gemm_problem.h"

namespace jgg::cpu {

void Mxfp8RaggedM(const mxfp8::RaggedMProblem& problem, const mxfp8::RaggedMOperands& operands);
void Mxfp8RaggedK(const mxfp8::RaggedKProblem& problem, const mxfp8::RaggedKOperands& operands);

}  // namespace jgg::cpu

#endif  // JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_GEMM_CPU_H_
