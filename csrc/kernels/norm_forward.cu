// The forward row ops on CUDA: RMSNorm, fused add + RMSNorm (vLLM semantics) and LayerNorm.
// Launches the plan's schedule, with programmatic dependent launch when the plan says so. The
// schedules share one row computation per op family (kernels/norm_row.cuh: RMSNorm and the fused
// add; kernels/layernorm_row.cuh: LayerNorm) and are chosen by make_plan() (core/plan.cpp):
//
//   norm_kernel<.., kChunks > 0>  row_in_registers (kernels/norm_row_group.cuh): decode and
//                                 mid-size batches, lowest latency; every LayerNorm call.
//   norm_kernel<.., 0>            two_pass (same file): rows too long for registers.
//   norm_tile_kernel              tile (kernels/norm_tile.cuh): one small CTA per row group, 8
//                                 chunks per thread; rmsnorm batches from a wave of rows up.
//   norm_cluster_kernel           cluster (kernels/norm_cluster.cuh): a cluster of CTAs per long
//                                 row, one slice each, the slices' sums exchanged in DSMEM.
//   norm_streamed_kernel          streamed (kernels/norm_streamed.cuh): persistent CTAs keep rows
//                                 in flight through cp.async; large rmsnorm batches with a
//                                 float32 weight on 16-bit rows too short for the tile.
//
// Row ownership is the same in all of them (see core/plan.h): chunk c of a row belongs to lane
// c % threads_per_row, which sums its chunks in increasing order before device::row_reduce()
// combines the lanes in a fixed tree (a tile thread plays several lanes,
// device::folded_row_reduce). A row's bits depend on (N, dtype) and its values only.
//
// The kernels compiled here are the entries of core/kernel_table.h, which the planner checks its
// plans against: select_op folds over the table and launches the entry forward_kernel_entry()
// names for the plan, so no plan_violation-approved plan can miss its kernel.
#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "core/kernel_table.h"
#include "kernels/kernel_setup.cuh"
#include "kernels/launch.h"
#include "kernels/launch_kernel.cuh"
#include "kernels/norm_cluster.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/norm_row_group.cuh"
#include "kernels/norm_streamed.cuh"
#include "kernels/norm_tile.cuh"

