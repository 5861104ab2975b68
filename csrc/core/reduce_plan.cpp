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

// The batch-invariant part of a CUDA plan: a function of (op, dtype, N) alone.
struct RowShape {
  ReduceVariant variant = ReduceVariant::kLooped;
  int chunks_per_thread = 0;
  int threads_per_row = kReduceLoopedThreads;
  int rows_per_cta = 1;
};

RowShape row_shape(ReduceOp op, DType dtype, int64_t cols) {
  const int max_chunks = traits_of(op).max_chunks;
  const int64_t chunks = ceil_div(cols, chunk_elems_of(dtype));
  RowShape s;
  if (chunks > int64_t{kReduceMaxThreadsPerRow} * max_chunks) return s;  // looped
  // A thread holds the op's max_chunks (fewer only where the whole row is fewer): the registers
  // kernel's occupancy is set by its registers (softmax: ~56 a thread, 4 CTAs of 256 an SM), so
  // an SM's bytes in flight grow with a thread's chunks. At 2 a thread, bf16 softmax at N=4096,
  // M=32768 read 32 KiB an SM at once and ran at 69% of the copy ceiling, its backward (2
  // streams x 2 chunks, 48 registers, 80 KiB) at 101% (H100, oink-bench).
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
  return plan.variant == ReduceVariant::kRegisters ? ceil_div(p.rows, plan.rows_per_cta) : p.rows;
}

bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* reduce_variant_name(ReduceVariant v) {
  switch (v) {
    case ReduceVariant::kCpu:
      return "cpu";
    case ReduceVariant::kRegisters:
      return "registers";
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
        k.chunks_per_thread == plan.chunks_per_thread) {
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
    const RowShape s = row_shape(problem.op, problem.dtype, problem.cols);
    plan.variant = s.variant;
    plan.vector_io = vector_io_allowed(problem);
    plan.chunks_per_thread = s.chunks_per_thread;
    plan.threads_per_row = s.threads_per_row;
    plan.rows_per_cta = s.rows_per_cta;
    plan.block_threads = s.threads_per_row * s.rows_per_cta;
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
        plan.rows_per_cta != 1 || plan.block_threads != 1) {
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
  if (plan.variant == ReduceVariant::kRegisters &&
      int64_t{plan.threads_per_row} * plan.chunks_per_thread * plan.chunk_elems < p.cols) {
    return "registers do not hold the row (threads_per_row * chunks_per_thread * chunk_elems < N)";
  }
  if (plan.vector_io && !vector_io_allowed(p)) {
    return "vector_io needs N a multiple of chunk_elems, and 16-byte aligned bases and strides "
           "on every stream the op reads or writes";
  }
  if (plan.grid != expected_grid(plan, p)) {
    return "grid must be ceil(M / rows_per_cta) (looped: M; 0 without elements)";
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
         " rows/cta=" + to_string(plan.rows_per_cta) + " grid=" + to_string(plan.grid);
}

}  // namespace oink
