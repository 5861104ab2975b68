// oink_latency_floors: what a decode row costs, piece by piece. For each (N, M), with and without
// programmatic dependent launch, µs per call in a CUDA graph (the sweep's timing) of:
//
//   empty     a kernel that only waits for its predecessor and signals its dependents
//   copy      each CTA copies one row with oink's thread layout (threads_per_row_for(N) threads,
//             up to 2 chunks of 16 bytes each, every load issued first)
//   copy_sum  the same plus oink's reduction: sum of squares, device::row_reduce, x * rstd stored
//   approx    copy_sum with the approximate rsqrtf (the peers') instead of oink's correctly
//             rounded __frsqrt_rn
//   params    copy_sum launched with oink's parameter block (KernelParams, ~300 bytes, by value)
//             instead of four scalars, its fields read from there
//   oink      launch_norm() of the planner's plan, without a weight
//   oink_w    the same with a bf16 weight
//
// The differences are what each piece adds to a row's dependent chain: launch, memory round
// trip, reduction, the rsqrt's rounding, the size of the parameter block, oink's own overhead,
// the weight. bf16 only; buffers rotate over 20 sets, so a decode row is L2-warm, as in the
// reference baselines.
//
//   oink_latency_floors            N in {4096, 7168, 8192}, M in {1, 16, 64}
//   oink_latency_floors N M        one case
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/args.h"
#include "core/plan.h"
#include "core/problem.h"
#include "device/async.cuh"
#include "device/reduce.cuh"
#include "kernels/launch.h"
#include "kernels/launch_kernel.cuh"
#include "kernels/norm_row.cuh"
#include "timing_harness.h"

namespace oink {
namespace {

using bench::check;
constexpr int kCalls = 20;
constexpr int kChunks = 2;  // decode rows: threads_per_row_for() gives every thread <= 2 chunks

__global__ void empty_kernel() {
  device::pdl_wait();
  device::pdl_launch_dependents();
}

// What a floor kernel does to its row (the columns above).
enum class Floor { kCopy, kSum, kSumApproxRsqrt };

// One row per CTA; thread t owns chunks t and t + tpr, as oink's registers schedule does.
template <Floor kFloor>
__device__ __forceinline__ void row_floor(const uint4* x, uint4* out, int chunks, float inv_n) {
  constexpr bool kSum = kFloor != Floor::kCopy;
  __shared__ alignas(16) float warp_sums[32];
  device::pdl_wait();
  device::pdl_launch_dependents();
  const int tpr = blockDim.x;
  const int64_t row = blockIdx.x;
  uint4 v[kChunks];
  bool mine[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    mine[i] = threadIdx.x + i * tpr < chunks;
    if (mine[i]) v[i] = x[row * chunks + threadIdx.x + i * tpr];
  }
  if constexpr (kSum) {
    float acc = 0;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (!mine[i]) continue;
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&v[i]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(pairs[k]);
        acc = fmaf(f.x, f.x, acc);
        acc = fmaf(f.y, f.y, acc);
      }
    }
    const float mean_sq = device::row_reduce<device::Sum<float>>(acc, tpr, warp_sums) * inv_n;
    const float rstd =
        kFloor == Floor::kSumApproxRsqrt ? rsqrtf(mean_sq + 1e-6f) : __frsqrt_rn(mean_sq + 1e-6f);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&v[i]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(pairs[k]);
        pairs[k] = __floats2bfloat162_rn(f.x * rstd, f.y * rstd);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    if (mine[i]) out[row * chunks + threadIdx.x + i * tpr] = v[i];
  }
}

template <Floor kFloor>
__global__ void __launch_bounds__(1024)
    row_floor_kernel(const uint4* x, uint4* out, int chunks, float inv_n) {
  row_floor<kFloor>(x, out, chunks, inv_n);
}

// copy_sum with oink's parameter block: the launch carries the same bytes as oink's kernels.
__global__ void __launch_bounds__(1024) row_floor_params_kernel(const KernelParams p) {
  row_floor<Floor::kSum>(static_cast<const uint4*>(p.x), static_cast<uint4*>(p.out),
                         static_cast<int>(p.chunks_per_row), p.inv_cols);
}

