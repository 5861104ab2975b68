// RMSNorm forward and fused add + RMSNorm forward (vLLM semantics): three schedules of one row
// computation (kernels/norm_row.cuh), chosen by make_plan() (core/plan.cpp).
//
//   norm_kernel<.., kChunks > 0>  row_in_registers: one row per thread group, read once into
//                                 registers, written once. Lowest latency: decode batches.
//   norm_kernel<.., 0>            two_pass: rows too long for registers; pass 2 re-reads from L2.
//   norm_streamed_kernel          streamed: persistent CTAs keep `stages` rows in flight through
//                                 cp.async into shared memory. Bandwidth: large batches.
//
// Row ownership is the same in all three (see core/plan.h): chunk c of a row belongs to thread
// c % threads_per_row, which sums its chunks in increasing order before device::row_sum()
// combines the threads in a fixed tree. A row's bits depend on (N, dtype) and its values only.
#include <atomic>
#include <cstdint>

#include "device/async.cuh"
#include "device/reduce.cuh"
#include "device/vec.cuh"
#include "kernels/launch.h"
#include "kernels/norm_row.cuh"

namespace oink {
namespace {

// Programmatic dependent launch, first thing in every kernel. CTA 0 asks the L2 for the weight
// (a parameter no preceding kernel is expected to write, and a prefetch is coherent anyway) while
// the preceding kernel drains; then every CTA waits for it before touching memory, and lets the
// next PDL launch start its CTAs.
template <typename W, bool kVector>
__device__ __forceinline__ void begin_pdl(const KernelParams& p) {
  if (kVector && p.use_pdl && p.weight != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    device::prefetch_l2(p.weight, static_cast<uint32_t>(p.cols * sizeof(W)));
  }
  device::pdl_wait();
  device::pdl_launch_dependents();
}

// kChunks: register capacity per thread (1, 2, 4), or 0 for the two-pass variant.
template <typename T, typename W, bool kFused, bool kVector, int kChunks>
__global__ void __launch_bounds__(1024) norm_kernel(const KernelParams p) {
  using Row = NormRow<T, W, kFused, kVector>;
  using Acc = typename Row::Acc;
  using XVec = typename Row::XVec;
  using WVec = typename Row::WVec;
  constexpr int kElems = Row::kElems;
  __shared__ Acc warp_sums[32];
  begin_pdl<W, kVector>(p);

  const int lane = threadIdx.x & (p.threads_per_row - 1);
  const int64_t row = int64_t{blockIdx.x} * p.rows_per_cta + threadIdx.x / p.threads_per_row;
  // Threads past the last row still take part in the reductions (full-warp shuffles, barriers).
  const bool active = row < p.rows;
  const Row r(p, row, active);
  const int tpr = p.threads_per_row;
  const int64_t chunks = p.chunks_per_row;

  if constexpr (kChunks > 0) {
    // Up to two chunks per thread the weight is loaded before the reduction so its latency hides
    // behind it; at four its registers would spill (ptxas, at 1024 threads per CTA).
    constexpr bool kPrefetchWeight = kChunks <= 2;
    XVec v[kChunks];
    WVec w[kPrefetchWeight ? kChunks : 1];
    Acc acc = 0;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t chunk = lane + int64_t{i} * tpr;
      if (active && chunk < chunks) {
        v[i] = r.load_source(chunk * kElems);
        acc = Row::add_squares(v[i], acc);
      }
    }
    if constexpr (kPrefetchWeight) {
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int64_t chunk = lane + int64_t{i} * tpr;
        if (active && chunk < chunks) w[i] = r.load_weight(chunk * kElems);
      }
    }
    const Acc rstd = Row::inv_rms(device::row_sum(acc, tpr, warp_sums), p);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t chunk = lane + int64_t{i} * tpr;
      if (active && chunk < chunks) {
        const int64_t col = chunk * kElems;
        r.store_normalized(col, v[i], kPrefetchWeight ? w[i] : r.load_weight(col), rstd);
      }
    }
  } else {
    // Rows too long for registers: sum in pass 1, re-read (mostly from L2) and write in pass 2.
    // Loads go out kBatch at a time so several are in flight per thread; the sums still follow
    // increasing chunk order. The fused op re-reads the residual this same thread just stored.
    // Element-wise I/O batches 2: at 4 its bounds-checked loads spilled (ptxas, fused op).
    constexpr int kBatch = kVector ? 4 : 2;
    Acc acc = 0;
    if (active) {
      for (int64_t base = lane; base < chunks; base += int64_t{kBatch} * tpr) {
        XVec v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int64_t chunk = base + int64_t{j} * tpr;
          if (chunk < chunks) v[j] = r.load_source(chunk * kElems);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (base + int64_t{j} * tpr < chunks) acc = Row::add_squares(v[j], acc);
        }
      }
    }
    const Acc rstd = Row::inv_rms(device::row_sum(acc, tpr, warp_sums), p);
    if (active) {
      const T* src = kFused ? r.res : r.x;
      for (int64_t chunk = lane; chunk < chunks; chunk += tpr) {
        const int64_t col = chunk * kElems;
        const XVec v = device::load_chunk<kVector, T, kElems>(src, col, r.n);
        r.store_normalized(col, v, r.load_weight(col), rstd);
      }
    }
  }
}

