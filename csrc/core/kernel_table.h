// The CUDA kernels oink instantiates, one entry each, with their launch limits: the one list the
// planner and the dispatch share, so that they agree by construction.
//
// kernels/norm_forward.cu and kernels/norm_backward.cu instantiate exactly these entries (a fold
// over the table, for every x and weight dtype an entry allows) and static_assert each entry's
// limits against the kernel's own constants; a plan launches the entry forward_kernel_entry() /
// backward_kernel_entry() finds for it. plan_violation and backward_plan_violation reject a plan
// that names no entry or does not fit its entry's limits, so make_plan never returns a plan the
// dispatch cannot launch (tests/cpp/test_kernel_table.cpp checks every plan of the shape grid).
#pragma once

#include <array>
#include <cstdint>
#include <iterator>

#include "core/backward_plan.h"
#include "core/plan.h"

namespace oink {

// Which weight dtypes an entry is instantiated for, x being float16, bfloat16 or float32.
enum class KernelWeight : uint8_t {
  kAny,         // float16, bfloat16 or float32
  kWiderThanX,  // float32 on 16-bit x only
  kFloat32OrX,  // float32 or x's dtype (LayerNorm: weight and bias as given where both are
                // x's dtype, else widened to float32 by the binding)
};

// One forward kernel. A plan names it by these fields, all equal to the plan's.
struct ForwardKernel {
  KernelOps ops;
  KernelVariant variant;
  bool vector_io;
  int chunks_per_thread;  // the kernel's kChunks (registers, streamed) or its slots (tile, cluster)
  int lanes_per_thread;   // the kernel's kLanes (registers) or kTileLanesPerThread
  int weight_held_chunks;  // the kernel's kHeldChunks (tile, cluster); 0 otherwise
  KernelWeight weight;
  // Limits a launch must fit: the threads of the kernel's __launch_bounds__, and the most static
  // shared memory it declares, which the device's opt-in limit counts with the plan's dynamic
  // bytes (0 for the kernels without dynamic shared memory: their few bytes fit every device).
  int max_threads;
  int static_smem_bytes;
};

// The table's vocabulary, short enough for one entry a line.
namespace forward_table {
constexpr KernelOps kRms = KernelOps::kRmsNorm, kFused = KernelOps::kFusedAdd,
                    kLn = KernelOps::kLayerNorm;
constexpr KernelVariant kRegs = KernelVariant::kRowInRegisters, kTwoPass = KernelVariant::kTwoPass,
                        kTile = KernelVariant::kTile, kCluster = KernelVariant::kCluster,
                        kStreamed = KernelVariant::kStreamed;
constexpr KernelWeight kAny = KernelWeight::kAny, kWide = KernelWeight::kWiderThanX,
                       kF32X = KernelWeight::kFloat32OrX;
constexpr int kSlots = kTileSlotsPerThread, kLanes = kTileLanesPerThread;
constexpr int kFold = kRegistersLanesPerThread, kRowThreads = kMaxThreadsPerRow;
constexpr int kFoldThreads = kMaxThreadsPerRow / kRegistersLanesPerThread;

// clang-format off
inline constexpr ForwardKernel kForwardKernels[] = {
//  ops     variant    vector chunks  lanes  held        weight threads        static smem
    // RMSNorm and rmsnorm_forward
    {kRms,   kRegs,     false, 1,      1,     0,          kAny,  kRowThreads,      0},
    {kRms,   kRegs,     false, 2,      1,     0,          kAny,  kRowThreads,      0},
    {kRms,   kRegs,     true,  1,      1,     0,          kAny,  kRowThreads,      0},
    {kRms,   kRegs,     true,  2,      1,     0,          kAny,  kRowThreads,      0},
    {kRms,   kRegs,     true,  1,      kFold, 0,          kAny,  kFoldThreads,     0},
    {kRms,   kRegs,     true,  2,      kFold, 0,          kAny,  kFoldThreads,     0},
    {kRms,   kTwoPass,  false, 0,      1,     0,          kAny,  kRowThreads,      0},
    {kRms,   kTwoPass,  true,  0,      1,     0,          kAny,  kRowThreads,      0},
    {kRms,   kTile,     true,  kSlots, kLanes, kSlots,    kAny,  kTileMaxThreads,  kTileStaticSmemBytes},
    {kRms,   kCluster,  true,  kSlots, kLanes, kSlots,    kAny,  kClusterMaxThreads, kClusterStaticSmemBytes},
    {kRms,   kCluster,  true,  kSlots, kLanes, kSlots / 2, kWide, kClusterMaxThreads, kClusterStaticSmemBytes},
    {kRms,   kStreamed, true,  2,      1,     0,          kWide, kRowThreads,      kStreamedStaticSmemBytes},
    // fused add + RMSNorm: no streamed kernel; a cluster holds the whole weight
    {kFused, kRegs,     false, 1,      1,     0,          kAny,  kRowThreads,      0},
    {kFused, kRegs,     false, 2,      1,     0,          kAny,  kRowThreads,      0},
    {kFused, kRegs,     true,  1,      1,     0,          kAny,  kRowThreads,      0},
    {kFused, kRegs,     true,  2,      1,     0,          kAny,  kRowThreads,      0},
    {kFused, kRegs,     true,  1,      kFold, 0,          kAny,  kFoldThreads,     0},
    {kFused, kRegs,     true,  2,      kFold, 0,          kAny,  kFoldThreads,     0},
    {kFused, kTwoPass,  false, 0,      1,     0,          kAny,  kRowThreads,      0},
    {kFused, kTwoPass,  true,  0,      1,     0,          kAny,  kRowThreads,      0},
    {kFused, kTile,     true,  kSlots, kLanes, kSlots,    kAny,  kTileMaxThreads,  kTileStaticSmemBytes},
    {kFused, kCluster,  true,  kSlots, kLanes, kSlots,    kAny,  kClusterMaxThreads, kClusterStaticSmemBytes},
    // LayerNorm and layernorm_forward: no two_pass; weight and bias read at the store, float32 or x's
    {kLn,    kRegs,     false, 1,      1,     0,          kF32X, kRowThreads,      0},
    {kLn,    kRegs,     false, 2,      1,     0,          kF32X, kRowThreads,      0},
    {kLn,    kRegs,     true,  1,      1,     0,          kF32X, kRowThreads,      0},
    {kLn,    kRegs,     true,  2,      1,     0,          kF32X, kRowThreads,      0},
    {kLn,    kTile,     true,  kSlots, kLanes, 0,         kF32X, kTileMaxThreads,  kTileStaticSmemBytes},
    {kLn,    kCluster,  true,  kSlots, kLanes, 0,         kF32X, kClusterMaxThreads, kClusterStaticSmemBytes},
};
// clang-format on
}  // namespace forward_table
using forward_table::kForwardKernels;

// A plan names at most one entry: no two share their ops and the plan's fields.
constexpr bool forward_entries_distinct() {
  for (size_t i = 0; i < std::size(kForwardKernels); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const ForwardKernel &a = kForwardKernels[i], &b = kForwardKernels[j];
      if (a.ops == b.ops && a.variant == b.variant && a.vector_io == b.vector_io &&
          a.chunks_per_thread == b.chunks_per_thread && a.lanes_per_thread == b.lanes_per_thread &&
          a.weight_held_chunks == b.weight_held_chunks) {
        return false;
      }
    }
  }
  return true;
}
static_assert(forward_entries_distinct(), "two entries with the same fields");

