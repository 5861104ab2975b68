// make_reduce_plan over a grid of ops x dtypes x N (1 to 300000: primes, powers of two and their
// neighbours, vocabulary sizes) x layouts (alignments, padded strides, several row dimensions)
// x M, for a Hopper DeviceInfo and the CPU one: no plan breaks an invariant, the schedule is
// (op, dtype, N)'s alone (batch invariance), vector I/O exactly where alignment allows, every
// kernel entry is reached. reduce_plan_violation must catch each hand-broken plan.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/reduce_plan.h"

namespace oink {
namespace {

DeviceInfo hopper() {
  DeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.max_smem_per_block = 232448;
  d.max_smem_per_sm = 233472;
  return d;
}

constexpr ReduceOp kOps[] = {ReduceOp::kSoftmax, ReduceOp::kSoftmaxBackward,
                             ReduceOp::kCrossEntropy, ReduceOp::kCrossEntropyBackward};
constexpr DType kCudaDtypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};
constexpr DType kCpuDtypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                                DType::kFloat64};
constexpr int64_t kCols[] = {
    1,      2,      3,      4,      5,      7,      8,      9,      13,    15,     16,
    17,     31,     32,     33,     63,     64,     65,     100,    127,   128,    129,
    255,    256,    257,    511,    512,    513,    1000,   1023,   1024,  1025,   2047,
    2048,   2049,   4095,   4096,   4097,   7919,   8191,   8192,   8193,  16383,  16384,
    16385,  32000,  32767,  32768,  32769,  50257,  65535,  65536,  65537, 104729, 128256,
    131071, 131072, 131073, 151936, 262143, 262144, 262145, 299993, 300000};
constexpr int64_t kRows[] = {0, 1, 7, 4096};

// Base alignments (bytes) and row-stride padding (elements) of in, in2 and out; `dims`: the rows
// walk 2 leading dimensions (softmax ops only: cross-entropy takes 2-D logits).
struct Layout {
  const char* name;
  int in_align, in2_align, out_align;
  int64_t in_pad, in2_pad, out_pad;
  int dims;
};
constexpr Layout kLayouts[] = {
    {"aligned", 256, 256, 256, 0, 0, 0, 1},  {"in_align8", 8, 256, 256, 0, 0, 0, 1},
    {"in2_align2", 256, 2, 256, 0, 0, 0, 1}, {"out_align4", 256, 256, 4, 0, 0, 0, 1},
    {"out_pad1", 256, 256, 256, 0, 0, 1, 1}, {"in_pad3", 256, 256, 256, 3, 0, 0, 1},
    {"pad8", 256, 256, 256, 8, 8, 8, 1},     {"pad64_align16", 16, 16, 16, 64, 64, 64, 1},
    {"dims2", 256, 256, 256, 0, 0, 0, 2},    {"dims2_in2_pad5", 256, 256, 256, 0, 5, 0, 2},
    {"absent", 0, 0, 0, 0, 0, 0, 1},
};

int chunk_elems(DType t) { return 16 / dtype_size(t); }

ReduceProblem make_problem(ReduceOp op, DType t, int64_t n, int64_t m, const Layout& l,
                           bool writes_rows = true) {
  ReduceProblem p;
  p.op = op;
  p.dtype = t;
  p.rows = m;
  p.cols = n;
  p.writes_rows = writes_rows;
  p.row_dims = RowDims{};
  p.row_dims.count = l.dims;
  const int64_t inner = l.dims == 2 && m % 4 == 0 && m > 0 ? 4 : 1;
  if (l.dims == 2) {
    p.row_dims.size[0] = inner;
    p.row_dims.size[1] = m / inner;
  } else {
    p.row_dims.size[0] = m;
  }
  auto strides = [&](int64_t pad) {
    RowStrides s;
    s.s[0] = n + pad;
    s.s[1] = (n + pad) * inner + 16;  // a gap between the outer rows
    return s;
  };
  p.in_strides = strides(l.in_pad);
  p.in2_strides = strides(l.in2_pad);
  p.out_strides = strides(l.out_pad);
  p.in_align = l.in_align;
  p.in2_align = l.in2_align;
  p.out_align = l.out_align;
  return p;
}

struct Case {
  bool cuda;
  const Layout* layout;
  ReduceProblem problem;
  ReducePlan plan;
  std::string error;  // what make_reduce_plan threw, if it did
};

