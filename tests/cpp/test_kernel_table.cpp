// Every plan make_plan and make_backward_plan produce over the shape grid names a kernel of the
// table the CUDA dispatch instantiates (core/kernel_table.h) and launches within its limits and
// the device's. The grid: every op (rmsnorm, rmsnorm_forward, the fused op, LayerNorm,
// layernorm_forward and both backward passes), float16/bfloat16/float32 rows with each weight the
// CUDA kernels take, N from 1 past the longest cluster row (every power of two, and the odd N and
// N one chunk either side of each, which straddle every lane, slice and cluster boundary), M from
// one row to past a wave and to 2^20, aligned and unaligned rows, on an H100/H200, a B200, an
// RTX PRO 6000 (sm_120: less shared memory) and an A100 (no clusters, no PDL).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/backward_plan.h"
#include "core/kernel_table.h"
#include "core/plan.h"

namespace oink {
namespace {

DeviceInfo device(int cc_major, int sm_count, int smem_per_block_kib, int threads_per_sm) {
  DeviceInfo d;
  d.cc_major = cc_major;
  d.sm_count = sm_count;
  d.max_threads_per_sm = threads_per_sm;
  d.max_smem_per_block = smem_per_block_kib * 1024;
  d.max_smem_per_sm = d.max_smem_per_block + 1024;
  return d;
}

const DeviceInfo kDevices[] = {
    device(9, 132, 227, 2048),   // H100 SXM, H200
    device(10, 148, 227, 2048),  // B200
    device(12, 188, 99, 1536),   // RTX PRO 6000
    device(8, 108, 163, 2048),   // A100
};

std::vector<int64_t> grid_cols() {
  std::set<int64_t> cols;
  for (int64_t pow2 = 1; pow2 <= int64_t{1} << 19; pow2 *= 2) {
    for (const int64_t delta : {-8, -4, -1, 0, 1, 4, 8}) {
      if (pow2 + delta >= 1) cols.insert(pow2 + delta);
    }
  }
  return {cols.begin(), cols.end()};
}

constexpr int64_t kGridRows[] = {1, 7, 131, 264, 4097, int64_t{1} << 20};

NormProblem forward(NormOp op, bool saves_stats, DType x, bool has_weight, DType w, int64_t n,
                    int64_t m, int x_align) {
  NormProblem p;
  p.op = op;
  p.saves_stats = saves_stats;
  p.x_dtype = x;
  p.has_weight = has_weight;
  p.w_dtype = w;
  p.has_bias = op == NormOp::kLayerNorm;
  p.rows = m;
  p.cols = n;
  set_row_stride(p, n);
  p.x_align = x_align;
  return p;
}

// Why `plan` cannot launch as planned for `p` on `d`, or "": checked against the table and the
// CUDA limits directly, not through plan_violation.
std::string launch_problem(const NormPlan& plan, const NormProblem& p, const DeviceInfo& d) {
  const int entry = forward_kernel_entry(plan, p);
  if (entry < 0) return "no table entry";
  const ForwardKernel& k = kForwardKernels[entry];
  if (plan.block_threads < 1 || plan.block_threads > k.max_threads) return "CTA too large";
  if (plan.block_threads % 32 != 0 && plan.rows_per_cta != 1) return "rows split across warps";
  if (plan.grid < 1 || plan.grid > 0x7fffffff) return "grid out of range";
  if (plan.smem_bytes < 0 || plan.smem_bytes + k.static_smem_bytes > d.max_smem_per_block) {
    return "shared memory over the device's opt-in limit";
  }
  if (plan.smem_bytes > 0 && k.static_smem_bytes == 0) return "dynamic smem on a kernel without";
  const bool cluster = plan.variant == KernelVariant::kCluster;
  if (cluster != (plan.cluster_ctas > 0)) return "cluster dims on a non-cluster kernel";
  if (cluster && (d.cc_major < 9 || plan.cluster_ctas > kMaxClusterCtas ||
                  plan.grid != p.rows * plan.cluster_ctas)) {
    return "cluster dims out of range";
  }
  if (plan.use_pdl && d.cc_major < 9) return "PDL below sm_90";
  // Every row gets a CTA: one per row group, a cluster per row, or persistent CTAs that loop.
  const int64_t groups = ceil_div(p.rows, plan.rows_per_cta);
  if (!cluster && plan.variant != KernelVariant::kStreamed && plan.grid != groups) {
    return "grid is not one CTA per row group";
  }
  if (plan.variant == KernelVariant::kStreamed && plan.grid > groups) return "idle persistent CTAs";
  return "";
}

// LayerNorm's kernels take their weight and bias as float32 or in x's dtype, nothing else: a
// float16 weight on bfloat16 rows must reach them widened (the binding's cuda_params), or the
// plan would name no kernel.
TEST(KernelTable, LayerNormParametersAreFloat32OrXsDtype) {
  for (const DType x : {DType::kFloat16, DType::kBFloat16}) {
    const DType other = x == DType::kFloat16 ? DType::kBFloat16 : DType::kFloat16;
    for (const int64_t m : {int64_t{1}, int64_t{4097}}) {  // registers, and the tile
      const NormProblem p = forward(NormOp::kLayerNorm, false, x, true, x, 4096, m, 256);
      const NormPlan plan = make_plan(p, kDevices[0]);
      EXPECT_GE(forward_kernel_entry(plan, p), 0) << describe(plan, p, kDevices[0]);
      NormProblem widened = p, mixed = p;
      widened.w_dtype = DType::kFloat32;
      mixed.w_dtype = other;
      EXPECT_GE(forward_kernel_entry(plan, widened), 0);
      EXPECT_EQ(forward_kernel_entry(plan, mixed), -1);
    }
  }
}

TEST(KernelTable, EveryForwardPlanOfTheGridNamesAnEntryAndFitsItsLimits) {
  const std::vector<int64_t> cols = grid_cols();
  int64_t plans = 0, failures = 0;
  std::set<int> entries_used;
  struct Op {
    NormOp op;
    bool saves_stats;
  };
  for (const DeviceInfo& d : kDevices) {
    for (const Op op : {Op{NormOp::kRmsNorm, false}, Op{NormOp::kRmsNorm, true},
                        Op{NormOp::kFusedAddRmsNorm, false}, Op{NormOp::kLayerNorm, false},
                        Op{NormOp::kLayerNorm, true}}) {
      for (const DType x : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
        // The weights the binding passes: x's dtype, float32 (LayerNorm's parameters of any
        // other dtype are widened to it), or none.
        std::vector<std::pair<bool, DType>> weights = {{false, x}, {true, DType::kFloat32}};
        if (x != DType::kFloat32) weights.push_back({true, x});
        for (const auto& [has_weight, w] : weights) {
          for (const int64_t n : cols) {
            for (const int x_align : {256, 2}) {
              for (const int64_t m : kGridRows) {
                const NormProblem p =
                    forward(op.op, op.saves_stats, x, has_weight, w, n, m, x_align);
                if (!cuda_forward_unsupported(p, d).empty()) continue;  // refused before planning
                const NormPlan plan = make_plan(p, d);
                ++plans;
                entries_used.insert(forward_kernel_entry(plan, p));
                const std::string why = launch_problem(plan, p, d);
                if (!why.empty() && ++failures <= 10) {
                  ADD_FAILURE() << why << ": " << describe(plan, p, d);
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << plans << " plans";
  // Every entry is some grid plan's, but the folded registers kernels of one chunk a lane: a
  // folded row has at least kRegistersFoldMinLanes lanes, so two chunks a lane (compiled all the
  // same, as the dispatch always has).
  for (int i = 0; i < static_cast<int>(std::size(kForwardKernels)); ++i) {
    const ForwardKernel& k = kForwardKernels[i];
    if (k.lanes_per_thread == kRegistersLanesPerThread && k.chunks_per_thread == 1) continue;
    EXPECT_EQ(entries_used.count(i), 1u) << "no grid plan takes kForwardKernels[" << i << "]";
  }
}

TEST(KernelTable, EveryBackwardPlanOfTheGridNamesAnEntryAndFitsItsLimits) {
  int64_t failures = 0;
  std::set<int> entries_used;
  for (const NormOp op : {NormOp::kRmsNorm, NormOp::kLayerNorm}) {
    for (const DType x : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
      for (const int64_t n : grid_cols()) {
        for (const int x_align : {256, 2}) {
          for (const int64_t m : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4097}}) {
            NormBackwardProblem bp;
            bp.rows = forward(op, false, x, true, op == NormOp::kLayerNorm ? DType::kFloat32 : x, n,
                              m, x_align);
            bp.dy_strides = bp.dx_strides = bp.rows.x_strides;
            if (backward_unsupported(bp)) continue;
            const BackwardPlan plan = make_backward_plan(bp);
            const int entry = backward_kernel_entry(plan);
            entries_used.insert(entry);
            const bool fits =
                entry >= 0 && plan.block_threads <= kBackwardMaxThreads &&
                plan.block_threads % 32 == 0 && plan.blocks >= 1 &&
                plan.blocks * plan.block_rows >= m &&
                int64_t{plan.chunks_per_thread} * plan.threads_per_row * plan.slices >=
                    plan.chunks_per_row &&
                (plan.cluster_ctas == 0 ||
                 (plan.cluster_ctas == plan.slices && plan.cluster_ctas <= kMaxClusterCtas)) &&
                (op != NormOp::kLayerNorm || kBackwardKernels[entry].for_layernorm) &&
                plan.reduce_grid * plan.reduce_threads >= n;
            if (!fits && ++failures <= 10) {
              ADD_FAILURE() << "N=" << n << " M=" << m << " " << dtype_name(x) << " " << op_name(op)
                            << " align " << x_align;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(entries_used.size(), kBackwardKernels.size());
}

}  // namespace
}  // namespace oink
