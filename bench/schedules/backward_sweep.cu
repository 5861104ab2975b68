// oink_backward_sweep: times the backward passes' weight-gradient blocks (core/backward_plan.h)
// at other sizes (4 to 256 rows, and the planner's halved and doubled: twice and half its blocks)
// next to make_backward_plan()'s choice, torch-free: how much the grid (at most
// weight_grad_max_blocks(block_threads) CTAs, 256 of up to 256 threads or 128 of 512, of
// kMinWeightGradBlockRows rows or more) costs at small and mid M, against the partials the second
// kernel then adds up. The evidence for those constants.
//
//   oink_backward_sweep            rmsnorm and layernorm backward, bf16, N = 4096 and 7168, M from
//                                  4096 to 131072; one line per (case, block size)
//   oink_backward_sweep OP N M     one case (OP: rmsnorm or layernorm), e.g. under ncu
//
// A candidate differs from the planner's plan in block_rows and blocks only; every other field is
// checked with backward_plan_violation() (the blocks' rule aside: M, N and the dtype decide them
// in the product, for dweight's bits, which a sweep may vary), so a sweep never launches a plan
// the kernels do not support. Timing as oink_schedule_sweep's: a CUDA graph of kCalls launches over
// rotating buffer sets (one pass over them more than twice the L2), median of kReplays replays.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/backward_plan.h"
#include "core/problem.h"
#include "kernels/launch.h"
#include "timing_harness.h"

