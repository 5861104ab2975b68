// RMSNorm forward and fused add + RMSNorm forward (vLLM semantics), one kernel body.
//
// Row ownership (see core/plan.h): a row is cut into 16-byte chunks; chunk c belongs to thread
// c % threads_per_row of the row's thread group; each thread sums its chunks in increasing order,
// and device::row_sum() combines the threads in a fixed tree. Both variants below follow exactly
// this order, so a row's bits depend on (N, dtype) and its values only.
#include <type_traits>

#include "device/reduce.cuh"
#include "device/vec.cuh"
#include "kernels/launch.h"

namespace oink {
namespace {

using device::load_chunk;
using device::store_chunk;
using device::to_float;
using device::Vec;

struct KernelParams {
  const void* x;       // [M, N], row stride ld_x
  void* out;           // [M, N], row stride ld_out (== x for the fused op)
  void* residual;      // [M, N], row stride ld_residual (fused op only)
  const void* weight;  // [N] or nullptr
  int64_t rows, cols, ld_x, ld_out, ld_residual, chunks_per_row;
  int threads_per_row, rows_per_cta;
  float inv_cols;  // 1/N, rounded once on the host: a multiply instead of a division per row
  float eps;
  double inv_cols_d;  // 1/N in float64, for float32 rows (see Acc below)
};

// T: x/out/residual element type; W: weight element type.
// kFused: residual += x first, normalise the rounded residual, write into x.
// kVector: every chunk is a full, aligned 16-byte vector.
// kChunks: register capacity per thread (1, 2, 4), or 0 for the two-pass variant.
template <typename T, typename W, bool kFused, bool kVector, int kChunks>
__global__ void __launch_bounds__(1024) norm_kernel(const KernelParams p) {
  constexpr int kElems = 16 / sizeof(T);
  using XVec = Vec<T, kElems>;
  using WVec = Vec<W, kElems>;
  // Accumulation type. float32 rows sum, scale and multiply in float64 with one rounding at the
  // end: with float32 math throughout, float32 outputs were 1-1.5 ulp worse than F.rms_norm's on
  // the H200 (GUIDE §2 allows one ulp). 16-bit outputs keep float32: their final rounding (2^-9 or
  // 2^-12) dwarfs float32 error, and they were within bounds in every sweep case.
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, float>;
  __shared__ Acc warp_sums[32];

  const int lane = threadIdx.x & (p.threads_per_row - 1);
  const int64_t row = int64_t{blockIdx.x} * p.rows_per_cta + threadIdx.x / p.threads_per_row;
  // Threads past the last row still take part in the reductions (full-warp shuffles, barriers).
  const bool active = row < p.rows;
  const int64_t n = p.cols;
  const T* x = static_cast<const T*>(p.x) + (active ? row * p.ld_x : 0);
  T* out = static_cast<T*>(p.out) + (active ? row * p.ld_out : 0);
  T* res = kFused ? static_cast<T*>(p.residual) + (active ? row * p.ld_residual : 0) : nullptr;
  const W* weight = static_cast<const W*>(p.weight);

  // The values that get normalised: x, or the residual x + residual rounded to T (stored first).
  auto load_source = [&](int64_t col) {
    XVec v = load_chunk<kVector, T, kElems>(x, col, n);
    if constexpr (kFused) {
      const XVec r = load_chunk<kVector, T, kElems>(res, col, n);
#pragma unroll
      for (int e = 0; e < kElems; ++e) {
        v.v[e] = device::from_float<T>(to_float(v.v[e]) + to_float(r.v[e]));
      }
      store_chunk<kVector, T, kElems>(res, col, n, v);
    }
    return v;
  };
  auto add_squares = [](const XVec& v, Acc acc) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const Acc f = to_float(v.v[e]);
      if constexpr (std::is_same_v<Acc, double>) {
        acc = fma(f, f, acc);
      } else {
        acc = fmaf(f, f, acc);
      }
    }
    return acc;
  };
  auto load_weight = [&](int64_t col) {
    WVec w;
    if (weight != nullptr) {
      w = load_chunk<kVector, W, kElems>(weight, col, n);
    } else {
#pragma unroll
      for (int e = 0; e < kElems; ++e) w.v[e] = device::from_float<W>(1.f);
    }
    return w;
  };
  auto store_normalized = [&](int64_t col, const XVec& v, const WVec& w, Acc rstd) {
    XVec y;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      y.v[e] =
          device::from_float<T>(static_cast<float>(to_float(v.v[e]) * rstd * to_float(w.v[e])));
    }
    store_chunk<kVector, T, kElems>(out, col, n, y);
  };
  // Once per row, so precision costs nothing: a correctly rounded rsqrt in float32 (rsqrtf's
  // 2-ulp error showed in float32 outputs on the H200), float64 for float32 rows.
  auto inv_rms = [&](Acc sum_sq) -> Acc {
    if constexpr (std::is_same_v<Acc, double>) {
      return rsqrt(sum_sq * p.inv_cols_d + static_cast<double>(p.eps));
    } else {
      return __frsqrt_rn(sum_sq * p.inv_cols + p.eps);
    }
  };

  if constexpr (kChunks > 0) {
    // Read once into registers, write once. Up to two chunks per thread the weight is loaded
    // before the reduction so its latency hides behind it; at four its registers would spill
    // (ptxas, at 1024 threads per CTA), so it is loaded where it is used.
    constexpr bool kPrefetchWeight = kChunks <= 2;
    XVec v[kChunks];
    WVec w[kPrefetchWeight ? kChunks : 1];
    Acc acc = 0;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t chunk = lane + int64_t{i} * p.threads_per_row;
      if (active && chunk < p.chunks_per_row) {
        v[i] = load_source(chunk * kElems);
        acc = add_squares(v[i], acc);
      }
    }
    if constexpr (kPrefetchWeight) {
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int64_t chunk = lane + int64_t{i} * p.threads_per_row;
        if (active && chunk < p.chunks_per_row) w[i] = load_weight(chunk * kElems);
      }
    }
    const Acc rstd = inv_rms(device::row_sum(acc, p.threads_per_row, warp_sums));
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t chunk = lane + int64_t{i} * p.threads_per_row;
      if (active && chunk < p.chunks_per_row) {
        const int64_t col = chunk * kElems;
        if constexpr (kPrefetchWeight) {
          store_normalized(col, v[i], w[i], rstd);
        } else {
          store_normalized(col, v[i], load_weight(col), rstd);
        }
      }
    }
  } else {
    // Rows too long for registers: sum in pass 1, re-read (mostly from L2) and write in pass 2.
    // The fused op re-reads the residual this same thread just stored.
    Acc acc = 0;
    if (active) {
      for (int64_t chunk = lane; chunk < p.chunks_per_row; chunk += p.threads_per_row) {
        acc = add_squares(load_source(chunk * kElems), acc);
      }
    }
    const Acc rstd = inv_rms(device::row_sum(acc, p.threads_per_row, warp_sums));
    if (active) {
      const T* src = kFused ? res : x;
      for (int64_t chunk = lane; chunk < p.chunks_per_row; chunk += p.threads_per_row) {
        const int64_t col = chunk * kElems;
        store_normalized(col, load_chunk<kVector, T, kElems>(src, col, n), load_weight(col), rstd);
      }
    }
  }
}