const std::vector<Case>& grid() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> all;
    for (const bool cuda : {true, false}) {
      const DeviceInfo d = cuda ? hopper() : DeviceInfo{};
      for (const ReduceOp op : kOps) {
        const bool ce = traits_of(op).takes_targets;
        for (const DType t :
             cuda ? std::vector<DType>(std::begin(kCudaDtypes), std::end(kCudaDtypes))
                  : std::vector<DType>(std::begin(kCpuDtypes), std::end(kCpuDtypes))) {
          for (const int64_t n : kCols) {
            for (const Layout& l : kLayouts) {
              if (ce && l.dims != 1) continue;
              for (const bool writes : {true, false}) {
                if (!writes && op != ReduceOp::kCrossEntropy) continue;
                for (const int64_t m : kRows) {
                  Case c{cuda, &l, make_problem(op, t, n, m, l, writes), {}, ""};
                  try {
                    c.plan = make_reduce_plan(c.problem, d);
                  } catch (const std::exception& e) {
                    c.error = e.what();
                  }
                  all.push_back(c);
                }
              }
            }
          }
        }
      }
    }
    return all;
  }();
  return cases;
}

// Runs `check` on every case; reports the first few failures only.
void for_each_case(const std::function<std::string(const Case&)>& check) {
  int failures = 0;
  for (const Case& c : grid()) {
    const std::string broken = c.error.empty() ? check(c) : "threw: " + c.error;
    if (!broken.empty() && ++failures <= 10) {
      ADD_FAILURE() << broken << "\n  " << describe(c.plan, c.problem)
                    << " dtype=" << dtype_name(c.problem.dtype) << " N=" << c.problem.cols
                    << " M=" << c.problem.rows << " layout=" << c.layout->name;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(ReducePlan, GridPlansHaveNoViolation) {
  EXPECT_GT(grid().size(), 30000u);
  for_each_case([](const Case& c) { return reduce_plan_violation(c.plan, c.problem); });
}

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// The planning rule, restated independently of the planner.
std::string off_rule(const Case& c) {
  const ReduceProblem& p = c.problem;
  const ReducePlan& plan = c.plan;
  const int ce = chunk_elems(p.dtype);
  if (plan.chunk_elems != ce) return "chunk_elems";
  const bool empty = p.rows == 0 || p.cols == 0;
  if (!c.cuda) {
    if (plan.variant != ReduceVariant::kCpu || plan.vector_io) return "cpu plan";
    return plan.grid == (empty ? 0 : p.rows) ? "" : "cpu grid";
  }
  const int64_t chunks = (p.cols + ce - 1) / ce;
  const int max_chunks = traits_of(p.op).max_chunks;
  const bool writes = p.op != ReduceOp::kCrossEntropy || p.writes_rows;
  if (chunks <= int64_t{1024} * max_chunks) {
    const int c_ = static_cast<int>(std::min<int64_t>(max_chunks, next_pow2(chunks)));
    const int64_t tpr = next_pow2((chunks + c_ - 1) / c_);
    const int64_t rpc = tpr >= 256 ? 1 : 256 / tpr;
    if (plan.variant != ReduceVariant::kRegisters || plan.chunks_per_thread != c_ ||
        plan.threads_per_row != tpr || plan.rows_per_cta != rpc ||
        plan.block_threads != tpr * rpc) {
      return "registers schedule off the rule";
    }
    if (plan.grid != (empty ? 0 : (p.rows + rpc - 1) / rpc)) return "registers grid";
  } else if (const int64_t threads = (chunks + 2047) / 2048 <= 8 ? 256 : 512,
             slices = (chunks + threads * 8 - 1) / (threads * 8);
             traits_of(p.op).reduces && writes && slices <= 8) {
    // Past registers, a written row takes a cluster of at most 8 CTAs, one a slice: CTAs of 256
    // threads (2048 chunks) while 8 of them hold the row, else of 512 (4096 chunks); every
    // stream's slice staged: 16 bytes a chunk.
    if (plan.variant != ReduceVariant::kCluster || plan.chunks_per_thread != 0 ||
        plan.threads_per_row != threads || plan.rows_per_cta != 1 ||
        plan.block_threads != threads || plan.cluster_ctas != slices ||
        plan.smem_bytes != traits_of(p.op).streams_in * threads * 8 * 16) {
      return "cluster schedule off the rule";
    }
    if (plan.grid != (empty ? 0 : p.rows * slices)) return "cluster grid";
  } else {
    if (plan.variant != ReduceVariant::kLooped || plan.chunks_per_thread != 0 ||
        plan.threads_per_row != kReduceLoopedThreads || plan.rows_per_cta != 1 ||
        plan.block_threads != kReduceLoopedThreads) {
      return "looped schedule off the rule";
    }
    if (plan.grid != (empty ? 0 : p.rows)) return "looped grid";
  }
  if (plan.variant != ReduceVariant::kCluster && (plan.cluster_ctas != 0 || plan.smem_bytes != 0)) {
    return "cluster_ctas or smem_bytes off a cluster plan";
  }
  const Layout& l = *c.layout;
  const bool two = p.op == ReduceOp::kSoftmaxBackward;
  auto ok = [&](int align, int64_t pad) { return align >= 16 && (p.cols + pad) % ce == 0; };
  const bool vec = p.cols % ce == 0 && ok(l.in_align, l.in_pad) &&
                   (!two || ok(l.in2_align, l.in2_pad)) && (!writes || ok(l.out_align, l.out_pad));
  if (plan.vector_io != vec) return "vector_io not exactly where every present stream is aligned";
  return "";
}

TEST(ReducePlan, FollowsTheRule) { for_each_case(off_rule); }

// Everything but vector_io and grid is a function of (device kind, op, dtype, N, writes_rows):
// never of M, the strides or the alignments. (A loss-only cross-entropy loops where the fused one
// takes a cluster: their losses may differ in the last bit, as docs/numerics.md says.)
TEST(ReducePlan, BatchInvariant) {
  using Shape = std::tuple<ReduceVariant, int, int, int, int, int, int, int>;
  std::map<std::tuple<bool, ReduceOp, DType, int64_t, bool>, Shape> seen;
  std::map<std::tuple<bool, ReduceOp, DType, int64_t, bool, const Layout*>, bool> vector_io;
  for_each_case([&](const Case& c) -> std::string {
    const ReducePlan& p = c.plan;
    const Shape shape{p.variant,      p.chunk_elems,   p.chunks_per_thread, p.threads_per_row,
                      p.rows_per_cta, p.block_threads, p.cluster_ctas,      p.smem_bytes};
    const auto key = std::make_tuple(c.cuda, c.problem.op, c.problem.dtype, c.problem.cols,
                                     c.problem.writes_rows);
    if (seen.emplace(key, shape).first->second != shape) return "schedule changed with M/layout";
    // Across M alone (the same layout: the same alignments and strides), vector_io holds too.
    const auto vkey = std::tuple_cat(key, std::make_tuple(c.layout));
    if (vector_io.emplace(vkey, p.vector_io).first->second != p.vector_io) {
      return "vector_io changed with M";
    }
    return "";
  });
}

TEST(ReducePlan, EveryKernelEntryIsReached) {
  std::set<int> entries;
  for (const Case& c : grid()) {
    if (c.cuda && c.error.empty()) entries.insert(reduce_kernel_entry(c.plan));
  }
  EXPECT_EQ(entries.count(-1), 0u);
  EXPECT_EQ(entries.size(), std::size(kReduceKernels));
}

TEST(ReducePlan, Examples) {
  const Layout& a = kLayouts[0];
  struct Example {
    ReduceOp op;
    DType t;
    int64_t n, m;
    ReduceVariant v;
    int chunks, tpr, rpc;
    int64_t grid;
  };
  const Example examples[] = {
      // 4096 bf16: 512 chunks, softmax's 4 a thread on 128 threads, 2 rows a CTA.
      {ReduceOp::kSoftmax, DType::kBFloat16, 4096, 4096, ReduceVariant::kRegisters, 4, 128, 2,
       2048},
      // 1 element: one thread a row, 256 rows a CTA.
      {ReduceOp::kSoftmax, DType::kFloat32, 1, 4096, ReduceVariant::kRegisters, 1, 1, 256, 16},
      // 100 bf16: 13 chunks, 4 a thread on 4 threads, 64 rows a CTA.
      {ReduceOp::kSoftmax, DType::kBFloat16, 100, 7, ReduceVariant::kRegisters, 4, 4, 64, 1},
      // 2 chunks: one thread holds the row (2 chunks, not 4).
      {ReduceOp::kSoftmax, DType::kBFloat16, 16, 7, ReduceVariant::kRegisters, 2, 1, 256, 1},
      // The longest rows in registers: 4096 chunks (softmax), 2048 (its backward, 2 a thread).
      // Then clusters of 256-thread CTAs, one per 2048 chunks: 4097 chunks take 3; past 8 of
      // them, 512-thread CTAs of 4096 chunks.
      {ReduceOp::kSoftmax, DType::kBFloat16, 32768, 7, ReduceVariant::kRegisters, 4, 1024, 1, 7},
      {ReduceOp::kSoftmax, DType::kBFloat16, 32769, 7, ReduceVariant::kCluster, 0, 256, 1, 21},
      {ReduceOp::kSoftmaxBackward, DType::kFloat16, 16384, 3, ReduceVariant::kRegisters, 2, 1024, 1,
       3},
      {ReduceOp::kSoftmaxBackward, DType::kFloat16, 16385, 3, ReduceVariant::kCluster, 0, 256, 1,
       6},
      // cross_entropy holds at most 2 chunks: 1024 threads x 2 x 4 floats, then a cluster.
      {ReduceOp::kCrossEntropy, DType::kFloat32, 8192, 5, ReduceVariant::kRegisters, 2, 1024, 1, 5},
      {ReduceOp::kCrossEntropy, DType::kFloat32, 16384, 5, ReduceVariant::kCluster, 0, 256, 1, 10},
      {ReduceOp::kCrossEntropy, DType::kBFloat16, 128256, 5, ReduceVariant::kCluster, 0, 256, 1,
       40},
      {ReduceOp::kCrossEntropy, DType::kBFloat16, 151936, 5, ReduceVariant::kCluster, 0, 512, 1,
       25},
      {ReduceOp::kCrossEntropy, DType::kBFloat16, 262144, 5, ReduceVariant::kCluster, 0, 512, 1,
       40},
      // Past 8 slices of 4096 (32768 chunks), rows without a reduction and loss-only rows loop.
      {ReduceOp::kCrossEntropy, DType::kBFloat16, 262152, 5, ReduceVariant::kLooped, 0, 512, 1, 5},
      {ReduceOp::kCrossEntropyBackward, DType::kBFloat16, 128256, 5, ReduceVariant::kLooped, 0, 512,
       1, 5},
      // No elements: no CTAs.
      {ReduceOp::kCrossEntropyBackward, DType::kBFloat16, 4096, 0, ReduceVariant::kRegisters, 4,
       128, 2, 0},
      {ReduceOp::kSoftmax, DType::kBFloat16, 0, 9, ReduceVariant::kRegisters, 1, 1, 256, 0},
  };
  for (const Example& e : examples) {
    const ReduceProblem p = make_problem(e.op, e.t, e.n, e.m, a);
    const ReducePlan plan = make_reduce_plan(p, hopper());
    SCOPED_TRACE(describe(plan, p));
    EXPECT_EQ(plan.variant, e.v);
    EXPECT_EQ(plan.chunks_per_thread, e.chunks);
    EXPECT_EQ(plan.threads_per_row, e.tpr);
    EXPECT_EQ(plan.rows_per_cta, e.rpc);
    EXPECT_EQ(plan.block_threads, e.tpr * e.rpc);
    EXPECT_EQ(plan.grid, e.grid);
  }
}

// The cluster takes Hopper and later only, and stages every stream: 64 KiB a CTA for two.
TEST(ReducePlan, ClusterPlans) {
  const ReduceProblem ce =
      make_problem(ReduceOp::kCrossEntropy, DType::kBFloat16, 128256, 5, kLayouts[0]);
  const ReducePlan hopper_plan = make_reduce_plan(ce, hopper());
  EXPECT_EQ(hopper_plan.cluster_ctas, 8);  // 16032 chunks: 7 slices of 2048 and one of 1696
  EXPECT_EQ(hopper_plan.smem_bytes, 32768);
  EXPECT_EQ(kReduceKernels[reduce_kernel_entry(hopper_plan)].cta_threads, 256);
  // The loss alone (no gradient row written) loops.
  const ReduceProblem loss_only =
      make_problem(ReduceOp::kCrossEntropy, DType::kBFloat16, 128256, 5, kLayouts[0], false);
  EXPECT_EQ(make_reduce_plan(loss_only, hopper()).variant, ReduceVariant::kLooped);
  DeviceInfo ampere = hopper();
  ampere.cc_major = 8;
  const ReducePlan ampere_plan = make_reduce_plan(ce, ampere);
  EXPECT_EQ(ampere_plan.variant, ReduceVariant::kLooped);
  EXPECT_EQ(ampere_plan.cluster_ctas, 0);
  const ReduceProblem two =
      make_problem(ReduceOp::kSoftmaxBackward, DType::kFloat32, 131072, 3, kLayouts[0]);
  const ReducePlan two_plan = make_reduce_plan(two, hopper());
  EXPECT_EQ(two_plan.block_threads, 512);
  EXPECT_EQ(two_plan.cluster_ctas, 8);
  EXPECT_EQ(two_plan.smem_bytes, 131072);  // two streams of 4096 chunks
  // A device whose CTAs cannot hold the staged slices loops.
  DeviceInfo small = hopper();
  small.max_smem_per_block = 48 * 1024;
  EXPECT_EQ(make_reduce_plan(two, small).variant, ReduceVariant::kLooped);
  EXPECT_EQ(make_reduce_plan(ce, small).variant, ReduceVariant::kCluster);
}

TEST(ReducePlan, CpuPlans) {
  for (const DType t : kCpuDtypes) {
    const ReduceProblem p = make_problem(ReduceOp::kCrossEntropy, t, 1000, 7, kLayouts[0]);
    const ReducePlan plan = make_reduce_plan(p, DeviceInfo{});
    EXPECT_EQ(plan.variant, ReduceVariant::kCpu);
    EXPECT_EQ(plan.chunk_elems, 16 / dtype_size(t));
    EXPECT_EQ(plan.grid, 7);
    EXPECT_EQ(reduce_plan_violation(plan, p), "");
  }
}

TEST(ReducePlan, RefusesWhatNoKernelTakes) {
  // float64 rows on CUDA, and cross-entropy over more than one row dimension: the binding
  // rejects both before planning; the planner throws rather than return a violating plan.
  const ReduceProblem f64 = make_problem(ReduceOp::kSoftmax, DType::kFloat64, 512, 4, kLayouts[0]);
  EXPECT_THROW(make_reduce_plan(f64, hopper()), std::logic_error);
  EXPECT_NO_THROW(make_reduce_plan(f64, DeviceInfo{}));
  ReduceProblem dims =
      make_problem(ReduceOp::kSoftmax, DType::kBFloat16, 512, 8, kLayouts[8]);  // dims2
  EXPECT_NO_THROW(make_reduce_plan(dims, hopper()));
  dims.op = ReduceOp::kCrossEntropy;
  EXPECT_THROW(make_reduce_plan(dims, hopper()), std::logic_error);
  EXPECT_THROW(make_reduce_plan(dims, DeviceInfo{}), std::logic_error);
}

TEST(ReducePlan, VariantNames) {
  EXPECT_STREQ(reduce_variant_name(ReduceVariant::kCpu), "cpu");
  EXPECT_STREQ(reduce_variant_name(ReduceVariant::kRegisters), "registers");
  EXPECT_STREQ(reduce_variant_name(ReduceVariant::kCluster), "cluster");
  EXPECT_STREQ(reduce_variant_name(ReduceVariant::kLooped), "looped");
}

TEST(ReducePlan, DescribeIsOneLine) {
  const ReduceProblem p =
      make_problem(ReduceOp::kSoftmax, DType::kBFloat16, 4096, 4096, kLayouts[0]);
  EXPECT_EQ(describe(make_reduce_plan(p, hopper()), p),
            "softmax registers vector chunks=4 threads/row=128 rows/cta=2 grid=2048");
  EXPECT_EQ(describe(make_reduce_plan(p, DeviceInfo{}), p), "softmax cpu");
  const ReduceProblem u =
      make_problem(ReduceOp::kCrossEntropy, DType::kFloat32, 131073, 3, kLayouts[0]);
  EXPECT_EQ(describe(make_reduce_plan(u, hopper()), u),
            "cross_entropy looped elementwise chunks=0 threads/row=512 rows/cta=1 grid=3");
  const ReduceProblem v =
      make_problem(ReduceOp::kCrossEntropy, DType::kBFloat16, 50257, 3, kLayouts[0]);
  EXPECT_EQ(describe(make_reduce_plan(v, hopper()), v),
            "cross_entropy cluster elementwise chunks=0 threads/row=256 rows/cta=1 cluster=4 "
            "smem=32768 grid=12");
  const ReduceProblem b =
      make_problem(ReduceOp::kSoftmaxBackward, DType::kFloat16, 100, 7, kLayouts[1]);
  EXPECT_EQ(describe(make_reduce_plan(b, hopper()), b),
            "softmax_backward registers elementwise chunks=2 threads/row=8 rows/cta=32 grid=1");
  for_each_case([](const Case& c) -> std::string {
    const std::string s = describe(c.plan, c.problem);
    if (s.find('\n') != std::string::npos) return "describe spans lines";
    if (s.rfind(traits_of(c.problem.op).name, 0) != 0) return "describe does not open with the op";
    return "";
  });
}

// --- reduce_plan_violation: each check fires on a plan broken in its one way -------------------

// A good plan for `p` on Hopper, broken by `mutate`; the violation must name `expected`.
void expect_violation(const ReduceProblem& p, const std::function<void(ReducePlan&)>& mutate,
                      const std::string& expected, bool cuda = true) {
  ReducePlan plan = make_reduce_plan(p, cuda ? hopper() : DeviceInfo{});
  ASSERT_EQ(reduce_plan_violation(plan, p), "");
  mutate(plan);
  const std::string why = reduce_plan_violation(plan, p);
  EXPECT_NE(why.find(expected), std::string::npos)
      << "expected \"" << expected << "\", got \"" << why << "\" for " << describe(plan, p);
}

// A row longer than any cluster (65536 chunks): the looped schedule.
constexpr int64_t kLoopedN = 524288;

ReduceProblem bf16_softmax(int64_t n, int64_t m = 4096, const Layout& l = kLayouts[0]) {
  return make_problem(ReduceOp::kSoftmax, DType::kBFloat16, n, m, l);
}

TEST(ReducePlanViolation, NoKernelEntry) {
  expect_violation(
      bf16_softmax(4096), [](ReducePlan& b) { b.chunks_per_thread = 3; }, "no instantiated kernel");
  expect_violation(
      bf16_softmax(kLoopedN), [](ReducePlan& b) { b.chunks_per_thread = 1; },
      "no instantiated kernel");  // a looped plan holds no chunks
  expect_violation(
      bf16_softmax(65536), [](ReducePlan& b) { b.chunks_per_thread = 8; },
      "no instantiated kernel");  // nor does a cluster plan: its chunks are in shared memory
}

TEST(ReducePlanViolation, RowDimsOutOfRange) {
  // A problem whose leading dimensions are none, or more than the kernels walk.
  ReduceProblem p = bf16_softmax(4096);
  const ReducePlan plan = make_reduce_plan(p, hopper());
  for (const int count : {0, kMaxRowDims + 1}) {
    p.row_dims.count = count;
    EXPECT_NE(reduce_plan_violation(plan, p).find("row_dims.count"), std::string::npos) << count;
  }
}

TEST(ReducePlanViolation, ChunksAboveTheOpsMax) {
  // softmax_backward keeps two streams: at most 2 chunks of each a thread.
  const ReduceProblem p =
      make_problem(ReduceOp::kSoftmaxBackward, DType::kBFloat16, 8192, 64, kLayouts[0]);
  expect_violation(
      p, [](ReducePlan& b) { b.chunks_per_thread = 4; }, "max_chunks");
}

TEST(ReducePlanViolation, ChunkElems) {
  expect_violation(
      bf16_softmax(4096), [](ReducePlan& b) { b.chunk_elems = 4; }, "chunk_elems");
  expect_violation(
      bf16_softmax(4096), [](ReducePlan& b) { b.chunk_elems = 8 * 2; }, "chunk_elems",
      /*cuda=*/false);
}

TEST(ReducePlanViolation, ThreadsPerRowPowerOfTwo) {
  expect_violation(
      bf16_softmax(4096),
      [](ReducePlan& b) {
        b.threads_per_row = 384;
        b.block_threads = 384;
      },
      "power of two");
  expect_violation(
      bf16_softmax(4096),
      [](ReducePlan& b) {
        b.threads_per_row = 2048;
        b.block_threads = 2048;
      },
      "power of two");
}

TEST(ReducePlanViolation, BlockThreads) {
  expect_violation(
      bf16_softmax(100), [](ReducePlan& b) { b.block_threads += 1; }, "block_threads");
  expect_violation(
      bf16_softmax(100),
      [](ReducePlan& b) {
        b.rows_per_cta = 128;  // 16 threads a row: 2048 threads
        b.block_threads = 2048;
        b.grid = 4096 / 128;
      },
      "block_threads");
}

TEST(ReducePlanViolation, RegistersCoverTheRow) {
  expect_violation(
      bf16_softmax(4096),
      [](ReducePlan& b) {  // 4 chunks on 64 threads: half of the row's 512
        b.threads_per_row = 64;
        b.rows_per_cta = 4;
        b.block_threads = 256;
        b.grid = 1024;
      },
      "registers do not hold the row");
  // A looped row's length has no limit; a registers plan for it has.
  expect_violation(
      bf16_softmax(kLoopedN),
      [](ReducePlan& b) {
        b.variant = ReduceVariant::kRegisters;
        b.chunks_per_thread = 4;
        b.threads_per_row = 1024;
        b.block_threads = 1024;
      },
      "registers do not hold the row");
}

TEST(ReducePlanViolation, VectorIoPreconditions) {
  // N not whole chunks; an unaligned base of each stream; a stride not whole chunks.
  expect_violation(
      bf16_softmax(4095), [](ReducePlan& b) { b.vector_io = true; }, "vector_io");
  const ReducePlan aligned = make_reduce_plan(bf16_softmax(4096), hopper());
  ASSERT_TRUE(aligned.vector_io);
  for (const Layout& l : {kLayouts[1], kLayouts[3], kLayouts[4], kLayouts[5]}) {
    const ReduceProblem p = bf16_softmax(4096, 4096, l);
    EXPECT_NE(reduce_plan_violation(aligned, p).find("vector_io"), std::string::npos) << l.name;
  }
  // in2 counts for the backward only; out not for a cross-entropy forward without the gradient.
  ReduceProblem two =
      make_problem(ReduceOp::kSoftmaxBackward, DType::kBFloat16, 4096, 8, kLayouts[2]);
  EXPECT_FALSE(make_reduce_plan(two, hopper()).vector_io);
  const ReducePlan aligned_two = make_reduce_plan(
      make_problem(ReduceOp::kSoftmaxBackward, DType::kBFloat16, 4096, 8, kLayouts[0]), hopper());
  ASSERT_TRUE(aligned_two.vector_io);
  EXPECT_NE(reduce_plan_violation(aligned_two, two).find("vector_io"), std::string::npos);
  two.op = ReduceOp::kSoftmax;
  EXPECT_TRUE(make_reduce_plan(two, hopper()).vector_io);
  ReduceProblem loss_only =
      make_problem(ReduceOp::kCrossEntropy, DType::kBFloat16, 4096, 8, kLayouts[3], false);
  EXPECT_TRUE(make_reduce_plan(loss_only, hopper()).vector_io);
  loss_only.writes_rows = true;
  EXPECT_FALSE(make_reduce_plan(loss_only, hopper()).vector_io);
}

TEST(ReducePlanViolation, Grid) {
  expect_violation(
      bf16_softmax(100), [](ReducePlan& b) { b.grid += 1; }, "grid must be");
  expect_violation(
      bf16_softmax(65536), [](ReducePlan& b) { b.grid -= 1; }, "grid must be");  // a cluster
  expect_violation(
      bf16_softmax(kLoopedN), [](ReducePlan& b) { b.grid -= 1; }, "grid must be");
  expect_violation(
      bf16_softmax(100, 0), [](ReducePlan& b) { b.grid = 1; }, "grid must be");
  expect_violation(
      bf16_softmax(100), [](ReducePlan& b) { b.grid = 16; }, "one task per row",
      /*cuda=*/false);
  // More CTAs than CUDA launches: M = 2^32 looped rows, built by hand (the planner throws).
  const ReduceProblem huge = bf16_softmax(kLoopedN, int64_t{1} << 32);
  EXPECT_THROW(make_reduce_plan(huge, hopper()), std::logic_error);
  ReducePlan plan = make_reduce_plan(bf16_softmax(kLoopedN), hopper());
  plan.grid = huge.rows;
  EXPECT_NE(reduce_plan_violation(plan, huge).find("INT32_MAX"), std::string::npos);
}

TEST(ReducePlanViolation, Float64OnCuda) {
  const ReduceProblem p = bf16_softmax(4096);
  const ReducePlan plan = make_reduce_plan(p, hopper());
  ReduceProblem f64 = p;
  f64.dtype = DType::kFloat64;
  EXPECT_NE(reduce_plan_violation(plan, f64).find("float64"), std::string::npos);
}

TEST(ReducePlanViolation, CrossEntropyRowDims) {
  const ReduceProblem p =
      make_problem(ReduceOp::kCrossEntropy, DType::kBFloat16, 4096, 8, kLayouts[0]);
  const ReducePlan plan = make_reduce_plan(p, hopper());
  const ReduceProblem dims =
      make_problem(ReduceOp::kCrossEntropyBackward, DType::kBFloat16, 4096, 8, kLayouts[8]);
  EXPECT_NE(reduce_plan_violation(plan, dims).find("row_dims.count must be 1"), std::string::npos);
}

TEST(ReducePlanViolation, LoopedBlock) {
  expect_violation(
      bf16_softmax(kLoopedN),
      [](ReducePlan& b) {
        b.threads_per_row = 256;
        b.block_threads = 256;
      },
      "kReduceLoopedThreads");
  expect_violation(
      bf16_softmax(kLoopedN),
      [](ReducePlan& b) {
        b.threads_per_row = 256;
        b.rows_per_cta = 2;
        b.block_threads = 512;
        b.grid = 2048;
      },
      "kReduceLoopedThreads");
}

TEST(ReducePlanViolation, ClusterShape) {
  const ReduceProblem p = bf16_softmax(65536);  // 8192 chunks: 4 slices of 2048
  expect_violation(
      p, [](ReducePlan& b) { b.cluster_ctas = 3; }, "cluster_ctas must be the row's slices");
  expect_violation(
      p, [](ReducePlan& b) { b.cluster_ctas = 5; }, "cluster_ctas must be the row's slices");
  expect_violation(
      bf16_softmax(kLoopedN),
      [](ReducePlan& b) {  // 16 slices of 4096: more CTAs than a cluster has
        b.variant = ReduceVariant::kCluster;
        b.threads_per_row = b.block_threads = 512;
        b.cluster_ctas = 16;
        b.smem_bytes = 65536;
        b.grid *= 16;
      },
      "cluster_ctas must be the row's slices");
  expect_violation(
      p, [](ReducePlan& b) { b.smem_bytes = 16384; }, "smem_bytes");
  expect_violation(
      p,
      [](ReducePlan& b) {  // CTAs of 512 threads hold the row in 2 slices, not 4
        b.threads_per_row = b.block_threads = 512;
        b.smem_bytes = 65536;
      },
      "cluster_ctas must be the row's slices");
  expect_violation(
      p, [](ReducePlan& b) { b.threads_per_row = b.block_threads = 384; },
      "no instantiated kernel");
  expect_violation(
      p,
      [](ReducePlan& b) {  // two rows of 128 threads: the kernel's CTA is one slice of one row
        b.threads_per_row = 128;
        b.rows_per_cta = 2;
      },
      "one slice of one row");
  expect_violation(
      bf16_softmax(4096), [](ReducePlan& b) { b.smem_bytes = 32768; }, "only a cluster plan");
  expect_violation(
      bf16_softmax(kLoopedN), [](ReducePlan& b) { b.cluster_ctas = 2; }, "only a cluster plan");
  // An op without a reduction, or a call that writes no row, has no cluster kernel.
  const ReducePlan plan = [&] {
    ReducePlan q = make_reduce_plan(p, hopper());
    q.grid = 8 * 4;
    return q;
  }();
  const ReduceProblem backward =
      make_problem(ReduceOp::kCrossEntropyBackward, DType::kBFloat16, 65536, 8, kLayouts[0]);
  EXPECT_NE(reduce_plan_violation(plan, backward).find("a reducing op that writes"),
            std::string::npos);
  const ReduceProblem loss_only =
      make_problem(ReduceOp::kCrossEntropy, DType::kBFloat16, 65536, 8, kLayouts[0], false);
  EXPECT_NE(reduce_plan_violation(plan, loss_only).find("a reducing op that writes"),
            std::string::npos);
}

TEST(ReducePlanViolation, CpuPlanHasNoSchedule) {
  expect_violation(
      bf16_softmax(4096), [](ReducePlan& b) { b.vector_io = true; }, "cpu plan",
      /*cuda=*/false);
  expect_violation(
      bf16_softmax(4096), [](ReducePlan& b) { b.threads_per_row = 256; }, "cpu plan",
      /*cuda=*/false);
}

}  // namespace
}  // namespace oink