namespace oink {
namespace {

constexpr int kCalls = 10;
using bench::check;

// One set of a backward call's inputs and outputs.
struct BackwardSet {
  void *dy = nullptr, *x = nullptr, *dx = nullptr;
  float *rstd = nullptr, *mean = nullptr;
};

void* device_bytes(size_t bytes, int fill) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  check(cudaMemset(p, fill, std::max<size_t>(bytes, 1)), "memset");
  return p;
}

NormBackwardProblem problem_of(NormOp op, int64_t n, int64_t m) {
  NormBackwardProblem bp;
  NormProblem& p = bp.rows;
  p.op = op;
  p.x_dtype = DType::kBFloat16;
  // LayerNorm's binding widens the weight to float32 (kernels/norm_backward.cu).
  p.w_dtype = op == NormOp::kLayerNorm ? DType::kFloat32 : DType::kBFloat16;
  p.has_weight = true;
  p.has_bias = op == NormOp::kLayerNorm;
  p.rows = m;
  p.cols = n;
  set_row_stride(p, n);
  bp.dy_strides = bp.dx_strides = p.x_strides;
  return bp;
}

// The planner's plan with `block_rows` rows a block: false (and nothing launched) unless the
// planner's plan passes backward_plan_violation, which the blocks alone do not change (the
// kernels take any block size; only dweight's bits depend on it).
bool with_block_rows(const BackwardPlan& planned, const NormBackwardProblem& bp, int64_t block_rows,
                     BackwardPlan* out) {
  if (!backward_plan_violation(planned, bp).empty()) return false;
  *out = planned;
  out->block_rows = block_rows;
  out->blocks = std::max<int64_t>(1, (bp.rows.rows + block_rows - 1) / block_rows);
  return true;
}

// Least bytes the pass moves: dy and x read, dx written, the statistics, the weight, the
// parameters' gradients (as oink.bench.training's bytes model).
double model_bytes(const NormBackwardProblem& bp) {
  const NormProblem& p = bp.rows;
  const double rows = static_cast<double>(p.rows) * p.cols * dtype_size(p.x_dtype);
  const int stats = p.op == NormOp::kLayerNorm ? 2 : 1;
  const int grads = p.has_bias ? 2 : 1;
  return 3 * rows + 4.0 * stats * p.rows + static_cast<double>(p.cols) * dtype_size(p.w_dtype) +
         static_cast<double>(grads) * p.cols * dtype_size(p.w_dtype);
}

void run_case(NormOp op, int64_t n, int64_t m, const bench::Device& dev) {
  const NormBackwardProblem bp = problem_of(op, n, m);
  const NormProblem& p = bp.rows;
  const BackwardPlan planned = make_backward_plan(bp);
  const size_t row_bytes = static_cast<size_t>(m) * n * dtype_size(p.x_dtype);
  const size_t sets =
      std::min<size_t>(kCalls, 2 * static_cast<size_t>(dev.prop.l2CacheSize) / (3 * row_bytes) + 1);
  std::vector<BackwardSet> b(sets);
  for (BackwardSet& s : b) {
    s.dy = device_bytes(row_bytes, 0x3c);
    s.x = device_bytes(row_bytes, 0x3f);
    s.dx = device_bytes(row_bytes, 0);
    s.rstd = static_cast<float*>(device_bytes(4 * static_cast<size_t>(m), 0x3f));
    s.mean = static_cast<float*>(device_bytes(4 * static_cast<size_t>(m), 0));
  }
  void* weight = device_bytes(static_cast<size_t>(n) * dtype_size(p.w_dtype), 0x3f);
  void* dweight = device_bytes(static_cast<size_t>(n) * dtype_size(p.w_dtype), 0);
  void* dbias = device_bytes(static_cast<size_t>(n) * dtype_size(p.w_dtype), 0);
  const char* name = op == NormOp::kLayerNorm ? "layernorm" : "rmsnorm";

  std::vector<int64_t> block_rows = {planned.block_rows};
  const std::vector<int64_t> candidates = {
      4, 8, 16, 32, 64, 128, 256, planned.block_rows / 2, planned.block_rows * 2};
  for (const int64_t r : candidates) {
    if (r >= 1 && r <= std::max<int64_t>(m, 1) &&
        std::find(block_rows.begin(), block_rows.end(), r) == block_rows.end()) {
      block_rows.push_back(r);
    }
  }
  std::sort(block_rows.begin() + 1, block_rows.end());
  for (const int64_t rows : block_rows) {
    BackwardPlan plan;
    if (!with_block_rows(planned, bp, rows, &plan)) {
      std::printf("%-10s %6lld %7lld  planner plan refused: %s\n", name, static_cast<long long>(n),
                  static_cast<long long>(m), backward_plan_violation(planned, bp).c_str());
      break;
    }
    const int64_t partial_set = plan.blocks * n * plan.partial_bytes;
    void* partials = device_bytes(static_cast<size_t>(backward_partials_bytes(plan, bp)), 0);
    auto launch_all = [&]() -> cudaError_t {
      for (int i = 0; i < kCalls; ++i) {
        const BackwardSet& s = b[i % b.size()];
        BackwardArgs args;
        args.dy = s.dy;
        args.x = s.x;
        args.dx = s.dx;
        args.rstd = s.rstd;
        args.mean = p.op == NormOp::kLayerNorm ? s.mean : nullptr;
        args.weight = weight;
        args.partials = partials;
        args.dweight = dweight;
        args.dweight_dtype = p.w_dtype;
        if (p.has_bias) {
          args.bias_partials = static_cast<char*>(partials) + partial_set;
          args.dbias = dbias;
          args.dbias_dtype = p.w_dtype;
        }
        const cudaError_t err = launch_norm_backward(plan, bp, args, dev.stream);
        if (err != cudaSuccess) return err;
      }
      return cudaSuccess;
    };
    const double us = bench::median_us_per_call(launch_all, kCalls, dev.stream);
    const double gbps = us > 0 ? model_bytes(bp) / (us * 1e3) : 0;
    std::printf(
        "%-10s %6lld %7lld  %-8s block_rows=%-4lld blocks=%-6lld threads=%-4d chunks=%d "
        "prefetch=%d  %9.2f us %6.0f GB/s\n",
        name, static_cast<long long>(n), static_cast<long long>(m),
        rows == planned.block_rows ? "planner" : "sweep", static_cast<long long>(rows),
        static_cast<long long>(plan.blocks), plan.block_threads, plan.chunks_per_thread,
        plan.prefetch_next_row ? 1 : 0, us, gbps);
    std::fflush(stdout);
    cudaFree(partials);
  }
  for (BackwardSet& s : b) {
    for (void* q : {s.dy, s.x, s.dx, static_cast<void*>(s.rstd), static_cast<void*>(s.mean)}) {
      cudaFree(q);
    }
  }
  cudaFree(weight);
  cudaFree(dweight);
  cudaFree(dbias);
}

}  // namespace
}  // namespace oink

int main(int argc, char** argv) {
  using oink::NormOp;
  const oink::bench::Device dev = oink::bench::current_device();
  std::printf(
      "# %s, %d SMs, L2 %d MiB; us per backward call (row kernel and partial sums), "
      "median of %d graph replays of %d; GB/s of the least bytes moved\n",
      dev.prop.name, dev.prop.multiProcessorCount, dev.prop.l2CacheSize >> 20,
      oink::bench::kReplays, oink::kCalls);
  if (argc == 4) {
    const std::string op = argv[1];
    if (op != "rmsnorm" && op != "layernorm") {
      std::fprintf(stderr, "usage: %s [rmsnorm|layernorm N M]\n", argv[0]);
      return 2;
    }
    oink::run_case(op == "layernorm" ? NormOp::kLayerNorm : NormOp::kRmsNorm, std::atoll(argv[2]),
                   std::atoll(argv[3]), dev);
    return 0;
  }
  for (const NormOp op : {NormOp::kRmsNorm, NormOp::kLayerNorm}) {
    for (const int64_t n : {4096, 7168}) {
      for (const int64_t m : {4096, 8192, 32768, 131072}) oink::run_case(op, n, m, dev);
    }
  }
  return 0;
}