// 16-byte pieces of shared memory, each written (by cp.async or a store) and read by one thread.
template <typename V>
__device__ __forceinline__ V read_slots(const uint4* slot, int stride) {
  constexpr int kPieces = sizeof(V) / 16;
  union {
    uint4 pieces[kPieces];
    V vec;
  } u;
#pragma unroll
  for (int k = 0; k < kPieces; ++k) u.pieces[k] = slot[k * stride];
  return u.vec;
}

// Persistent CTAs, each looping over row groups blockIdx.x, blockIdx.x + gridDim.x, ... with
// `stages` groups in flight: cp.async copies each thread's own chunks of x (and the residual)
// into its own shared-memory slots, so no barrier guards a slot; the only barrier is the row
// reduction's. Shared memory, in 16-byte slots of blockDim.x (one per thread):
//   weight [chunks_per_thread][pieces of W]  (fetched once: the same columns every row)
//   stage  [stages][x, residual][chunks_per_thread]
// Vector I/O only (the plan guarantees aligned 16-byte chunks).
template <typename T, typename W, bool kFused>
__global__ void __launch_bounds__(1024, 2) norm_streamed_kernel(const KernelParams p) {
  using Row = NormRow<T, W, kFused, true>;
  using Acc = typename Row::Acc;
  using XVec = typename Row::XVec;
  using WVec = typename Row::WVec;
  constexpr int kElems = Row::kElems;
  constexpr int kStreams = kFused ? 2 : 1;
  constexpr int kWeightPieces = sizeof(WVec) / 16;
  extern __shared__ uint4 slots[];
  __shared__ Acc warp_sums[2][32];  // alternate rows: a slow warp may still read the last row's
  begin_pdl<W, true>(p);

  const int tpr = p.threads_per_row;
  const int cpt = p.chunks_per_thread;
  const int stages = p.stages;
  const int block = blockDim.x;
  const int lane = threadIdx.x & (tpr - 1);
  const int row_in_group = threadIdx.x / tpr;
  const int64_t chunks = p.chunks_per_row;
  const int64_t groups = (p.rows + p.rows_per_cta - 1) / p.rows_per_cta;
  // No weight, no weight slots: the plan's smem_bytes counts them only when there is a weight.
  uint4* const weight_slots = slots + threadIdx.x;
  const int weight_slot_rows = p.weight != nullptr ? cpt * kWeightPieces : 0;
  uint4* const stage_slots = slots + weight_slot_rows * block + threadIdx.x;
  auto slot = [&](int stage, int stream, int i) {
    return stage_slots + ((stage * kStreams + stream) * cpt + i) * block;
  };

  if (p.weight != nullptr) {  // completes with the first stage's group
    const char* weight = static_cast<const char*>(p.weight);
    for (int i = 0; i < cpt; ++i) {
      const int64_t chunk = lane + int64_t{i} * tpr;
      if (chunk >= chunks) break;
      for (int k = 0; k < kWeightPieces; ++k) {
        device::async_copy16(weight_slots + (i * kWeightPieces + k) * block,
                             weight + chunk * sizeof(WVec) + k * 16);
      }
    }
  }
  auto issue = [&](int64_t group, int stage) {
    const int64_t row = group * p.rows_per_cta + row_in_group;
    if (group < groups && row < p.rows) {
      const T* x = static_cast<const T*>(p.x) + row * p.ld_x;
      const T* res = kFused ? static_cast<const T*>(p.residual) + row * p.ld_residual : nullptr;
      for (int i = 0; i < cpt; ++i) {
        const int64_t chunk = lane + int64_t{i} * tpr;
        if (chunk >= chunks) break;
        device::async_copy16(slot(stage, 0, i), x + chunk * kElems);
        if constexpr (kFused) device::async_copy16(slot(stage, 1, i), res + chunk * kElems);
      }
    }
    device::async_commit();  // one group per stage, empty past the end: the counts stay uniform
  };

  for (int s = 0; s + 1 < stages; ++s) issue(blockIdx.x + int64_t{s} * gridDim.x, s);
  int stage = 0;
  int parity = 0;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    // Refill the stage consumed last iteration (this thread's own slots: it is done with them).
    issue(group + int64_t{stages - 1} * gridDim.x, stage == 0 ? stages - 1 : stage - 1);
    device::async_wait_dynamic(stages - 1);  // this group's copies (and the weight) have landed

    const int64_t row = group * p.rows_per_cta + row_in_group;
    const bool active = row < p.rows;
    const Row r(p, row, active);
    Acc acc = 0;
    for (int i = 0; i < cpt; ++i) {
      const int64_t chunk = lane + int64_t{i} * tpr;
      if (!active || chunk >= chunks) break;
      XVec v = read_slots<XVec>(slot(stage, 0, i), block);
      if constexpr (kFused) {
        v = r.add_residual(chunk * kElems, v, read_slots<XVec>(slot(stage, 1, i), block));
        *reinterpret_cast<XVec*>(slot(stage, 0, i)) = v;  // keep the rounded sum for the store
      }
      acc = Row::add_squares(v, acc);
    }
    const Acc rstd = Row::inv_rms(device::row_sum(acc, tpr, warp_sums[parity]), p);
    for (int i = 0; i < cpt; ++i) {
      const int64_t chunk = lane + int64_t{i} * tpr;
      if (!active || chunk >= chunks) break;
      const XVec v = read_slots<XVec>(slot(stage, 0, i), block);
      const WVec w = p.weight != nullptr
                         ? read_slots<WVec>(weight_slots + i * kWeightPieces * block, block)
                         : r.load_weight(0);  // all ones
      r.store_normalized(chunk * kElems, v, w, rstd);
    }
    stage = stage + 1 == stages ? 0 : stage + 1;
    parity ^= 1;
  }
}