void run_case(int64_t n, int64_t m, const DeviceInfo& d, cudaStream_t stream) {
  NormProblem p;
  p.op = NormOp::kRmsNorm;
  p.x_dtype = p.w_dtype = DType::kBFloat16;
  p.rows = m;
  p.cols = n;
  set_row_stride(p, n);
  const int tpr = threads_per_row_for(n, p.x_dtype);
  const int chunks = static_cast<int>(n / 8);
  if (n % 8 != 0 || chunks > kChunks * tpr || tpr < 32) {
    std::fprintf(stderr, "oink_latency_floors: N=%lld is not a decode row of whole chunks\n",
                 static_cast<long long>(n));
    std::exit(2);
  }
  bench::Buffers s = bench::allocate(p, kCalls);  // x and out; 20 sets: L2-warm decode rows
  for (bool pdl : {false, true}) {
    auto rows = [&](auto kernel) {
      return bench::median_us_per_call(
          [&]() -> cudaError_t {
            for (int i = 0; i < kCalls; ++i) {
              const cudaError_t err =
                  launch_kernel(kernel, dim3(static_cast<unsigned>(m)), dim3(tpr), 0, pdl, stream,
                                static_cast<const uint4*>(s.x[i]), static_cast<uint4*>(s.other[i]),
                                chunks, 1.0f / static_cast<float>(n));
              if (err != cudaSuccess) return err;
            }
            return cudaSuccess;
          },
          kCalls, stream);
    };
    const double empty = bench::median_us_per_call(
        [&]() -> cudaError_t {
          for (int i = 0; i < kCalls; ++i) {
            const cudaError_t err = launch_kernel(empty_kernel, dim3(1), dim3(32), 0, pdl, stream);
            if (err != cudaSuccess) return err;
          }
          return cudaSuccess;
        },
        kCalls, stream);
    LaunchOptions options;
    options.allow_pdl = pdl;
    auto oink_us = [&](bool weight) {
      NormProblem q = p;
      q.has_weight = weight;
      const NormPlan plan = plan_on_device(q, d, 0, options);
      return bench::median_us_per_call(
          [&]() -> cudaError_t {
            for (int i = 0; i < kCalls; ++i) {
              NormArgs args;
              args.x = s.x[i];
              args.out = s.other[i];
              args.weight = weight ? s.weight : nullptr;
              args.eps = 1e-6f;
              const cudaError_t err = launch_norm(plan, q, args, stream);
              if (err != cudaSuccess) return err;
            }
            return cudaSuccess;
          },
          kCalls, stream);
    };
    const double params = bench::median_us_per_call(
        [&]() -> cudaError_t {
          for (int i = 0; i < kCalls; ++i) {
            KernelParams kp{};
            kp.x = s.x[i];
            kp.out = s.other[i];
            kp.chunks_per_row = chunks;
            kp.inv_cols = 1.0f / static_cast<float>(n);
            const cudaError_t err =
                launch_kernel(row_floor_params_kernel, dim3(static_cast<unsigned>(m)), dim3(tpr), 0,
                              pdl, stream, kp);
            if (err != cudaSuccess) return err;
          }
          return cudaSuccess;
        },
        kCalls, stream);
    std::printf("%6lld %5lld %4s %6d %8.2f %8.2f %9.2f %8.2f %8.2f %8.2f %8.2f\n",
                static_cast<long long>(n), static_cast<long long>(m), pdl ? "on" : "off", tpr,
                empty, rows(row_floor_kernel<Floor::kCopy>), rows(row_floor_kernel<Floor::kSum>),
                rows(row_floor_kernel<Floor::kSumApproxRsqrt>), params, oink_us(false),
                oink_us(true));
    std::fflush(stdout);
  }
  bench::release(s);
}

}  // namespace
}  // namespace oink

int main(int argc, char** argv) {
  using namespace oink;
  std::vector<std::pair<int64_t, int64_t>> cases;
  if (argc == 3) {
    cases.push_back({std::atoll(argv[1]), std::atoll(argv[2])});
    if (cases[0].first < 1 || cases[0].second < 1) {
      std::fprintf(stderr, "oink_latency_floors: N and M must be positive integers\n");
      return 2;
    }
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: oink_latency_floors [N M]\n");
    return 2;
  } else {
    for (int64_t n : {4096, 7168, 8192}) {
      for (int64_t m : {1, 16, 64}) cases.push_back({n, m});
    }
  }
  const bench::Device dev = bench::current_device();
  const cudaDeviceProp& prop = dev.prop;
  const DeviceInfo& d = dev.info;
  cudaStream_t stream = dev.stream;
  std::printf("# %s; bf16; µs per call (median of %d graph replays of %d calls, 20 buffer sets)\n",
              prop.name, bench::kReplays, kCalls);
  std::printf("%6s %5s %4s %6s %8s %8s %9s %8s %8s %8s %8s\n", "N", "M", "pdl", "tpr", "empty",
              "copy", "copy_sum", "approx", "params", "oink", "oink_w");
  for (const auto& [n, m] : cases) run_case(n, m, d, stream);
  return 0;
}
