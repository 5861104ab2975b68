#include "core/reduce_plan.h"

#include <algorithm>
#include <stdexcept>

#include "core/plan.h"  // ceil_div

namespace oink {
namespace {

// Threads a registers CTA aims for: short rows share a CTA of this many threads.
constexpr int kReduceCtaThreads = 256;

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

int chunk_elems_of(DType dtype) { return 16 / dtype_size(dtype); }

// The row streams of a call: `in` always, `in2` where the op reads two streams, `out` unless the
// call is a cross-entropy forward without the fused gradient (a reducing op that takes targets).
bool reads_in2(const ReduceProblem& p) { return traits_of(p.op).streams_in == 2; }
bool writes_out(const ReduceProblem& p) {
  const ReduceOpTraits& t = traits_of(p.op);
  return p.writes_rows || !t.takes_targets || !t.reduces;
}

// Whole 16-byte chunks on every row of every stream the call touches.
bool vector_io_allowed(const ReduceProblem& p) {
  const int elems = chunk_elems_of(p.dtype);
  if (p.cols % elems != 0) return false;
  auto aligned = [&](int align, const RowStrides& st) {
    return align >= 16 && strides_multiple_of(st, p.row_dims, elems);
  };
  if (!aligned(p.in_align, p.in_strides)) return false;
  if (reads_in2(p) && !aligned(p.in2_align, p.in2_strides)) return false;
  if (writes_out(p) && !aligned(p.out_align, p.out_strides)) return false;
  return true;
}

// The batch-invariant part of a CUDA plan: a function of (op, dtype, N), whether the call writes
// its rows (the loss-only cross-entropy: looped past registers) and the device's kind.
struct RowShape {
  ReduceVariant variant = ReduceVariant::kLooped;
  int chunks_per_thread = 0;
  int threads_per_row = kReduceLoopedThreads;
  int rows_per_cta = 1;
  int cluster_ctas = 0;
  int smem_bytes = 0;
};

// Whether a row of `chunks` chunks takes the cluster, and with CTAs of how many threads (0: it
// does not). The cluster is for rows the call writes (softmax, its backward, the fused
// cross-entropy): a loss-only cross-entropy reads its row once in either schedule, and `looped`
// streams it faster (bf16, M=4096, H100: 100% of a read at V=128256 against the cluster's 76%,
// whose CTAs stop at their exchange with nothing in flight; the fused form, 93% against 66%).
// Hopper or later, up to kReduceMaxClusterCtas slices, and the staged slices fit a CTA.
int cluster_threads(const ReduceProblem& p, const DeviceInfo& d, int64_t chunks) {
  const ReduceOpTraits& traits = traits_of(p.op);
  if (!traits.reduces || !writes_out(p) || d.cc_major < 9) return 0;
  for (const int threads : kReduceClusterThreads) {
    const int64_t ctas = ceil_div(chunks, reduce_slice_chunks(threads));
    if (ctas < 2 || ctas > kReduceMaxClusterCtas) continue;
    const int smem = reduce_cluster_smem_bytes(traits.streams_in, threads);
    return smem + kReduceClusterStaticSmemBytes <= d.max_smem_per_block ? threads : 0;
  }
  return 0;
}

RowShape row_shape(const ReduceProblem& p, const DeviceInfo& d) {
  const ReduceOpTraits& traits = traits_of(p.op);
  const int max_chunks = traits.max_chunks;
  const int64_t chunks = ceil_div(p.cols, chunk_elems_of(p.dtype));
  RowShape s;
  if (chunks > int64_t{kReduceMaxThreadsPerRow} * max_chunks) {
    // Past registers: the cluster where it takes the row (one read, one write), else looped
    // (pass 2 re-reads the row: the fused cross-entropy at 66% of 1R+1W against the cluster's
    // 93%, bf16, V=128256, M=4096, H100).
    if (const int threads = cluster_threads(p, d, chunks); threads > 0) {
      s.variant = ReduceVariant::kCluster;
      s.threads_per_row = threads;
      s.cluster_ctas = static_cast<int>(ceil_div(chunks, reduce_slice_chunks(threads)));
      s.smem_bytes = reduce_cluster_smem_bytes(traits.streams_in, threads);
    }
    return s;
  }
  // A thread holds the op's max_chunks (fewer only where the whole row is fewer): the registers
  // kernel's occupancy is set by its registers (softmax: ~56 a thread, 4 CTAs of 256 an SM), so
  // an SM's bytes in flight grow with a thread's chunks. bf16 softmax at N=4096, M=32768: 2 a
  // thread read 32 KiB an SM at once, 69% of the copy ceiling; 4 a thread (64 KiB), 97% (H100,
  // oink-bench, same run).
  const int c = static_cast<int>(std::min<int64_t>(max_chunks, next_pow2(chunks)));
  s.variant = ReduceVariant::kRegisters;
  s.chunks_per_thread = c;
  s.threads_per_row = static_cast<int>(next_pow2(ceil_div(chunks, c)));
  s.rows_per_cta = std::max(1, kReduceCtaThreads / s.threads_per_row);
  return s;
}

// CTAs (CUDA) or tasks (CPU, one row each) of a plan: none without elements.
int64_t expected_grid(const ReducePlan& plan, const ReduceProblem& p) {
  if (p.rows == 0 || p.cols == 0) return 0;
  switch (plan.variant) {
    case ReduceVariant::kRegisters:
      return ceil_div(p.rows, plan.rows_per_cta);
    case ReduceVariant::kCluster:
      return p.rows * plan.cluster_ctas;
    default:
      return p.rows;
  }
}

bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* reduce_variant_name(ReduceVariant v) {
  switch (v) {
    case ReduceVariant::kCpu:
      return "cpu";
    case ReduceVariant::kRegisters:
      return "registers";
    case ReduceVariant::kCluster:
      return "cluster";
    case ReduceVariant::kLooped:
      return "looped";
  }
  return "?";
}

int reduce_kernel_entry(const ReducePlan& plan) {
  constexpr int kEntries = static_cast<int>(sizeof(kReduceKernels) / sizeof(kReduceKernels[0]));
  for (int i = 0; i < kEntries; ++i) {
    const ReduceKernel& k = kReduceKernels[i];
    if (k.variant == plan.variant && k.vector_io == plan.vector_io &&
        k.chunks_per_thread == plan.chunks_per_thread &&
        (k.cta_threads == 0 || k.cta_threads == plan.block_threads)) {
      return i;
    }
  }
  return -1;
}

ReducePlan make_reduce_plan(const ReduceProblem& problem, const DeviceInfo& device) {
  ReducePlan plan;
  plan.chunk_elems = chunk_elems_of(problem.dtype);
  if (!device.is_cuda()) {
    plan.variant = ReduceVariant::kCpu;
    plan.vector_io = false;
    plan.chunks_per_thread = 0;
    plan.threads_per_row = 1;
    plan.rows_per_cta = 1;
    plan.block_threads = 1;
  } else {
    const RowShape s = row_shape(problem, device);
    plan.variant = s.variant;
    plan.vector_io = vector_io_allowed(problem);
    plan.chunks_per_thread = s.chunks_per_thread;
    plan.threads_per_row = s.threads_per_row;
    plan.rows_per_cta = s.rows_per_cta;
    plan.block_threads = s.threads_per_row * s.rows_per_cta;
    plan.cluster_ctas = s.cluster_ctas;
    plan.smem_bytes = s.smem_bytes;
  }
  plan.grid = expected_grid(plan, problem);
  const std::string why = reduce_plan_violation(plan, problem);
  if (!why.empty()) throw std::logic_error("make_reduce_plan: " + why);
  return plan;
}

std::string reduce_plan_violation(const ReducePlan& plan, const ReduceProblem& p) {
  const ReduceOpTraits& traits = traits_of(p.op);
  const bool cuda = plan.variant != ReduceVariant::kCpu;
  if (cuda && p.dtype == DType::kFloat64) return "float64 rows run on the CPU only";
  if (traits.takes_targets && p.row_dims.count != 1) {
    return "cross-entropy takes 2-D logits [M, V]: row_dims.count must be 1";
  }
  if (p.row_dims.count < 1 || p.row_dims.count > kMaxRowDims) {
    return "row_dims.count must be in [1, kMaxRowDims]";
  }
  if (plan.chunk_elems != chunk_elems_of(p.dtype)) {
    return "chunk_elems must be 16 / the dtype's size (16-byte chunks)";
  }
  if (!cuda) {
    if (plan.vector_io || plan.chunks_per_thread != 0 || plan.threads_per_row != 1 ||
        plan.rows_per_cta != 1 || plan.block_threads != 1 || plan.cluster_ctas != 0 ||
        plan.smem_bytes != 0) {
      return "a cpu plan has no CUDA schedule: no vector_io, no chunks, one thread and one row "
             "a task";
    }
    if (plan.grid != expected_grid(plan, p)) return "a cpu plan has one task per row (0 if empty)";
    return "";
  }
  if (reduce_kernel_entry(plan) < 0) {
    return "no instantiated kernel (kReduceKernels) has the plan's variant, vector_io and "
           "chunks_per_thread";
  }
  if (plan.chunks_per_thread > traits.max_chunks) {
    return "chunks_per_thread exceeds the op's max_chunks";
  }
  if (!is_pow2(plan.threads_per_row) || plan.threads_per_row > kReduceMaxThreadsPerRow) {
    return "threads_per_row must be a power of two, at most 1024";
  }
  if (plan.rows_per_cta < 1 || plan.block_threads != plan.threads_per_row * plan.rows_per_cta ||
      plan.block_threads > kReduceMaxThreadsPerRow) {
    return "block_threads must be threads_per_row * rows_per_cta, at most 1024";
  }
  if (plan.variant == ReduceVariant::kLooped &&
      (plan.block_threads != kReduceLoopedThreads || plan.rows_per_cta != 1)) {
    return "a looped CTA is kReduceLoopedThreads threads on one row";
  }
  if (plan.variant == ReduceVariant::kCluster) {
    if (!traits.reduces || !writes_out(p)) return "a cluster plan is for a reducing op that writes";
    if (plan.threads_per_row != plan.block_threads || plan.rows_per_cta != 1) {
      return "a cluster CTA is one slice of one row";
    }
    if (plan.cluster_ctas < 2 || plan.cluster_ctas > kReduceMaxClusterCtas ||
        plan.cluster_ctas !=
            ceil_div(ceil_div(p.cols, plan.chunk_elems), reduce_slice_chunks(plan.block_threads))) {
      return "cluster_ctas must be the row's slices of reduce_slice_chunks(block_threads) chunks, "
             "2 to kReduceMaxClusterCtas";
    }
    if (plan.smem_bytes != reduce_cluster_smem_bytes(traits.streams_in, plan.block_threads)) {
      return "a cluster CTA stages every stream's slice: smem_bytes";
    }
  } else if (plan.cluster_ctas != 0 || plan.smem_bytes != 0) {
    return "only a cluster plan has cluster_ctas and smem_bytes";
  }
  if (plan.variant == ReduceVariant::kRegisters &&
      int64_t{plan.threads_per_row} * plan.chunks_per_thread * plan.chunk_elems < p.cols) {
    return "registers do not hold the row (threads_per_row * chunks_per_thread * chunk_elems < N)";
  }
  if (plan.vector_io && !vector_io_allowed(p)) {
    return "vector_io needs N a multiple of chunk_elems, and 16-byte aligned bases and strides "
           "on every stream the op reads or writes";
  }
  if (plan.grid != expected_grid(plan, p)) {
    return "grid must be ceil(M / rows_per_cta) (cluster: M * cluster_ctas; looped: M; 0 "
           "without elements)";
  }
  if (plan.grid > 0x7fffffff) return "grid exceeds the CUDA limit (INT32_MAX)";
  return "";
}

std::string describe(const ReducePlan& plan, const ReduceProblem& problem) {
  std::string s = std::string(traits_of(problem.op).name) + " " + reduce_variant_name(plan.variant);
  if (plan.variant == ReduceVariant::kCpu) return s;
  using std::to_string;
  return s + (plan.vector_io ? " vector" : " elementwise") +
         " chunks=" + to_string(plan.chunks_per_thread) +
         " threads/row=" + to_string(plan.threads_per_row) +
         " rows/cta=" + to_string(plan.rows_per_cta) +
         (plan.variant == ReduceVariant::kCluster
              ? " cluster=" + to_string(plan.cluster_ctas) + " smem=" + to_string(plan.smem_bytes)
              : "") +
         " grid=" + to_string(plan.grid);
}

}  // namespace oink