template <typename Kernel>
cudaError_t launch(Kernel kernel, const NormPlan& plan, const KernelParams& params,
                   cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(plan.grid));
  config.blockDim = dim3(static_cast<unsigned>(plan.block_threads));
  config.dynamicSmemBytes = static_cast<size_t>(plan.smem_bytes);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  if (plan.use_pdl) {
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, params);
}

// Shared memory above 48 KiB, static and dynamic together, must be opted into, per kernel and
// device. Done once per instantiation and device, to the device's limit, whatever this plan needs,
// so that every later plan fits. (On the H200 a plan of exactly 48 KiB of dynamic shared memory
// plus the kernel's 512 static bytes failed to launch before the first opt-in; 2026-11-30.) The
// flag lives in a function templated on the kernel's parameters: every instantiation has the same
// pointer type, so a static keyed on that type would be shared by all of them.
template <typename T, typename W, bool kFused>
cudaError_t allow_large_smem_streamed() {
  static std::atomic<uint64_t> devices_done{0};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (devices_done.load(std::memory_order_acquire) & bit) return cudaSuccess;
  int limit = 0;
  err = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess) return err;
  const auto kernel = norm_streamed_kernel<T, W, kFused>;
  cudaFuncAttributes attributes{};
  err = cudaFuncGetAttributes(&attributes, kernel);
  if (err != cudaSuccess) return err;
  // The opt-in limit covers static and dynamic shared memory together.
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             limit - static_cast<int>(attributes.sharedSizeBytes));
  if (err == cudaSuccess) devices_done.fetch_or(bit, std::memory_order_release);
  return err;
}

