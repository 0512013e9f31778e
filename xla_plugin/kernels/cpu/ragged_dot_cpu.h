// Portable C++ kernels for the two canonical ragged GEMMs (see
// common/ragged_problem.h). f32 accumulation for every input type.
#ifndef JGG_XLA_PLUGIN_KERNELS_CPU_RAGGED_DOT_CPU_H_
#define JGG_XLA_PLUGIN_KERNELS_CPU_RAGGED_DOT_CPU_H_

#include "xla_plugin/common/ragged_problem.h"

namespace jgg::cpu {

// Host pointers; `operands.group_offset` may be null (offset 0).
void RaggedM(const RaggedMProblem& problem, const RaggedOperands& operands);
void RaggedK(const RaggedKProblem& problem, const RaggedOperands& operands);

}  // namespace jgg::cpu

#endif  // JGG_XLA_PLUGIN_KERNELS_CPU_RAGGED_DOT_CPU_H_
