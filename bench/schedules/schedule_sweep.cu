// oink_schedule_sweep: times hand-made launch plans next to make_plan()'s choice, torch-free, to
// find out what limits a schedule (the evidence behind docs/kernels.md) without a rebuild per
// idea. Every plan is checked with plan_violation() before it is launched, so a sweep never
// launches a plan the kernels do not support.
//
//   oink_schedule_sweep            decode, large-batch and long-row cases, bf16 (some with a
//                                  float32 weight: op "rmsnorm/w32"; LayerNorm's forward at
//                                  the training bench's shapes); one line per (case, plan)
//   oink_schedule_sweep OP N M [w32|f32|nw]   one case (OP: rmsnorm, fused_add_rms_norm or
//                                  layernorm, whose weight and bias are float32 as its binding
//                                  passes them; for the others w32: a float32 weight, f32:
//                                  float32 rows and weight, nw: no weight; default bf16 rows
//                                  and weight), e.g. under ncu
//
// Timing: a CUDA graph of kCalls launches over rotating buffer sets (one pass over the sets is
// more than twice the L2), median over kReplays replays between CUDA events.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/args.h"
#include "core/plan.h"
#include "core/problem.h"
#include "kernels/launch.h"
#include "timing_harness.h"

namespace oink {
namespace {

constexpr int kCalls = 20;
using bench::check;
using bench::kReplays;

using bench::Buffers;

// Enough sets that one pass over them is more than twice the L2 (or one set if it is already).
Buffers allocate_sets(const NormProblem& p, int l2_bytes) {
  const size_t bytes = static_cast<size_t>(p.rows) * p.cols * dtype_size(p.x_dtype);
  return bench::allocate(p,
                         std::min<size_t>(kCalls, 2 * static_cast<size_t>(l2_bytes) / bytes + 1));
}

// Median µs per launch of `plan`, or a negative value if a launch failed.
double time_plan(const NormPlan& plan, const NormProblem& p, const Buffers& b, bool weight,
                 cudaStream_t stream) {
  const bool fused = p.op == NormOp::kFusedAddRmsNorm;
  auto launch_all = [&]() -> cudaError_t {
    for (int i = 0; i < kCalls; ++i) {
      const size_t set = i % b.x.size();
      NormArgs args;
      args.x = b.x[set];
      args.out = fused ? b.x[set] : b.other[set];
      args.residual = fused ? b.other[set] : nullptr;
      args.weight = weight ? b.weight : nullptr;
      args.bias = p.has_bias ? b.bias : nullptr;
      args.eps = 1e-6f;
      const cudaError_t err = launch_norm(plan, p, args, stream);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  };
  return bench::median_us_per_call(launch_all, kCalls, stream);
}

struct Candidate {
  std::string name;
  NormPlan plan;
  bool weight = true;
};

// The planner's plan, the same without PDL, without weight (decode), the cluster's slices in
// pairs or alone, the registers and tile schedules widened to every row, and every streamed
// (stages, CTAs per SM) that fits.
std::vector<Candidate> schedules(const NormProblem& p, const DeviceInfo& d) {
  std::vector<Candidate> out;
  LaunchOptions no_pdl;
  no_pdl.allow_pdl = false;
  const NormPlan chosen = plan_on_device(p, d, 0);
  out.push_back({"planner", chosen});
  out.push_back({"planner_no_pdl", plan_on_device(p, d, 0, no_pdl)});
  // Long rows: the cluster with two slices a CTA where the planner gives each its own (half the
  // CTAs a cluster, 512 threads each), or one a CTA where the planner pairs them (the fused op's
  // large batches) and one each fits in a cluster.
  if (chosen.variant == KernelVariant::kCluster) {
    const bool paired = chosen.block_threads == kClusterMaxThreads;
    if (!paired || chosen.slices <= kMaxClusterCtas) {
      NormPlan other = chosen;
      other.block_threads = paired ? kClusterMaxThreads / 2 : kClusterMaxThreads;
      other.cluster_ctas = paired ? chosen.slices : (chosen.slices + 1) / 2;
      other.smem_bytes = static_cast<int>(tile_smem_bytes(p, other.block_threads));
      other.grid = p.rows * other.cluster_ctas;
      out.push_back({paired ? "cluster_singles" : "cluster_pairs", other});
    }
  }
  // rmsnorm's float32 weight on 16-bit long rows: the cluster holding the other share of that
  // weight in registers (whole where the planner holds half, and the reverse: weight_held_chunks
  // in core/plan.cpp).
  const bool wide_weight = p.has_weight && dtype_size(p.w_dtype) > dtype_size(p.x_dtype);
  if (chosen.variant == KernelVariant::kCluster && p.op == NormOp::kRmsNorm && wide_weight) {
    const bool whole = chosen.weight_held_chunks == kTileSlotsPerThread;
    for (const bool pdl : {true, false}) {
      NormPlan other = chosen;
      other.weight_held_chunks = whole ? kTileSlotsPerThread / 2 : kTileSlotsPerThread;
      other.use_pdl = pdl && chosen.use_pdl;
      out.push_back({std::string(whole ? "cluster_weight_half" : "cluster_weight_whole") +
                         (pdl ? "" : "_no_pdl"),
                     other});
    }
  }
  // The registers schedule with kRegistersLanesPerThread lanes a thread, and with one, with PDL
  // as chosen and without (plan_violation says where folding does not apply).
  auto registers_with_lanes = [&](int64_t rows, int lanes, bool pdl) {
    NormProblem q = p;
    q.rows = rows;
    NormPlan plan = plan_on_device(q, d, 0);
    plan.use_pdl = pdl && chosen.use_pdl;
    plan.grid = (p.rows + plan.rows_per_cta - 1) / plan.rows_per_cta;
    if (plan.variant == KernelVariant::kRowInRegisters) {
      plan.lanes_per_thread = lanes;
      plan.block_threads = plan.threads_per_row / lanes * plan.rows_per_cta;
    }
    return plan;
  };
  if (registers_with_lanes(1, 1, true).variant == KernelVariant::kRowInRegisters) {
    for (const int lanes : {1, kRegistersLanesPerThread}) {
      const std::string name = "registers_l" + std::to_string(lanes);
      out.push_back({name, registers_with_lanes(1, lanes, true)});
      out.push_back({name + "_no_pdl", registers_with_lanes(1, lanes, false)});
    }
  }
  if (p.rows <= 16) {
    NormProblem unweighted = p;
    unweighted.has_weight = false;
    out.push_back({"no_weight_no_pdl", plan_on_device(unweighted, d, 0, no_pdl), false});
    return out;
  }
  // A plan made for `rows` rows of `op`, launched over p.rows: the same schedule at another batch
  // size (and, for the tile schedule, the other op's: the planner may not pick it for this one).
  auto widened = [&](int64_t rows, NormOp op, DType w_dtype) {
    NormProblem q = p;
    q.rows = rows;
    q.op = op;
    q.w_dtype = w_dtype;
    NormPlan plan = plan_on_device(q, d, 0);
    plan.use_pdl = chosen.use_pdl;
    if (plan.variant != KernelVariant::kStreamed) {
      plan.grid = (p.rows + plan.rows_per_cta - 1) / plan.rows_per_cta;
    }
    if (plan.variant == KernelVariant::kTile) {
      plan.smem_bytes = static_cast<int>(tile_smem_bytes(p, plan.block_threads));
    }
    return plan;
  };
  out.push_back({"registers", widened(1, p.op, p.w_dtype)});  // the per-row schedule
  // The tile's shape from rmsnorm's plan of many rows (the fused op's shared memory is its own:
  // widened); LayerNorm's own (its float32 weight and bias are read at the store, not held).
  const NormPlan many =
      widened(int64_t{1} << 20, p.op == NormOp::kLayerNorm ? p.op : NormOp::kRmsNorm, p.w_dtype);
  if (many.variant == KernelVariant::kTile) {
    out.push_back({"tile", many});
    NormPlan no_pdl_tile = many;
    no_pdl_tile.use_pdl = false;
    out.push_back({"tile_no_pdl", no_pdl_tile});
  }
  // The streamed layout of this op and row: one lane per thread, its slots per thread.
  NormPlan streamed = widened(1, p.op, p.w_dtype);
  // (Compiled for rmsnorm with a weight wider than x on rows of 64-127 lanes only: op_streams
  // and streamed_lanes in core/plan.cpp; the tile takes longer rows.)
  if (p.op != NormOp::kRmsNorm || !wide_weight || !streamed.vector_io || p.rows <= 256 ||
      streamed.threads_per_row >= kTileMinThreadsPerRow) {
    return out;
  }
  streamed.variant = KernelVariant::kStreamed;
  streamed.lanes_per_thread = 1;  // one lane a thread (the registers plan may fold two)
  streamed.block_threads = streamed.threads_per_row * streamed.rows_per_cta;
  streamed.chunks_per_thread = static_cast<int>(
      (streamed.chunks_per_row + streamed.threads_per_row - 1) / streamed.threads_per_row);
  for (int stages = kMinStages; stages <= kMaxStages; ++stages) {
    for (int ctas : {1, 2, 3, 4, 5, 6, 8}) {
      NormPlan plan = streamed;
      plan.stages = stages;
      plan.smem_bytes = static_cast<int>(
          streamed_smem_bytes(p, plan.chunks_per_thread, plan.block_threads, stages));
      plan.grid = int64_t{d.sm_count} * ctas;
      const int64_t per_sm = plan.smem_bytes + kStreamedStaticSmemBytes + d.reserved_smem_per_block;
      if (ctas * per_sm > d.max_smem_per_sm || ctas * plan.block_threads > d.max_threads_per_sm ||
          plan.grid > p.rows / plan.rows_per_cta) {
        continue;  // would not be resident at once, or more CTAs than row groups
      }
      out.push_back({"streamed_s" + std::to_string(stages) + "_c" + std::to_string(ctas), plan});
    }
  }
  return out;
}

// Every schedule with the PDL trigger the planner's rule gives it (its kernel's CTAs per SM from
// the image), and the planner's and the tile's with the other trigger beside them.
std::vector<Candidate> candidates(const NormProblem& p, const DeviceInfo& d) {
  std::vector<Candidate> out;
  for (Candidate c : schedules(p, d)) {
    KernelImage image;
    if (kernel_image(c.plan, p, 0, &image) == cudaSuccess) {
      c.plan.ctas_per_sm = kernel_ctas_per_sm(image, c.plan.block_threads, c.plan.smem_bytes, d);
    }
    (void)cudaGetLastError();  // a schedule without a kernel is reported when it is timed
    c.plan.pdl_early_trigger = pdl_early_trigger_pays(c.plan, d);
    out.push_back(c);
    const bool flips = c.name == "planner" || c.name == "tile";
    if (flips && c.plan.use_pdl && c.plan.variant != KernelVariant::kStreamed) {
      c.plan.pdl_early_trigger = !c.plan.pdl_early_trigger;
      out.push_back({c.name + (c.plan.pdl_early_trigger ? "_early_trigger" : "_exit_trigger"),
                     c.plan, c.weight});
    }
  }
  return out;
}

NormProblem make_problem(NormOp op, int64_t n, int64_t m, DType x_dtype, DType w_dtype,
                         bool has_weight) {
  NormProblem p;
  p.op = op;
  p.x_dtype = x_dtype;
  p.w_dtype = w_dtype;
  p.has_weight = has_weight;
  p.has_bias = op == NormOp::kLayerNorm;
  p.rows = m;
  p.cols = n;
  set_row_stride(p, n);
  return p;  // cudaMalloc'd buffers: 256-byte aligned, the default alignments
}

}  // namespace
}  // namespace oink

int main(int argc, char** argv) {
  using namespace oink;
  struct Case {
    NormOp op;
    int64_t n, m;
    DType w_dtype = DType::kBFloat16;
    DType x_dtype = DType::kBFloat16;
    bool weight = true;
  };
  std::vector<Case> cases;
  if (argc == 4 || argc == 5) {
    const std::string op = argv[1];
    if (op != "rmsnorm" && op != "fused_add_rms_norm" && op != "layernorm") {
      std::fprintf(stderr,
                   "oink_schedule_sweep: OP must be rmsnorm, fused_add_rms_norm or layernorm\n");
      return 2;
    }
    const int64_t n = std::atoll(argv[2]), m = std::atoll(argv[3]);
    if (n < 1 || m < 1) {
      std::fprintf(stderr, "oink_schedule_sweep: N and M must be positive integers\n");
      return 2;
    }
    const std::string variant = argc == 5 ? argv[4] : "";
    if (argc == 5 &&
        ((variant != "w32" && variant != "f32" && variant != "nw") || op == "layernorm")) {
      std::fprintf(stderr,
                   "oink_schedule_sweep: the fourth argument must be w32, f32 or nw, got '%s' "
                   "(none for layernorm, whose weight is float32 already)\n",
                   variant.c_str());
      return 2;
    }
    const NormOp norm_op = op == "rmsnorm"     ? NormOp::kRmsNorm
                           : op == "layernorm" ? NormOp::kLayerNorm
                                               : NormOp::kFusedAddRmsNorm;
    const bool wide = !variant.empty() || norm_op == NormOp::kLayerNorm;
    cases.push_back({norm_op, n, m, wide ? DType::kFloat32 : DType::kBFloat16,
                     variant == "f32" ? DType::kFloat32 : DType::kBFloat16, variant != "nw"});
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: oink_schedule_sweep [OP N M [w32|f32|nw]]\n");
    return 2;
  } else {
    // The last four: rows of 1024 lanes at mid M, whether the tile pays below 3 row groups per
    // SM where the registers CTAs are 1024 threads (N=16384, M=256: 0.74x FlashInfer-CuTe).
    const int64_t shapes[][2] = {
        {4096, 1},     {7168, 1},     {7168, 64},    {4096, 128},   {7168, 128},    {4096, 256},
        {7168, 256},   {4096, 512},   {7168, 512},   {4096, 1024},  {7168, 1024},   {8192, 1024},
        {4096, 65536}, {6144, 16384}, {7168, 65536}, {8192, 65536}, {16384, 16384}, {16384, 64},
        {16384, 128},  {16384, 256},  {16384, 512}};
    // Long rows: the cluster, its slices one a CTA or in pairs (the planner's plan beside the
    // other: cluster_pairs or cluster_singles).
    const int64_t long_rows[][2] = {{32768, 4096}, {131072, 1}, {131072, 4096}, {262144, 4096}};
    for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
      for (const auto& s : shapes) cases.push_back({op, s[0], s[1]});
      for (const auto& s : long_rows) cases.push_back({op, s[0], s[1]});
    }
    // rmsnorm with a float32 weight on bf16 rows: the tile, holding it in registers as float32,
    // against the registers kernel.
    const int64_t w32_shapes[][2] = {{7168, 4096}, {8192, 4096}, {7168, 16384}, {8192, 16384}};
    for (const auto& s : w32_shapes)
      cases.push_back({NormOp::kRmsNorm, s[0], s[1], DType::kFloat32});
    // LayerNorm's forward (float32 weight and bias), the training bench's shapes: its tile, 10
    // points of copy under RMSNorm's, beside its registers kernel.
    const int64_t layernorm_shapes[][2] = {
        {4096, 8192}, {4096, 131072}, {7168, 4096}, {7168, 65536}};
    for (const auto& s : layernorm_shapes)
      cases.push_back({NormOp::kLayerNorm, s[0], s[1], DType::kFloat32});
  }
  const bench::Device dev = bench::current_device();
  const cudaDeviceProp& prop = dev.prop;
  const DeviceInfo& d = dev.info;
  cudaStream_t stream = dev.stream;
  std::printf("# %s, %d SMs, L2 %d MiB; µs per launch (median of %d graph replays of %d)\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, kReplays, kCalls);
  std::printf("%-19s %6s %7s %-22s %9s %8s  plan\n", "op", "N", "M", "candidate", "us", "GB/s");
  for (const Case& s : cases) {
    const NormOp op = s.op;
    const NormProblem p = make_problem(op, s.n, s.m, s.x_dtype, s.w_dtype, s.weight);
    Buffers buffers = allocate_sets(p, prop.l2CacheSize);
    // Least bytes: x read and the output written (the fused op: the residual read and written
    // too), the weight once (LayerNorm: the bias too).
    const double moved =
        (op == NormOp::kFusedAddRmsNorm ? 4.0 : 2.0) * s.m * s.n * dtype_size(s.x_dtype) +
        (s.weight ? s.n * dtype_size(s.w_dtype) : 0) * (p.has_bias ? 2 : 1);
    const char* suffix = !s.weight                                     ? "/nw"
                         : s.x_dtype == DType::kFloat32                ? "/f32"
                         : s.w_dtype == DType::kFloat32 && !p.has_bias ? "/w32"
                                                                       : "";
    const std::string name = std::string(op_name(op)) + suffix;
    for (const Candidate& c : candidates(p, d)) {
      NormProblem used = p;
      used.has_weight = c.weight && s.weight;
      const std::string broken = plan_violation(c.plan, used, d);
      if (!broken.empty()) {
        std::printf("%-19s %6lld %7lld %-22s   invalid: %s\n", name.c_str(), (long long)s.n,
                    (long long)s.m, c.name.c_str(), broken.c_str());
        continue;
      }
      const double us = time_plan(c.plan, used, buffers, used.has_weight, stream);
      std::printf("%-19s %6lld %7lld %-22s %9.2f %8.0f  %s\n", name.c_str(), (long long)s.n,
                  (long long)s.m, c.name.c_str(), us, us > 0 ? moved / us / 1e3 : 0.0,
                  describe(c.plan, used, d).c_str());
      std::fflush(stdout);
    }
    bench::release(buffers);
  }
  return 0;
}