namespace oink {
namespace {

// A kernel with dynamic shared memory, opted into the device's limit before its first launch.
template <auto kKernel>
SelectedKernel smem_kernel() {
  return kernel_of(kKernel, &allow_large_smem<kKernel>);
}

// The dtype of a kernel's element type, as the table and the planner name it.
template <typename E>
constexpr DType kDTypeOf = std::is_same_v<E, float>    ? DType::kFloat32
                           : std::is_same_v<E, __half> ? DType::kFloat16
                                                       : DType::kBFloat16;

// The instantiation set a row op belongs to (core/kernel_table.h).
template <typename Op>
constexpr KernelOps kOpsOf = Op::kFamily == RowFamily::kLayerNorm ? KernelOps::kLayerNorm
                             : Op::kAddsResidual                  ? KernelOps::kFusedAdd
                                                                  : KernelOps::kRmsNorm;

// The kernel of table entry kEntry for x of type T, a weight of type W and row op Op, or none
// where the entry is not theirs: the table names every kernel compiled here. Each entry's
// constants are asserted equal to its kernel's own (template arguments, __launch_bounds__,
// the static shared memory its own static_assert bounds).
template <typename T, typename W, typename Op, size_t kEntry>
SelectedKernel entry_kernel() {
  constexpr ForwardKernel k = kForwardKernels[kEntry];
  if constexpr (k.ops != kOpsOf<Op> || !kernel_weight_allowed(k.weight, kDTypeOf<T>, kDTypeOf<W>)) {
    return {};
  } else if constexpr (k.variant == KernelVariant::kRowInRegisters ||
                       k.variant == KernelVariant::kTwoPass) {
    static_assert(k.max_threads == kMaxThreadsPerRow / k.lanes_per_thread &&
                      k.static_smem_bytes == 0 && k.weight_held_chunks == 0,
                  "norm_kernel: __launch_bounds__(kMaxThreadsPerRow / kLanes), no dynamic smem");
    static_assert((k.variant == KernelVariant::kTwoPass) == (k.chunks_per_thread == 0));
    return kernel_of(norm_kernel<T, W, Op, k.vector_io, k.chunks_per_thread, k.lanes_per_thread>);
  } else if constexpr (k.variant == KernelVariant::kTile) {
    static_assert(k.vector_io && k.chunks_per_thread == kTileSlotsPerThread &&
                      k.lanes_per_thread == kTileLanesPerThread &&
                      k.weight_held_chunks == kTileHeldChunks<Op> &&
                      k.max_threads == kTileMaxThreads &&
                      k.static_smem_bytes == kTileStaticSmemBytes,
                  "norm_tile_kernel's constants");
    return smem_kernel<norm_tile_kernel<T, W, Op>>();
  } else if constexpr (k.variant == KernelVariant::kCluster) {
    static_assert(k.vector_io && k.chunks_per_thread == kTileSlotsPerThread &&
                      k.lanes_per_thread == kTileLanesPerThread &&
                      k.max_threads == kClusterMaxThreads &&
                      k.static_smem_bytes == kClusterStaticSmemBytes,
                  "norm_cluster_kernel's constants");
    constexpr int kHeld = k.weight_held_chunks;
    return kernel_of(norm_cluster_kernel<T, W, Op, kHeld>,
                     &allow_large_clusters<norm_cluster_kernel<T, W, Op, kHeld>>);
  } else {
    static_assert(k.variant == KernelVariant::kStreamed && k.vector_io && k.lanes_per_thread == 1 &&
                      k.weight_held_chunks == 0 && k.max_threads == kMaxThreadsPerRow &&
                      k.static_smem_bytes == kStreamedStaticSmemBytes,
                  "norm_streamed_kernel's constants");
    return smem_kernel<norm_streamed_kernel<T, W, Op, k.chunks_per_thread>>();
  }
}

// The kernel of entry `entry` (forward_kernel_entry) for (T, W, Op): a fold over the table.
template <typename T, typename W, typename Op, size_t... kEntries>
SelectedKernel select_entry(int entry, std::index_sequence<kEntries...>) {
  SelectedKernel selected;
  (void)((entry == static_cast<int>(kEntries) &&
          (selected = entry_kernel<T, W, Op, kEntries>(), true)) ||
         ...);
  return selected;
}

template <typename T, typename W>
SelectedKernel select_op(const NormPlan& plan, const NormProblem& problem) {
  const int entry = forward_kernel_entry(plan, problem);
  const auto entries = std::make_index_sequence<std::size(kForwardKernels)>{};
  if (problem.op == NormOp::kLayerNorm) {
    return problem.saves_stats ? select_entry<T, W, LayerNormSavingStatsOp>(entry, entries)
                               : select_entry<T, W, LayerNormOp>(entry, entries);
  }
  if (problem.op == NormOp::kFusedAddRmsNorm) {
    return select_entry<T, W, FusedAddRmsNormOp>(entry, entries);
  }
  return problem.saves_stats ? select_entry<T, W, RmsNormSavingRstdOp>(entry, entries)
                             : select_entry<T, W, RmsNormOp>(entry, entries);
}

template <typename T>
SelectedKernel select_weight(const NormPlan& plan, const NormProblem& problem) {
  switch (kernel_weight_dtype(problem)) {  // the planner's too (core/kernel_table.h)
    case DType::kFloat32:
      return select_op<T, float>(plan, problem);
    case DType::kFloat16:
      return select_op<T, __half>(plan, problem);
    case DType::kBFloat16:
      return select_op<T, __nv_bfloat16>(plan, problem);
    case DType::kFloat64:  // CPU only (the checks reject it on CUDA)
      break;
  }
  return {};
}

SelectedKernel select_kernel(const NormPlan& plan, const NormProblem& problem) {
  switch (problem.x_dtype) {
    case DType::kFloat32:
      return select_weight<float>(plan, problem);
    case DType::kFloat16:
      return select_weight<__half>(plan, problem);
    case DType::kBFloat16:
      return select_weight<__nv_bfloat16>(plan, problem);
    case DType::kFloat64:  // CPU only (the checks reject it on CUDA)
      break;
  }
  return {};
}

KernelParams kernel_params(const NormPlan& plan, const NormProblem& problem, const NormArgs& args) {
  KernelParams params{};
  params.x = args.x;
  params.out = args.out;
  params.residual = args.residual;
  params.weight = args.weight;
  params.rows = problem.rows;
  params.cols = problem.cols;
  params.row_index = RowIndexer(problem.row_dims);
  params.row_dims = params.row_index.count;
  params.x_strides = problem.x_strides;
  params.out_strides = problem.written_strides();
  params.residual_strides = problem.residual_strides;
  params.x_step = params.x_strides.s[0];
  params.out_step = params.out_strides.s[0];
  params.residual_step = params.residual_strides.s[0];
  params.chunks_per_row = plan.chunks_per_row;
  params.threads_per_row = plan.threads_per_row;
  params.rows_per_cta = plan.rows_per_cta;
  params.chunks_per_thread = plan.chunks_per_thread;
  params.stages = plan.stages;
  params.slices = plan.slices;
  params.inv_cols = 1.0f / static_cast<float>(problem.cols);
  params.eps = args.eps;
  params.inv_cols_d = 1.0 / static_cast<double>(problem.cols);
  params.use_pdl = plan.use_pdl;
  params.pdl_early_trigger = plan.pdl_early_trigger;
  params.rstd = static_cast<float*>(args.rstd);
  params.mean = static_cast<float*>(args.mean);
  params.bias = args.bias;
  return params;
}

}  // namespace

cudaError_t launch_norm(const NormPlan& plan, const NormProblem& problem, const NormArgs& args,
                        cudaStream_t stream) {
  if (problem.rows == 0 || problem.cols == 0) return cudaSuccess;
  const SelectedKernel kernel = select_kernel(plan, problem);
  if (kernel.function == nullptr) return cudaErrorInvalidConfiguration;
  if (kernel.prepare != nullptr) {
    const cudaError_t err = kernel.prepare();
    if (err != cudaSuccess) return err;
  }
  KernelParams params = kernel_params(plan, problem, args);
  void* kernel_args[] = {&params};
  return launch_kernel(kernel.function, dim3(static_cast<unsigned>(plan.grid)),
                       dim3(static_cast<unsigned>(plan.block_threads)),
                       static_cast<size_t>(plan.smem_bytes), plan.use_pdl, stream, kernel_args,
                       plan.cluster_ctas);
}

cudaError_t kernel_image(const NormPlan& plan, const NormProblem& problem, int device,
                         KernelImage* image) {
  const SelectedKernel kernel = select_kernel(plan, problem);
  if (kernel.function == nullptr) return cudaErrorInvalidConfiguration;
  // Once per kernel and device: a lookup loads the kernel's module (and JIT-compiles PTX).
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, KernelImage> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel.function, device);
  if (const auto it = known.find(key); it != known.end()) {
    *image = it->second;
    return cudaSuccess;
  }
  int current = 0;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current != device) err = cudaSetDevice(device);
  cudaFuncAttributes attributes{};
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attributes, kernel.function);
  if (current != device) (void)cudaSetDevice(current);
  if (err != cudaSuccess) return err;
  *image = KernelImage{attributes.binaryVersion, attributes.ptxVersion, attributes.numRegs,
                       static_cast<int>(attributes.sharedSizeBytes)};
  known.emplace(key, *image);
  return cudaSuccess;
}

}  // namespace oink
