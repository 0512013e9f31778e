#include "xla_plugin/kernels/cpu/ragged_dot_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cpu/f32_gemm.h"

namespace jgg::cpu {
namespace {

// Row tiles matter only to the CUDA scheduler; one row per "tile"
// keeps the schedule arithmetic identical to the CUDA one.
constexpr int64_t kScheduleTileRows = 1;

int32_t OffsetOf(const RaggedOperands& operands) {
  return operands.group_offset == nullptr ? 0 : *operands.group_offset;
}

}  // namespace

void RaggedM(const RaggedMProblem& p, const RaggedOperands& operands) {
  const int64_t rhs_matrix = p.k * p.n;
  std::vector<float> rhs_f32(rhs_matrix), rhs_t(p.rhs_transposed ? rhs_matrix : 0);
  std::vector<float> lhs_f32, out_f32;
  for (int64_t b = 0; b < p.batch; ++b) {
    const RaggedSchedule schedule = ScheduleOfBatch(operands.workspace, b, p.num_local_groups);
    ComputeRaggedSchedule(operands.group_sizes + b * p.num_global_groups, p.num_global_groups,
                          OffsetOf(operands), p.num_local_groups, p.rows, kScheduleTileRows,
                          schedule);
    const int64_t out_base = b * p.rows * p.n;
    const int64_t lo = schedule.row_begin[0], hi = schedule.row_begin[p.num_local_groups];
    ZeroElements(operands.out, p.out_type, out_base, lo * p.n);
    ZeroElements(operands.out, p.out_type, out_base + hi * p.n, (p.rows - hi) * p.n);
    for (int64_t g = 0; g < p.num_local_groups; ++g) {
      const int64_t begin = schedule.row_begin[g], rows = schedule.row_begin[g + 1] - begin;
      if (rows == 0) continue;
      const int64_t rhs_first = (g * p.batch + b) * rhs_matrix;
      if (p.rhs_transposed) {  // [N, K] -> [K, N]
        Widen(operands.rhs, p.in_type, rhs_first, rhs_matrix, rhs_t.data());
        for (int64_t i = 0; i < p.n; ++i)
          for (int64_t j = 0; j < p.k; ++j) rhs_f32[j * p.n + i] = rhs_t[i * p.k + j];
      } else {
        Widen(operands.rhs, p.in_type, rhs_first, rhs_matrix, rhs_f32.data());
      }
      lhs_f32.resize(rows * p.k);
      out_f32.resize(rows * p.n);
      Widen(operands.lhs, p.in_type, (b * p.rows + begin) * p.k, rows * p.k, lhs_f32.data());
      GemmF32(rows, p.n, p.k, lhs_f32.data(), p.k, 1, rhs_f32.data(), p.n, out_f32.data(), p.n);
      Narrow(out_f32.data(), rows * p.n, operands.out, p.out_type, out_base + begin * p.n);
    }
  }
}

void RaggedK(const RaggedKProblem& p, const RaggedOperands& operands) {
  std::vector<float> lhs_f32, rhs_f32, out_f32(p.p * p.n);
  for (int64_t b = 0; b < p.batch; ++b) {
    const RaggedSchedule schedule = ScheduleOfBatch(operands.workspace, b, p.num_local_groups);
    ComputeRaggedSchedule(operands.group_sizes + b * p.num_global_groups, p.num_global_groups,
                          OffsetOf(operands), p.num_local_groups, p.rows, kScheduleTileRows,
                          schedule);
    for (int64_t g = 0; g < p.num_local_groups; ++g) {
      const int64_t begin = schedule.row_begin[g], rows = schedule.row_begin[g + 1] - begin;
      const int64_t out_first = (g * p.batch + b) * p.p * p.n;
      if (rows == 0) {  // empty expert: its gradient is exactly zero
        ZeroElements(operands.out, p.out_type, out_first, p.p * p.n);
        continue;
      }
      lhs_f32.resize(rows * p.p);
      rhs_f32.resize(rows * p.n);
      Widen(operands.lhs, p.in_type, (b * p.rows + begin) * p.p, rows * p.p, lhs_f32.data());
      Widen(operands.rhs, p.in_type, (b * p.rows + begin) * p.n, rows * p.n, rhs_f32.data());
      // A(i, r) = lhs[r, i]: the transposed lhs is read through its strides.
      GemmF32(p.p, p.n, rows, lhs_f32.data(), 1, p.p, rhs_f32.data(), p.n, out_f32.data(), p.n);
      Narrow(out_f32.data(), p.p * p.n, operands.out, p.out_type, out_first);
    }
  }
}

}  // namespace jgg::cpu