// The weight dtype the dispatch instantiates a forward kernel with for `problem`: the weight's
// (LayerNorm's bias has it too), or without either x's (the pointers are null).
inline DType kernel_weight_dtype(const NormProblem& problem) {
  if (problem.has_weight || problem.has_bias) return problem.w_dtype;
  return problem.x_dtype;
}

// Whether an entry of weight rule `rule` is instantiated for x and weight dtypes `x` and `w`.
constexpr bool kernel_weight_allowed(KernelWeight rule, DType x, DType w) {
  switch (rule) {
    case KernelWeight::kAny:
      return true;
    case KernelWeight::kWiderThanX:
      return dtype_size(w) > dtype_size(x);
    case KernelWeight::kFloat32OrX:
      return w == DType::kFloat32 || w == x;
  }
  return false;
}

// The entry a CUDA plan for `problem` launches (its index in kForwardKernels), or -1: no
// instantiated kernel has the plan's fields for the problem's op and dtypes.
int forward_kernel_entry(const NormPlan& plan, const NormProblem& problem);

// One backward row kernel (kernels/norm_backward.cuh), instantiated for RMSNorm's gradient with
// every weight dtype and LayerNorm's with a float32 weight (backward_plan_violation checks that),
// each with at most kBackwardMaxThreads threads; only the cluster's has dynamic shared memory
// (kBackwardClusterSmemBytes, its staged rows).
struct BackwardKernel {
  bool vector_io;
  int chunks_per_thread;  // the kernel's kChunks
  bool prefetch_next_row;
  bool cluster;        // a cluster of CTAs per weight-gradient block, one per slice of a long row
  bool looped;         // the looped pair (kernels/norm_backward_looped.cuh), not the row kernel
  bool for_layernorm;  // instantiated for LayerNorm's gradient too, not RMSNorm's alone
};

// Vector I/O prefetches the next row at 1 or 2 chunks a thread and reloads the weight from L1 at
// 4; element-wise rows take 1 or 2 chunks (more spilled). Long rows: vector I/O, 4 chunks, a
// cluster, with the rows staged in shared memory (so LayerNorm's bias partials fit beside the
// weight's: no spill, ptxas, sm_90a). Past the cluster and the element-wise kernel: the looped
// pair, both I/O kinds (its chunks_per_thread is the plan's, 4: it names no register layout).
inline constexpr std::array<BackwardKernel, 8> kBackwardKernels = {
    {{true, 1, true, false, false, true},
     {true, 2, true, false, false, true},
     {true, 4, false, false, false, true},
     {false, 1, false, false, false, true},
     {false, 2, false, false, false, true},
     {true, 4, false, true, false, true},
     {true, 4, false, false, true, true},
     {false, 4, false, false, true, true}}};

// The entry a backward plan launches (its index in kBackwardKernels), or -1.
int backward_kernel_entry(const BackwardPlan& plan);

}  // namespace oink
