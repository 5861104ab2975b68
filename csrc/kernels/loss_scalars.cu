// The cross-entropy's scalars on CUDA (kernels/launch_loss_scalars.h). One CTA of kThreads: each
// thread folds the elements t, t + kThreads, ... in order, then device::row_reduce combines the
// threads in its fixed tree, so a result depends on the inputs alone (deterministic, and the same
// for any stream or graph). Both fold in float64: exact for the count (below 2^53 rows), and the
// loss's sum carries no float32 rounding of its partials.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/reduce.cuh"
#include "device/vec.cuh"
#include "kernels/launch_kernel.cuh"
#include "kernels/launch_loss_scalars.h"

namespace oink {
namespace {

constexpr int kThreads = 512;

using Total = device::Sum<double>;

template <typename F>
__device__ __forceinline__ double fold_block(int64_t rows, F&& value_at) {
  __shared__ alignas(16) double warp_values[kThreads / 32];
  double v = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += kThreads) v += value_at(i);
  return device::row_reduce<Total>(v, kThreads, warp_values);
}

__global__ void __launch_bounds__(kThreads)
    count_targets_kernel(const int64_t* target, int64_t rows, int64_t ignore_index, float* out) {
  const double count =
      fold_block(rows, [&](int64_t i) { return target[i] != ignore_index ? 1.0 : 0.0; });
  if (threadIdx.x == 0) {
    const float c = static_cast<float>(count);
    out[0] = c;
    out[1] = __frcp_rn(c);  // 1 / c rounded once, as torch.reciprocal of the float32 count
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    reduce_loss_kernel(const float* loss, int64_t rows, const float* count, T* out) {
  double total = fold_block(rows, [&](int64_t i) { return static_cast<double>(loss[i]); });
  if (threadIdx.x == 0) {
    if (count != nullptr) total /= static_cast<double>(count[0]);
    *out = device::from_float<T>(static_cast<float>(total));
  }
}

}  // namespace

cudaError_t launch_count_targets(const int64_t* target, int64_t rows, int64_t ignore_index,
                                 float* out, cudaStream_t stream) {
  return launch_kernel(count_targets_kernel, dim3(1), dim3(kThreads), 0, /*pdl=*/false, stream,
                       target, rows, ignore_index, out);
}

cudaError_t launch_reduce_loss(const float* loss, int64_t rows, const float* count, void* out,
                               DType out_dtype, cudaStream_t stream) {
  switch (out_dtype) {
    case DType::kFloat16:
      return launch_kernel(reduce_loss_kernel<__half>, dim3(1), dim3(kThreads), 0, false, stream,
                           loss, rows, count, static_cast<__half*>(out));
    case DType::kBFloat16:
      return launch_kernel(reduce_loss_kernel<__nv_bfloat16>, dim3(1), dim3(kThreads), 0, false,
                           stream, loss, rows, count, static_cast<__nv_bfloat16*>(out));
    case DType::kFloat32:
      return launch_kernel(reduce_loss_kernel<float>, dim3(1), dim3(kThreads), 0, false, stream,
                           loss, rows, count, static_cast<float*>(out));
    case DType::kFloat64:  // CPU only
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace oink