template <typename T, typename W, bool kFused, bool kVector>
cudaError_t dispatch_variant(const NormPlan& plan, const KernelParams& params, cudaStream_t s) {
  switch (plan.variant) {
    case KernelVariant::kStreamed:
      if constexpr (kVector) {
        const cudaError_t err = allow_large_smem_streamed<T, W, kFused>();
        return err != cudaSuccess ? err
                                  : launch(norm_streamed_kernel<T, W, kFused>, plan, params, s);
      }
      break;  // never planned without vector I/O
    case KernelVariant::kTwoPass:
      return launch(norm_kernel<T, W, kFused, kVector, 0>, plan, params, s);
    case KernelVariant::kRowInRegisters:
      switch (plan.chunks_per_thread) {
        case 1:
          return launch(norm_kernel<T, W, kFused, kVector, 1>, plan, params, s);
        case 2:
          return launch(norm_kernel<T, W, kFused, kVector, 2>, plan, params, s);
        case 4:
          // Never planned with element-wise I/O (it would spill); not instantiated for it.
          if constexpr (kVector)
            return launch(norm_kernel<T, W, kFused, kVector, 4>, plan, params, s);
          break;
      }
      break;
    case KernelVariant::kCpu:
      break;
  }
  return cudaErrorInvalidConfiguration;
}

template <typename T, typename W>
cudaError_t dispatch_flags(const NormPlan& plan, const NormProblem& problem,
                           const KernelParams& params, cudaStream_t s) {
  const bool fused = problem.op == NormOp::kFusedAddRmsNorm;
  if (fused) {
    return plan.vector_io ? dispatch_variant<T, W, true, true>(plan, params, s)
                          : dispatch_variant<T, W, true, false>(plan, params, s);
  }
  return plan.vector_io ? dispatch_variant<T, W, false, true>(plan, params, s)
                        : dispatch_variant<T, W, false, false>(plan, params, s);
}

template <typename T>
cudaError_t dispatch_weight(const NormPlan& plan, const NormProblem& problem,
                            const KernelParams& params, cudaStream_t s) {
  // No weight: any W works (the pointer is null); reuse the same-dtype instantiation.
  if (problem.has_weight && problem.w_dtype == DType::kFloat32) {
    return dispatch_flags<T, float>(plan, problem, params, s);
  }
  return dispatch_flags<T, T>(plan, problem, params, s);
}

}  // namespace

cudaError_t launch_norm(const NormPlan& plan, const NormProblem& problem, const NormArgs& args,
                        cudaStream_t stream) {
  if (problem.rows == 0 || problem.cols == 0) return cudaSuccess;
  KernelParams params{};
  params.x = args.x;
  params.out = args.out;
  params.residual = args.residual;
  params.weight = args.weight;
  params.rows = problem.rows;
  params.cols = problem.cols;
  params.ld_x = problem.ld_x;
  params.ld_out = problem.ld_out;
  params.ld_residual = problem.ld_residual;
  params.chunks_per_row = plan.chunks_per_row;
  params.threads_per_row = plan.threads_per_row;
  params.rows_per_cta = plan.rows_per_cta;
  params.chunks_per_thread = plan.chunks_per_thread;
  params.stages = plan.stages;
  params.inv_cols = 1.0f / static_cast<float>(problem.cols);
  params.eps = args.eps;
  params.inv_cols_d = 1.0 / static_cast<double>(problem.cols);
  params.use_pdl = plan.use_pdl;
  switch (problem.x_dtype) {
    case DType::kFloat32:
      return dispatch_weight<float>(plan, problem, params, stream);
    case DType::kFloat16:
      return dispatch_weight<__half>(plan, problem, params, stream);
    case DType::kBFloat16:
      return dispatch_weight<__nv_bfloat16>(plan, problem, params, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace oink