template <typename T, typename W, bool kFused, bool kVector, int kChunks>
cudaError_t launch_variant(const NormPlan& plan, const KernelParams& params, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(plan.grid));
  config.blockDim = dim3(static_cast<unsigned>(plan.block_threads));
  config.stream = stream;
  return cudaLaunchKernelEx(&config, norm_kernel<T, W, kFused, kVector, kChunks>, params);
}

template <typename T, typename W, bool kFused, bool kVector>
cudaError_t dispatch_chunks(const NormPlan& plan, const KernelParams& params, cudaStream_t s) {
  switch (plan.chunks_per_thread) {
    case 0:
      return launch_variant<T, W, kFused, kVector, 0>(plan, params, s);
    case 1:
      return launch_variant<T, W, kFused, kVector, 1>(plan, params, s);
    case 2:
      return launch_variant<T, W, kFused, kVector, 2>(plan, params, s);
    case 4:
      // Never planned with element-wise I/O (it would spill); not instantiated for it.
      if constexpr (kVector) return launch_variant<T, W, kFused, kVector, 4>(plan, params, s);
      break;
  }
  return cudaErrorInvalidConfiguration;
}

template <typename T, typename W>
cudaError_t dispatch_flags(const NormPlan& plan, const NormProblem& problem,
                           const KernelParams& params, cudaStream_t s) {
  const bool fused = problem.op == NormOp::kFusedAddRmsNorm;
  if (fused) {
    return plan.vector_io ? dispatch_chunks<T, W, true, true>(plan, params, s)
                          : dispatch_chunks<T, W, true, false>(plan, params, s);
  }
  return plan.vector_io ? dispatch_chunks<T, W, false, true>(plan, params, s)
                        : dispatch_chunks<T, W, false, false>(plan, params, s);
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
  const KernelParams params{args.x,
                            args.out,
                            args.residual,
                            args.weight,
                            problem.rows,
                            problem.cols,
                            problem.ld_x,
                            problem.ld_out,
                            problem.ld_residual,
                            plan.chunks_per_row,
                            plan.threads_per_row,
                            plan.rows_per_cta,
                            1.0f / static_cast<float>(problem.cols),
                            args.eps,
                            1.0 / static_cast<double>(problem.cols)};
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
