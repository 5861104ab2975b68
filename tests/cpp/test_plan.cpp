// make_plan over the whole shape grid of docs/contract.md, 'How correctness is measured' (and
// beyond: N = 262144, M = 2^20), for a Hopper DeviceInfo and the CPU one: every plan keeps its
// invariants and batch invariance, chooses vector I/O exactly when alignment allows, and prints as
// key=value pairs. plan_violation must catch hand-broken plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/plan.h"

namespace oink {
namespace {

enum class Weight { kNone, kSame, kFloat32 };

// Base-pointer alignments (bytes) and row-stride padding (ld = N + pad) of one call.
struct Layout {
  const char* name;
  int x_align, other_align;  // other: out, residual and weight
  int64_t x_pad, other_pad;  // other: out and residual
};
constexpr Layout kLayouts[] = {
    {"aligned", 256, 256, 0, 0},     {"x_base_unaligned", 2, 256, 0, 0},
    {"others_align8", 256, 8, 0, 0}, {"ld_pad64", 256, 256, 64, 64},
    {"ld_pad1", 256, 256, 1, 1},     {"residual_or_out_ld_pad1", 256, 256, 0, 1},
};
constexpr int64_t kCols[] = {1,    7,    64,   111,  128,   500,   1024,  1536,  3072,   4096,
                             5120, 6144, 7168, 8192, 12288, 16384, 32768, 65536, 131072, 262144};
constexpr int64_t kRows[] = {0, 1, 2, 3, 17, 255, 256, 4097, int64_t{1} << 20};

// An H100/H200: sm_90, 132 SMs, 2048 threads and 32 CTAs per SM, 227 KiB of opt-in shared
// memory per block, 228 KiB per SM, 1 KiB reserved per CTA.
DeviceInfo hopper() {
  DeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.max_threads_per_sm = 2048;
  d.max_blocks_per_sm = 32;
  d.max_smem_per_block = 232448;
  d.max_smem_per_sm = 233472;
  d.reserved_smem_per_block = 1024;
  return d;
}

DeviceInfo ampere() {
  DeviceInfo d = hopper();
  d.cc_major = 8;
  d.sm_count = 108;
  d.max_smem_per_block = 166912;
  d.max_smem_per_sm = 167936;
  return d;
}

NormProblem problem(DType x, Weight w, NormOp op, int64_t n, int64_t m, const Layout& l) {
  NormProblem p;
  p.op = op;
  p.x_dtype = x;
  p.has_weight = w != Weight::kNone;
  p.w_dtype = w == Weight::kFloat32 ? DType::kFloat32 : x;
  p.rows = m;
  p.cols = n;
  set_row_stride(p, n + l.other_pad);
  p.x_strides.s[0] = n + l.x_pad;
  p.x_align = l.x_align;
  p.out_align = p.residual_align = p.w_align = l.other_align;
  return p;
}

struct Case {
  DeviceInfo device;
  const Layout* layout;
  NormProblem problem;
  NormPlan plan;
  int group;          // same for cases that differ only in M
  std::string error;  // what make_plan threw, if it did
};

// Every point of the grid, built once; M varies fastest.
const std::vector<Case>& grid() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> all;
    int group = 0;
    for (const DeviceInfo& d : {hopper(), DeviceInfo{}}) {
      for (DType x : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
        for (Weight w : {Weight::kNone, Weight::kSame, Weight::kFloat32}) {
          for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
            for (int64_t n : kCols) {
              for (const Layout& l : kLayouts) {
                ++group;
                for (int64_t m : kRows) {
                  Case c{d, &l, problem(x, w, op, n, m, l), {}, group, ""};
                  try {
                    c.plan = make_plan(c.problem, d);
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

// Runs `check` on every grid case make_plan succeeded on; reports the first few failures only, so
// that one broken invariant does not print 10^5 lines.
void for_each_case(const std::function<const char*(const Case&)>& check) {
  int failures = 0;
  for (const Case& c : grid()) {
    if (!c.error.empty()) continue;  // reported by MakePlan.NeverThrowsOnTheGrid
    const char* broken = check(c);
    if (broken != nullptr && ++failures <= 10) {
      ADD_FAILURE() << broken << "\n  " << describe(c.plan, c.problem, c.device)
                    << " layout=" << c.layout->name;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(MakePlan, NeverThrowsOnTheGrid) {
  ASSERT_EQ(grid().size(),
            2u * 3 * 3 * 2 * std::size(kCols) * std::size(kLayouts) * std::size(kRows));
  for (const Case& c : grid()) ASSERT_EQ(c.error, "") << c.layout->name;
}

// The invariants a launch relies on, checked from the plan's fields and the problem alone (not
// through plan_violation, which make_plan has already run: a check missing there shows here).
const char* broken_invariant(const NormPlan& plan, const NormProblem& p, const DeviceInfo& d) {
  if (plan.chunk_elems * dtype_size(p.x_dtype) != 16) return "chunk is not 16 bytes";
  if (plan.chunks_per_row != ceil_div(p.cols, plan.chunk_elems)) return "chunks_per_row";
  if (!d.is_cuda()) return plan.grid == p.rows ? nullptr : "cpu: one task per row";
  if (plan.threads_per_row != threads_per_row_for(p.cols, p.x_dtype) ||
      plan.slices != slices_for(p.cols, p.x_dtype)) {
    return "reduction layout is not (N, dtype)'s";
  }
  const int64_t slice_chunks = std::min<int64_t>(plan.chunks_per_row, kSliceChunks);
  switch (plan.variant) {
    case KernelVariant::kRowInRegisters:
    case KernelVariant::kStreamed:
      if (int64_t{plan.chunks_per_thread} * plan.threads_per_row < plan.chunks_per_row) {
        return "a lane's chunks do not cover the row";
      }
      break;
    case KernelVariant::kTile:
    case KernelVariant::kCluster:
      if (slice_chunks > int64_t{kTileMaxChunksPerLane} * plan.threads_per_row ||
          plan.chunks_per_thread != kTileSlotsPerThread) {
        return "a tile thread's slots do not cover its lanes' chunks";
      }
      break;
    case KernelVariant::kTwoPass:
      if (plan.chunks_per_thread != 0) return "two_pass keeps no chunks";
      break;
    case KernelVariant::kCpu:
      return "a CUDA device got a CPU plan";
  }
  if (plan.slices > 1 && plan.variant != KernelVariant::kCluster &&
      plan.variant != KernelVariant::kTwoPass) {
    return "a sliced row runs the cluster or two_pass kernel";
  }
  const bool cluster = plan.variant == KernelVariant::kCluster;
  const int per_cta = cluster ? static_cast<int>(ceil_div(plan.slices, plan.cluster_ctas)) : 0;
  const int groups = cluster ? per_cta : plan.rows_per_cta;
  if (plan.block_threads != plan.threads_per_row / plan.lanes_per_thread * groups ||
      plan.block_threads > 1024 || (plan.block_threads % 32 != 0 && groups != 1)) {
    return "block_threads is not whole warps of the row groups' lanes";
  }
  const int64_t row_groups = ceil_div(p.rows, plan.rows_per_cta);
  if (cluster                                    ? plan.grid != p.rows * plan.cluster_ctas
      : plan.variant == KernelVariant::kStreamed ? plan.grid > row_groups
                                                 : plan.grid != row_groups) {
    return "the grid does not give every row group one CTA (a cluster per row, or persistent)";
  }
  if (cluster && (d.cc_major < 9 || plan.cluster_ctas > kMaxClusterCtas)) return "cluster dims";
  if ((plan.stages != 0) != (plan.variant == KernelVariant::kStreamed) ||
      (plan.stages != 0 && (plan.stages < kMinStages || plan.stages > kMaxStages))) {
    return "stages";
  }
  if (plan.vector_io && (p.cols % plan.chunk_elems != 0 || p.x_align < 16)) {
    return "vector I/O on rows that are not whole aligned chunks";
  }
  if (plan.use_pdl && d.cc_major < 9) return "PDL below sm_90";
  return nullptr;
}

TEST(MakePlan, PlansKeepTheirInvariants) {
  for_each_case([](const Case& c) { return broken_invariant(c.plan, c.problem, c.device); });
  // The checks above can fail: each of these plans breaks one of them.
  const NormProblem p =
      problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 4096, 17, kLayouts[0]);
  const NormPlan good = make_plan(p, hopper());
  ASSERT_EQ(broken_invariant(good, p, hopper()), nullptr);
  for (const auto& mutate : std::vector<std::function<void(NormPlan&)>>{
           [](NormPlan& b) { b.chunk_elems = 4; },
           [](NormPlan& b) { b.chunks_per_row += 1; },
           [](NormPlan& b) { b.threads_per_row /= 2; },
           [](NormPlan& b) { b.chunks_per_thread = 1; },
           [](NormPlan& b) { b.block_threads += 1; },
           [](NormPlan& b) { b.grid -= 1; },
           [](NormPlan& b) { b.stages = 2; },
           [](NormPlan& b) { b.variant = KernelVariant::kCpu; },
       }) {
    NormPlan broken = good;
    mutate(broken);
    EXPECT_NE(broken_invariant(broken, p, hopper()), nullptr) << describe(broken, p, hopper());
  }
}

TEST(MakePlan, ThreadsPerRowDependsOnlyOnNAndDtype) {
  std::map<std::tuple<bool, DType, int64_t>, int> seen;
  for_each_case([&](const Case& c) -> const char* {
    const auto key = std::make_tuple(c.device.is_cuda(), c.problem.x_dtype, c.problem.cols);
    const auto it = seen.emplace(key, c.plan.threads_per_row).first;
    return it->second == c.plan.threads_per_row ? nullptr : "threads_per_row changed with M/layout";
  });
}

TEST(MakePlan, GridCoversEveryRowAndRowsPerCtaIgnoresM) {
  // rows_per_cta follows the schedule (a tile thread plays 4 lanes, so its rows take fewer
  // threads), never M itself.
  std::map<std::pair<int, KernelVariant>, int> rows_per_cta;
  for_each_case([&](const Case& c) -> const char* {
    const int64_t m = c.problem.rows, rpc = c.plan.rows_per_cta;
    if (rpc < 1) return "rows_per_cta < 1";
    const int64_t groups = (m + rpc - 1) / rpc;
    if (c.plan.variant == KernelVariant::kStreamed) {
      // Persistent CTAs loop over row groups: at least one, never more CTAs than groups.
      if (c.plan.grid < 1 || c.plan.grid > groups) return "streamed grid outside [1, groups]";
    } else if (c.plan.variant == KernelVariant::kCluster) {
      // One cluster per row, one CTA per slice; two past 16 slices, and only there or in the
      // fused op's batches of 16 slices per SM or more, or in its clusters of at most two
      // paired CTAs.
      const int per_cta = c.plan.block_threads / 256;
      if (c.plan.block_threads % 256 != 0 || per_cta < 1 || per_cta > 2) {
        return "cluster block_threads";
      }
      const bool paired_batch =
          c.problem.op == NormOp::kFusedAddRmsNorm &&
          (m * c.plan.slices >= 16 * int64_t{c.device.sm_count} || c.plan.cluster_ctas <= 2);
      if ((c.plan.slices > 16 && per_cta != 2) ||
          (per_cta == 2 && c.plan.slices <= 16 && !paired_batch)) {
        return "cluster slices per CTA";
      }
      if (c.plan.cluster_ctas != (c.plan.slices + per_cta - 1) / per_cta) return "cluster CTAs";
      if (c.plan.grid != m * c.plan.cluster_ctas) return "cluster grid is not one cluster per row";
    } else if (c.plan.grid != groups) {
      return "grid is not one CTA per row group";
    }
    const auto it =
        rows_per_cta.emplace(std::make_pair(c.group, c.plan.variant), c.plan.rows_per_cta).first;
    return it->second == c.plan.rows_per_cta ? nullptr : "rows_per_cta changed with M";
  });
}

TEST(MakePlan, SharedMemorySchedulesOnlyForAlignedBatchesOfSeveralRowGroupsPerSm) {
  for_each_case([](const Case& c) -> const char* {
    if (!c.device.is_cuda()) return nullptr;
    const NormPlan& plan = c.plan;
    const bool streamed = plan.variant == KernelVariant::kStreamed;
    const bool tile = plan.variant == KernelVariant::kTile;
    const int64_t groups = (c.problem.rows + plan.rows_per_cta - 1) / plan.rows_per_cta;
    const int64_t chunks = plan.chunks_per_row;
    const bool rmsnorm = c.problem.op == NormOp::kRmsNorm;
    const bool wide_weight =
        c.problem.has_weight && dtype_size(c.problem.w_dtype) > dtype_size(c.problem.x_dtype);
    if (streamed) {
      if (!rmsnorm) return "the fused op streamed";
      if (!wide_weight) return "streamed with a weight no wider than x";
      if (plan.threads_per_row < 64) return "streamed rows of fewer than 64 lanes";
      if (!plan.vector_io) return "streamed without vector I/O";
      if (plan.threads_per_row >= 128) return "streamed rows the tile takes";
      if (plan.chunks_per_thread != 2) return "streamed past the one instantiation (2 chunks)";
      // Persistent and fully resident: a whole number of CTAs per SM, each with >1 group.
      if (plan.grid % c.device.sm_count != 0) return "streamed grid not whole CTAs per SM";
      if (groups < 3 * plan.grid) return "streamed with fewer than 3 row groups per CTA";
      if (plan.grid / c.device.sm_count * plan.block_threads > kStreamedThreadsPerSm) {
        return "more streamed threads per SM than the kernel's registers allow";
      }
      const int64_t per_sm =
          plan.smem_bytes + kStreamedStaticSmemBytes + c.device.reserved_smem_per_block;
      if (plan.grid / c.device.sm_count * per_sm > c.device.max_smem_per_sm) {
        return "streamed CTAs do not fit in shared memory together";
      }
      if (plan.smem_bytes + kStreamedStaticSmemBytes > c.device.max_smem_per_block) {
        return "smem over the limit";
      }
    }
    if (tile) {
      if (!plan.vector_io) return "tile without vector I/O";
      // Rows of 1024 lanes (both ops): from more rows than SMs (the registers kernel's CTAs are
      // 512 threads, one or two an SM); every other row: from 3 groups per SM.
      const bool wide = plan.threads_per_row == kMaxThreadsPerRow;
      if (wide ? groups <= c.device.sm_count : groups < kTileMinGroupsPerSm * c.device.sm_count) {
        return "tile below its groups per SM";
      }
      if (plan.threads_per_row < 128 || chunks > 2 * plan.threads_per_row) {
        return "tile on a row it cannot fold";
      }
      const int threads = plan.threads_per_row / 4;  // 4 lanes per thread, whole warps
      if (plan.block_threads != std::max(threads, 128)) return "tile CTA not max(row, 128)";
      if (!rmsnorm && plan.threads_per_row != 1024 && 2 * chunks > 3 * plan.threads_per_row) {
        return "fused tile where its registers CTAs are not weak";
      }
    }
    // 2^20 rows: far past the resident CTAs. Every aligned row the tile folds takes it
    // (rmsnorm, any weight); 16-bit rows of 64 to 127 lanes with a float32 weight stream; other
    // short rows keep the registers schedule.
    const bool many = rmsnorm && plan.vector_io && c.problem.rows == (int64_t{1} << 20);
    const bool foldable = chunks > 128 && chunks <= 2048;
    if (many && foldable && !tile) return "not tile where it fits";
    const bool streams = wide_weight && chunks > 64 && chunks <= 128;
    if (many && streams != streamed) return streamed ? "streamed a short row" : "not streamed";
    if (many && chunks <= 128 && !streams && plan.variant != KernelVariant::kRowInRegisters) {
      return "a short row off the registers schedule";
    }
    return nullptr;
  });
}

TEST(MakePlan, RegistersUntilThreeTileRowGroupsPerSmOrOneFor1024Lanes) {
  // bf16 N=4096: 256 lanes, tile rows of 64 threads, 2 per CTA; N=7168: 512 lanes, one row of
  // 128 threads per CTA. The tile from 3 groups per SM (396 on 132 SMs).
  auto plan = [](int64_t n, int64_t m) {
    return make_plan(problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, n, m, kLayouts[0]),
                     hopper());
  };
  EXPECT_EQ(plan(4096, 790).variant, KernelVariant::kRowInRegisters);
  EXPECT_EQ(plan(4096, 791).variant, KernelVariant::kTile);
  EXPECT_EQ(plan(4096, 791).grid, 396);
  EXPECT_EQ(plan(4096, 791).block_threads, 128);
  EXPECT_EQ(plan(7168, 395).variant, KernelVariant::kRowInRegisters);
  EXPECT_EQ(plan(7168, 396).variant, KernelVariant::kTile);
  EXPECT_EQ(plan(7168, 396).rows_per_cta, 1);
  // bf16 N=16384: 1024 lanes, whose registers CTAs are 512 threads of two lanes: the tile from
  // more rows than SMs (133 on 132), for both ops.
  EXPECT_EQ(plan(16384, 132).variant, KernelVariant::kRowInRegisters);
  EXPECT_EQ(plan(16384, 133).variant, KernelVariant::kTile);
  EXPECT_EQ(plan(16384, 133).block_threads, 256);
  auto fused = [](int64_t n, int64_t m) {
    return make_plan(
        problem(DType::kBFloat16, Weight::kSame, NormOp::kFusedAddRmsNorm, n, m, kLayouts[0]),
        hopper());
  };
  EXPECT_EQ(fused(16384, 132).variant, KernelVariant::kRowInRegisters);
  EXPECT_EQ(fused(16384, 133).variant, KernelVariant::kTile);
  // Shorter fused rows: the tile only from 3 groups per SM, where most lanes hold two chunks
  // (N=8192, 512 lanes of two chunks each: the registers kernel at every batch).
  EXPECT_EQ(fused(8192, 396).variant, KernelVariant::kRowInRegisters);
  EXPECT_EQ(fused(8192, 1 << 16).variant, KernelVariant::kRowInRegisters);
}

TEST(MakePlan, RegistersUntilEachStreamedCtaGetsThreeRowGroups) {
  // bf16 N=1024 with a float32 weight (64 lanes): 128-thread CTAs of 2 rows; the streamed shape
  // is 6 CTAs per SM (792 on 132 SMs) of 2 stages: 3 MiB in flight beside the rows being read.
  auto plan = [](int64_t m) {
    return make_plan(
        problem(DType::kBFloat16, Weight::kFloat32, NormOp::kRmsNorm, 1024, m, kLayouts[0]),
        hopper());
  };
  EXPECT_EQ(plan(4750).variant, KernelVariant::kRowInRegisters);
  EXPECT_EQ(plan(4751).variant, KernelVariant::kStreamed);
  EXPECT_EQ(plan(4751).grid, 6 * hopper().sm_count);
  EXPECT_EQ(plan(4751).stages, 2);
}

TEST(MakePlan, OnlyAFloat32WeightOn16BitRowsOf64To127LanesStreams) {
  // The registers schedule beat every streamed shape for short rows with a weight no wider than
  // x, none, float32 rows, and a float32 weight on rows of fewer than 64 lanes (H200,
  // a schedule sweep); the tile takes rows of 128 lanes or more
  // with any weight (a float32 one held in registers: tile_w32.txt).
  for (int64_t n : {64, 128, 256, 512, 1024, 2048, 8192}) {
    for (Weight w : {Weight::kNone, Weight::kSame, Weight::kFloat32}) {
      for (DType x : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
        const NormProblem p = problem(x, w, NormOp::kRmsNorm, n, int64_t{1} << 20, kLayouts[0]);
        const NormPlan plan = make_plan(p, hopper());
        SCOPED_TRACE(describe(plan, p, hopper()));
        const bool streams = w == Weight::kFloat32 && x != DType::kFloat32 && n == 1024;
        // (float32 rows of 1024 elements are 128 lanes, which the tile takes.)
        const bool tile = (x == DType::kFloat32 && n >= 1024) || n >= 2048;
        EXPECT_EQ(plan.variant, streams ? KernelVariant::kStreamed
                                : tile  ? KernelVariant::kTile
                                        : KernelVariant::kRowInRegisters);
      }
    }
  }
}

NormProblem bf16(int64_t n, int64_t m, int x_align = 256) {
  Layout l{"", x_align, 256, 0, 0};
  return problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, n, m, l);
}

// bf16 rows with a float32 weight: the streamed schedule's.
NormProblem w32(int64_t n, int64_t m, int x_align = 256, NormOp op = NormOp::kRmsNorm) {
  Layout l{"", x_align, 256, 0, 0};
  return problem(DType::kBFloat16, Weight::kFloat32, op, n, m, l);
}

NormProblem fused_bf16(int64_t n, int64_t m) {
  return problem(DType::kBFloat16, Weight::kSame, NormOp::kFusedAddRmsNorm, n, m, kLayouts[0]);
}

// M rows as a [M / 4, 4, N] view whose outer stride skips a gap (two leading dimensions).
NormProblem head_view_of(NormProblem p) {
  p.row_dims.count = 2;
  p.row_dims.size[0] = 4;
  p.row_dims.size[1] = (p.rows + 3) / 4;
  p.x_strides = p.out_strides = RowStrides{{p.cols, 5 * p.cols}};
  return p;
}

NormProblem head_view_bf16(int64_t n, int64_t m) { return head_view_of(bf16(n, m)); }
NormProblem w32_head_view(int64_t n, int64_t m) { return head_view_of(w32(n, m)); }

// A schedule's CTA shape for rows of N bf16 elements: their lanes, the CTA's threads and rows.
struct Expected {
  int64_t n;
  int lanes, block, rows_per_cta;
};

TEST(MakePlan, TileThreadsPlayFourLanesOfEightChunks) {
  // The row's lanes (batch invariance) are the registers schedule's; a tile row runs on a
  // quarter as many threads, 8 shared-memory slots each, CTAs of at least 128 threads.
  const Expected cases[] = {
      {2048, 128, 128, 4}, {4096, 256, 128, 2}, {6144, 512, 128, 1},
      {7168, 512, 128, 1}, {8192, 512, 128, 1}, {16384, 1024, 256, 1},
  };
  for (const Expected& e : cases) {
    for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
      const NormProblem p = problem(DType::kBFloat16, Weight::kSame, op, e.n, 65536, kLayouts[0]);
      const NormPlan plan = make_plan(p, hopper());
      SCOPED_TRACE(describe(plan, p, hopper()));
      const bool fused = op == NormOp::kFusedAddRmsNorm;
      // The fused op takes it only where its registers CTAs are weak (see tile_pays).
      if (fused && e.n != 6144 && e.n != 16384) {
        EXPECT_EQ(plan.variant, KernelVariant::kRowInRegisters);
        continue;
      }
      ASSERT_EQ(plan.variant, KernelVariant::kTile);
      EXPECT_EQ(plan.threads_per_row, e.lanes);
      EXPECT_EQ(plan.threads_per_row, threads_per_row_for(e.n, DType::kBFloat16));
      EXPECT_EQ(plan.lanes_per_thread, 4);
      EXPECT_EQ(plan.block_threads, e.block);
      EXPECT_EQ(plan.rows_per_cta, e.rows_per_cta);
      EXPECT_EQ(plan.chunks_per_thread, 8);
      EXPECT_EQ(plan.smem_bytes, 16 * 8 * e.block * (fused ? 2 : 1));
      EXPECT_EQ(plan.grid, (65536 + e.rows_per_cta - 1) / e.rows_per_cta);
    }
  }
  // A float32 weight on bf16 rows takes the same tile as a bf16 one, in registers (no shared
  // memory of its own), for both ops: rmsnorm at N=7168 and 16384, the fused op at 16384.
  for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
    for (int64_t n : {7168, 16384}) {
      const NormProblem w32 =
          problem(DType::kBFloat16, Weight::kFloat32, op, n, 65536, kLayouts[0]);
      const NormPlan same =
          make_plan(problem(DType::kBFloat16, Weight::kSame, op, n, 65536, kLayouts[0]), hopper());
      const NormPlan plan = make_plan(w32, hopper());
      SCOPED_TRACE(describe(plan, w32, hopper()));
      EXPECT_EQ(plan.variant, same.variant);
      if (op == NormOp::kRmsNorm || n == 16384) {
        EXPECT_EQ(plan.variant, KernelVariant::kTile);
      }
      EXPECT_EQ(plan.smem_bytes, same.smem_bytes);
      EXPECT_EQ(plan.grid, same.grid);
    }
  }
  // Rows over two leading dimensions (a view with a gap): the tile splits the row index too.
  const NormProblem view = head_view_bf16(4096, 65536);
  const NormPlan plan = make_plan(view, hopper());
  EXPECT_EQ(plan.variant, KernelVariant::kTile) << describe(plan, view, hopper());
}

NormProblem layernorm(DType x, int64_t n, int64_t m);  // below, beside LayerNorm's tests

TEST(MakePlan, RegistersThreadsPlayTwoLanesInRowsOf512LanesOrMore) {
  // The registers schedule folds 2 lanes a thread (the same lanes, chunks and tree: the same
  // bits) for vector I/O RMSNorm-family rows of at least 512 lanes, at every batch size it runs;
  // shorter rows keep one lane a thread.
  const Expected cases[] = {
      {2048, 128, 128, 1}, {4096, 256, 256, 1},   {7168, 512, 256, 1},
      {8192, 512, 256, 1}, {16384, 1024, 512, 1},
  };
  for (const Expected& e : cases) {
    const int folded = e.lanes >= 512 ? 2 : 1;
    for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
      // (At M=256, rmsnorm's 1024-lane rows take the tile: tile_pays.)
      for (int64_t m : {int64_t{1}, int64_t{64}, int64_t{e.n == 16384 ? 128 : 256}}) {
        const NormProblem p = problem(DType::kBFloat16, Weight::kSame, op, e.n, m, kLayouts[0]);
        const NormPlan plan = make_plan(p, hopper());
        SCOPED_TRACE(describe(plan, p, hopper()));
        ASSERT_EQ(plan.variant, KernelVariant::kRowInRegisters);
        EXPECT_EQ(plan.threads_per_row, e.lanes);
        EXPECT_EQ(plan.lanes_per_thread, folded);
        EXPECT_EQ(plan.block_threads, e.block);
        EXPECT_EQ(plan.rows_per_cta, e.rows_per_cta);
        EXPECT_EQ(plan.grid, m);
        // Element-wise rows keep one lane a thread, as LayerNorm's rows do.
        const NormProblem unaligned =
            problem(DType::kBFloat16, Weight::kSame, op, e.n, m, kLayouts[1]);
        const NormPlan one = make_plan(unaligned, hopper());
        ASSERT_EQ(one.variant, KernelVariant::kRowInRegisters);
        EXPECT_EQ(one.lanes_per_thread, 1);
        EXPECT_EQ(one.block_threads, e.lanes);
      }
    }
    const NormPlan layer = make_plan(layernorm(DType::kBFloat16, e.n, 1), hopper());
    EXPECT_EQ(layer.lanes_per_thread, 1);
  }
  // The fused op's large batches of registers rows fold too.
  const NormPlan fused = make_plan(fused_bf16(8192, 65536), hopper());
  ASSERT_EQ(fused.variant, KernelVariant::kRowInRegisters);
  EXPECT_EQ(fused.lanes_per_thread, 2);
  EXPECT_EQ(fused.block_threads, 256);
}

TEST(MakePlan, StreamedBytesInFlightNearTheTargetWhereAShapeAllowsIt) {
  // bf16 rows with a float32 weight, 64 lanes (the streamed rows): some resident shape keeps
  // within a factor 1.5 of the target in flight beside the row group each CTA reads (stages - 1
  // per CTA), and the planner must find it; with 2 stages where the most CTAs an SM reach it
  // so (more CTAs before more stages).
  for (int64_t n : {520, 640, 768, 1024}) {
    const NormProblem p =
        problem(DType::kBFloat16, Weight::kFloat32, NormOp::kRmsNorm, n, 65536, kLayouts[0]);
    const NormPlan plan = make_plan(p, hopper());
    SCOPED_TRACE(describe(plan, p, hopper()));
    ASSERT_EQ(plan.variant, KernelVariant::kStreamed);
    if (n >= 768) {
      EXPECT_EQ(plan.stages, 2);
    }
    const double in_flight =
        static_cast<double>(plan.grid) * (plan.stages - 1) * plan.rows_per_cta * n * 2;
    EXPECT_LT(std::fabs(std::log(in_flight / kStreamedBytesInFlight)), std::log(1.5));
  }
}

TEST(MakePlan, FusedOpNeverStreamsAndTakesTheTileOnlyWhereItsRegistersCtasAreWeak) {
  // Its registers schedule holds x, the residual and the weight (2 chunks per thread or fewer)
  // and beat every streamed shape, and the tile except at N=6144 (half the lanes hold one chunk)
  // and N=16384 (1024-thread CTAs), on the H200 (a schedule sweep, docs/kernels.md).
  for (int64_t n : {64, 4096, 6144, 7168, 8192, 16384}) {
    for (int64_t m : {int64_t{1}, int64_t{1024}, int64_t{65536}, int64_t{1} << 20}) {
      const NormProblem p =
          problem(DType::kBFloat16, Weight::kSame, NormOp::kFusedAddRmsNorm, n, m, kLayouts[0]);
      const NormPlan plan = make_plan(p, hopper());
      SCOPED_TRACE(describe(plan, p, hopper()));
      const bool weak = n == 6144 || n == 16384;
      const bool many = (m + plan.rows_per_cta - 1) / plan.rows_per_cta >= 3 * 132;
      EXPECT_EQ(plan.variant, weak && many ? KernelVariant::kTile : KernelVariant::kRowInRegisters);
      if (plan.variant == KernelVariant::kRowInRegisters) {
        EXPECT_LE(plan.chunks_per_thread, 2);
      }
      EXPECT_EQ(plan.grid, (m + plan.rows_per_cta - 1) / plan.rows_per_cta);
    }
  }
}

// The image lookups a device may answer with (cudaFuncAttributes' binaryVersion, ptxVersion).
KernelImageOf image(int sass, int ptx) {
  return [=](const NormPlan&) { return KernelImage{sass, ptx}; };
}

TEST(MakePlan, PdlFollowsOptionsAndTheKernelImage) {
  const NormProblem p =
      problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 7168, 1, kLayouts[0]);
  LaunchOptions on, off;
  off.allow_pdl = false;
  EXPECT_TRUE(make_plan(p, hopper(), on, image(90, 90)).use_pdl);  // sm_90a SASS
  EXPECT_FALSE(make_plan(p, hopper(), off, image(90, 90)).use_pdl);
  // compute_90 PTX JIT-compiled for a newer GPU keeps griddepcontrol.
  DeviceInfo blackwell = hopper();
  blackwell.cc_major = 12;
  EXPECT_TRUE(make_plan(p, blackwell, on, image(120, 90)).use_pdl);
  // compute_80 PTX (or sm_80 SASS) has the wait compiled away: PDL would race, whatever the GPU.
  EXPECT_FALSE(make_plan(p, hopper(), on, image(90, 80)).use_pdl);
  EXPECT_FALSE(make_plan(p, blackwell, on, image(120, 80)).use_pdl);
  EXPECT_FALSE(make_plan(p, ampere(), on, image(80, 80)).use_pdl);
  // Unknown image (no lookup): never PDL, even on Hopper.
  EXPECT_FALSE(make_plan(p, hopper(), on).use_pdl);
  EXPECT_FALSE(make_plan(p, DeviceInfo{}, on, image(90, 90)).use_pdl);
  // The plan records the image it was made for; explain prints it.
  const NormPlan plan = make_plan(p, blackwell, on, image(120, 90));
  EXPECT_EQ(plan.image_sass_arch, 120);
  EXPECT_EQ(plan.image_ptx_arch, 90);
  EXPECT_NE(describe(plan, p, blackwell).find("image_sass=120 image_ptx=90"), std::string::npos);
}

TEST(MakePlan, TheImageIsAskedForTheFinishedSchedule) {
  // The lookup sees the schedule whose kernel will run (its variant and chunks), once.
  const NormProblem p =
      problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 4096, 65536, kLayouts[0]);
  int calls = 0;
  KernelVariant seen = KernelVariant::kCpu;
  const NormPlan plan = make_plan(p, hopper(), {}, [&](const NormPlan& schedule) {
    ++calls;
    seen = schedule.variant;
    return KernelImage{90, 90};
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, plan.variant);
  EXPECT_EQ(plan.variant, KernelVariant::kTile);
}

TEST(KernelCtasPerSm, TheOccupancyRuleOfRegistersSharedMemoryThreadsAndBlocks) {
  const DeviceInfo d = hopper();
  // 76 registers a thread: 2432 a warp, allocated as 2560; 8 warps a CTA take 20480 of 65536.
  EXPECT_EQ(kernel_ctas_per_sm(KernelImage{90, 90, 76, 1152}, 256, 0, d), 3);
  // The same kernel with 64 KiB of dynamic shared memory: (64 + 1.125 + 1) KiB a CTA, 3 fit.
  EXPECT_EQ(kernel_ctas_per_sm(KernelImage{90, 90, 76, 1152}, 256, 65536, d), 3);
  // 64 registers, 128 KiB a CTA: one.
  EXPECT_EQ(kernel_ctas_per_sm(KernelImage{90, 90, 64, 1408}, 512, 131072, d), 1);
  // 32 registers, 128 threads: the SM's 2048 threads allow 16, its registers 16, blocks 32.
  EXPECT_EQ(kernel_ctas_per_sm(KernelImage{90, 90, 32, 0}, 128, 0, d), 16);
  // 24 registers, 32 threads: the SM's 32 CTAs.
  EXPECT_EQ(kernel_ctas_per_sm(KernelImage{90, 90, 24, 0}, 32, 0, d), 32);
  // Unknown registers (an image_of without them, or the CPU): unknown.
  EXPECT_EQ(kernel_ctas_per_sm(KernelImage{90, 90}, 256, 0, d), 0);
  EXPECT_EQ(kernel_ctas_per_sm(KernelImage{90, 90, 32, 0}, 256, 0, DeviceInfo{}), 0);
}

TEST(MakePlan, PdlTriggersEarlyUnlessTheNextGridWouldSplitAroundThisOne) {
  // Every kernel image here: 76 registers a thread (three 256-thread CTAs an SM at most).
  const KernelImageOf image = [](const NormPlan&) { return KernelImage{90, 90, 76, 1152}; };
  auto plan = [&](NormOp op, int64_t n, int64_t m, const LaunchOptions& options = {}) {
    const NormProblem p = problem(DType::kBFloat16, Weight::kSame, op, n, m, kLayouts[0]);
    const NormPlan made = make_plan(p, hopper(), options, image);
    EXPECT_EQ(plan_violation(made, p, hopper()), "");
    return made;
  };
  // The fused tile at N=16384 (256 threads, 64 KiB): three CTAs an SM, a wave of 396.
  const NormPlan half = plan(NormOp::kFusedAddRmsNorm, 16384, 198);
  ASSERT_EQ(half.variant, KernelVariant::kTile);
  EXPECT_EQ(half.ctas_per_sm, 3);
  EXPECT_TRUE(half.pdl_early_trigger);  // half a wave: the next grid fits beside it whole
  EXPECT_FALSE(plan(NormOp::kFusedAddRmsNorm, 16384, 199).pdl_early_trigger);
  EXPECT_FALSE(plan(NormOp::kFusedAddRmsNorm, 16384, 256).pdl_early_trigger);
  // Up to half an SM's CTA short of a wave (66 on 132 SMs): split; closer to full: early.
  EXPECT_FALSE(plan(NormOp::kFusedAddRmsNorm, 16384, 330).pdl_early_trigger);
  EXPECT_TRUE(plan(NormOp::kFusedAddRmsNorm, 16384, 331).pdl_early_trigger);
  EXPECT_TRUE(plan(NormOp::kFusedAddRmsNorm, 16384, 396).pdl_early_trigger);
  EXPECT_TRUE(plan(NormOp::kFusedAddRmsNorm, 16384, 4096).pdl_early_trigger);
  // The registers kernel inside the band (grid 256 of a 396 wave) triggers at exit too.
  const NormPlan registers = plan(NormOp::kFusedAddRmsNorm, 7168, 256);
  ASSERT_EQ(registers.variant, KernelVariant::kRowInRegisters);
  EXPECT_EQ(registers.ctas_per_sm, 3);
  EXPECT_FALSE(registers.pdl_early_trigger);
  // Decode: a CTA or less an SM.
  EXPECT_TRUE(plan(NormOp::kRmsNorm, 4096, 1).pdl_early_trigger);
  EXPECT_TRUE(plan(NormOp::kRmsNorm, 8192, 64).pdl_early_trigger);
  // No PDL, no trigger; explain shows both fields.
  LaunchOptions off;
  off.allow_pdl = false;
  const NormPlan no_pdl = plan(NormOp::kFusedAddRmsNorm, 16384, 16, off);
  EXPECT_FALSE(no_pdl.use_pdl);
  EXPECT_FALSE(no_pdl.pdl_early_trigger);
  const NormProblem p =
      problem(DType::kBFloat16, Weight::kSame, NormOp::kFusedAddRmsNorm, 16384, 256, kLayouts[0]);
  EXPECT_NE(describe(make_plan(p, hopper(), {}, image), p, hopper())
                .find("pdl=1 pdl_early_trigger=0 ctas_per_sm=3"),
            std::string::npos);
  // An image of unknown registers: occupancy unknown, the early trigger.
  const NormPlan unknown = make_plan(p, hopper(), {}, [](const NormPlan&) {
    return KernelImage{90, 90};
  });
  EXPECT_EQ(unknown.ctas_per_sm, 0);
  EXPECT_TRUE(unknown.pdl_early_trigger);
}

TEST(PlanViolation, TheEarlyTriggerNeedsPdlAndNeverPersists) {
  const NormProblem p =
      problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 4096, 1, kLayouts[0]);
  NormPlan plan = make_plan(p, hopper(), {}, [](const NormPlan&) { return KernelImage{90, 90}; });
  ASSERT_TRUE(plan.use_pdl && plan.pdl_early_trigger);
  plan.use_pdl = false;
  EXPECT_EQ(plan_violation(plan, p, hopper()), "an early PDL trigger needs PDL");
  const NormProblem many =
      problem(DType::kBFloat16, Weight::kFloat32, NormOp::kRmsNorm, 1024, 65536, kLayouts[0]);
  NormPlan streamed = make_plan(many, hopper(), {}, [](const NormPlan&) {
    return KernelImage{90, 90};
  });
  ASSERT_EQ(streamed.variant, KernelVariant::kStreamed);
  EXPECT_TRUE(streamed.use_pdl);
  EXPECT_FALSE(streamed.pdl_early_trigger);
  streamed.pdl_early_trigger = true;
  EXPECT_NE(plan_violation(streamed, many, hopper()).find("streamed"), std::string::npos);
}

TEST(MakePlan, LongRowsAreSlicedAndRunAClusterPerRowAtEveryBatchSize) {
  // Slices of 2048 chunks (16384 16-bit elements, 8192 float32), fixed by (N, dtype).
  EXPECT_EQ(slices_for(16384, DType::kBFloat16), 1);
  EXPECT_EQ(slices_for(16392, DType::kBFloat16), 2);
  EXPECT_EQ(slices_for(131072, DType::kBFloat16), 8);
  EXPECT_EQ(slices_for(262144, DType::kFloat16), 16);
  EXPECT_EQ(slices_for(8192, DType::kFloat32), 1);
  EXPECT_EQ(slices_for(131072, DType::kFloat32), 16);
  // One slice a CTA; the fused op pairs them from 16 slices a batch per SM (132 SMs: 2112).
  for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
    for (int64_t n : {32768, 65536, 131072, 262144}) {
      for (int64_t m : {int64_t{1}, int64_t{16}, int64_t{4096}}) {
        const NormProblem p = problem(DType::kBFloat16, Weight::kSame, op, n, m, kLayouts[0]);
        const NormPlan plan = make_plan(p, hopper());
        SCOPED_TRACE(describe(plan, p, hopper()));
        ASSERT_EQ(plan.variant, KernelVariant::kCluster);
        EXPECT_EQ(plan.slices, n / 16384);
        const bool pairs = op == NormOp::kFusedAddRmsNorm && m == 4096;
        EXPECT_EQ(plan.cluster_ctas, pairs ? plan.slices / 2 : plan.slices);
        EXPECT_EQ(plan.threads_per_row, 1024);
        EXPECT_EQ(plan.lanes_per_thread, 4);
        EXPECT_EQ(plan.block_threads, pairs ? 512 : 256);
        EXPECT_EQ(plan.grid, m * plan.cluster_ctas);
        EXPECT_EQ(plan_violation(plan, p, hopper()), "");
        EXPECT_NE(describe(plan, p, hopper()).find("cluster_ctas="), std::string::npos);
      }
    }
  }
  // The fused op's thresholds. By the batch's slices per SM: N=131072 (8 slices) pairs from
  // M=264, N=32768 (2 slices, a cluster of one CTA) from M=1056; on a GPU of 66 SMs, from half.
  // An odd slice count leaves the last paired CTA one slice (N=147456: 9 slices, 5 CTAs).
  // Below, where clusters of at most 2 paired CTAs (one an SM) fill their last wave 80% or more:
  // N=32768 pairs at M=106 (106 of 132 SMs), not at 105; at M=132 and 264 (whole waves), not at
  // 133 or 1000 (76 of a fourth wave); at 1055 (131 of an eighth). N=65536 (2 paired CTAs a
  // row) pairs at M=64 (128 of 132), not at 68. N=131072 (4 paired CTAs) does not at M=33 (a
  // whole wave). On 66 SMs, N=32768 pairs at M=66, not at 67.
  using PairsCase = std::tuple<int64_t, int64_t, int, int>;  // N, M, SMs, cluster CTAs
  for (const auto& [n, m, sms, ctas] :
       {PairsCase{131072, 263, 132, 8}, PairsCase{131072, 264, 132, 4},
        PairsCase{32768, 1056, 132, 1}, PairsCase{131072, 132, 66, 4},
        PairsCase{147456, 4096, 132, 5}, PairsCase{32768, 105, 132, 2},
        PairsCase{32768, 106, 132, 1}, PairsCase{32768, 132, 132, 1}, PairsCase{32768, 133, 132, 2},
        PairsCase{32768, 264, 132, 1}, PairsCase{32768, 1000, 132, 2},
        PairsCase{32768, 1055, 132, 1}, PairsCase{65536, 64, 132, 2}, PairsCase{65536, 68, 132, 4},
        PairsCase{131072, 33, 132, 8}, PairsCase{32768, 66, 66, 1}, PairsCase{32768, 67, 66, 2}}) {
    DeviceInfo d = hopper();
    d.sm_count = sms;
    const NormProblem p =
        problem(DType::kBFloat16, Weight::kSame, NormOp::kFusedAddRmsNorm, n, m, kLayouts[0]);
    const NormPlan plan = make_plan(p, d);
    SCOPED_TRACE(describe(plan, p, d));
    ASSERT_EQ(plan.variant, KernelVariant::kCluster);
    EXPECT_EQ(plan.cluster_ctas, ctas);
    EXPECT_EQ(plan.block_threads, ctas < plan.slices ? 512 : 256);
    EXPECT_EQ(plan.smem_bytes, plan.block_threads * 8 * 16 * 2);
    EXPECT_EQ(plan_violation(plan, p, d), "");
    // rmsnorm keeps one slice a CTA at the same shapes.
    const NormProblem q =
        problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, n, m, kLayouts[0]);
    EXPECT_EQ(make_plan(q, d).cluster_ctas, slices_for(n, DType::kBFloat16));
  }
  // Where two slices' shared memory does not fit a CTA, the fused op keeps one slice a CTA.
  {
    DeviceInfo small = hopper();
    small.max_smem_per_block = 101376;  // 99 KB: one fused slice (64 KB) fits, two do not
    small.max_smem_per_sm = 102400;
    const NormProblem p = problem(DType::kBFloat16, Weight::kSame, NormOp::kFusedAddRmsNorm, 131072,
                                  4096, kLayouts[0]);
    const NormPlan plan = make_plan(p, small);
    SCOPED_TRACE(describe(plan, p, small));
    ASSERT_EQ(plan.variant, KernelVariant::kCluster);
    EXPECT_EQ(plan.cluster_ctas, 8);
    EXPECT_EQ(plan.block_threads, 256);
  }
  // Past 16 slices a CTA holds two (512 threads, two tiles side by side), up to 32 slices:
  // 16-bit N <= 524288, float32 N <= 262144; an odd count leaves the last CTA one slice.
  for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
    for (const auto& [x, n, ctas] : {std::tuple{DType::kBFloat16, int64_t{278528}, 9},
                                     std::tuple{DType::kFloat16, int64_t{524288}, 16},
                                     std::tuple{DType::kFloat32, int64_t{262144}, 16}}) {
      const NormProblem p = problem(x, Weight::kSame, op, n, 3, kLayouts[0]);
      const NormPlan plan = make_plan(p, hopper());
      SCOPED_TRACE(describe(plan, p, hopper()));
      ASSERT_EQ(plan.variant, KernelVariant::kCluster);
      EXPECT_EQ(plan.slices, slices_for(n, x));
      EXPECT_EQ(plan.cluster_ctas, ctas);
      EXPECT_EQ(plan.block_threads, 512);
      EXPECT_EQ(plan.grid, 3 * ctas);
      EXPECT_EQ(plan.smem_bytes, 512 * 8 * 16 * (op == NormOp::kRmsNorm ? 1 : 2));
      EXPECT_EQ(plan_violation(plan, p, hopper()), "");
    }
  }
  // A plan may pair the slices where the planner gives each a CTA (the sweep's cluster_pairs):
  // half the CTAs (an odd count leaves the last one slice), 512 threads, twice the slots.
  for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
    for (const auto& [n, ctas] : {std::pair{int64_t{32768}, 1}, std::pair{int64_t{131072}, 4},
                                  std::pair{int64_t{147456}, 5}, std::pair{int64_t{262144}, 8}}) {
      const NormProblem p = problem(DType::kBFloat16, Weight::kSame, op, n, 16, kLayouts[0]);
      NormPlan plan = make_plan(p, hopper());
      ASSERT_EQ(plan.variant, KernelVariant::kCluster);
      ASSERT_EQ(plan.block_threads, 256);
      plan.block_threads = 512;
      plan.cluster_ctas = ctas;
      plan.smem_bytes = static_cast<int>(tile_smem_bytes(p, 512));
      plan.grid = 16 * ctas;
      SCOPED_TRACE(describe(plan, p, hopper()));
      EXPECT_EQ(plan_violation(plan, p, hopper()), "");
      NormPlan unpaired_ctas = plan;  // the CTAs of one slice each, on paired CTAs
      unpaired_ctas.cluster_ctas = plan.slices;
      unpaired_ctas.grid = 16 * plan.slices;
      EXPECT_NE(plan_violation(unpaired_ctas, p, hopper()).find("cluster_ctas"), std::string::npos);
      NormPlan three = plan;  // three slices a CTA: the kernel holds two at most
      three.block_threads = 768;
      three.smem_bytes = static_cast<int>(tile_smem_bytes(p, 768));
      EXPECT_NE(plan_violation(three, p, hopper()).find("one or two slices"), std::string::npos);
    }
  }
  // One slice a CTA past 16 slices would take more CTAs than a cluster has.
  {
    const NormProblem p =
        problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 524288, 4, kLayouts[0]);
    NormPlan plan = make_plan(p, hopper());
    ASSERT_EQ(plan.block_threads, 512);
    plan.block_threads = 256;
    plan.cluster_ctas = plan.slices;
    plan.smem_bytes = static_cast<int>(tile_smem_bytes(p, 256));
    plan.grid = 4 * plan.slices;
    EXPECT_NE(plan_violation(plan, p, hopper()).find("kMaxClusterCtas"), std::string::npos);
  }
  // A float32 weight on 16-bit rows takes the same clusters as a 16-bit one: its slices' weight
  // waits in registers as float32 (no shared memory of its own).
  for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
    for (int64_t m : {int64_t{1}, int64_t{4096}}) {
      const NormProblem w32 =
          problem(DType::kBFloat16, Weight::kFloat32, op, 65536, m, kLayouts[0]);
      const NormProblem same = problem(DType::kBFloat16, Weight::kSame, op, 65536, m, kLayouts[0]);
      const NormPlan plan = make_plan(w32, hopper());
      const NormPlan same_plan = make_plan(same, hopper());
      SCOPED_TRACE(describe(plan, w32, hopper()));
      EXPECT_EQ(plan.variant, KernelVariant::kCluster);
      EXPECT_EQ(plan.cluster_ctas, same_plan.cluster_ctas);
      EXPECT_EQ(plan.block_threads, same_plan.block_threads);
      EXPECT_EQ(plan.smem_bytes, same_plan.smem_bytes);
      // rmsnorm's batch of 4096 rows is past a wave: half that weight held.
      EXPECT_EQ(same_plan.weight_held_chunks, 8);
      EXPECT_EQ(plan.weight_held_chunks, op == NormOp::kRmsNorm && m > 1 ? 4 : 8);
    }
  }
  // What the cluster cannot take sums the same slices in two_pass: unaligned rows, more than 32
  // slices, a GPU without clusters, a grid too large.
  const NormProblem unaligned = problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 65536, 4,
                                        Layout{"", 2, 256, 0, 0});
  const NormProblem huge =
      problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 1048576, 4, kLayouts[0]);
  // M x slices CTAs past a grid's 2^31 - 1 (M = 2^30 rows of 4 slices; the binding allows M up
  // to 2^31 - 1, whatever memory holds).
  const NormProblem too_many_ctas = problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm,
                                            65536, int64_t{1} << 30, kLayouts[0]);
  const NormProblem aligned =
      problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 65536, 4, kLayouts[0]);
  for (const auto& [p, d] : {std::pair{unaligned, hopper()}, std::pair{huge, hopper()},
                             std::pair{aligned, ampere()}, std::pair{too_many_ctas, hopper()}}) {
    const NormPlan plan = make_plan(p, d);
    EXPECT_EQ(plan.variant, KernelVariant::kTwoPass) << describe(plan, p, d);
    EXPECT_EQ(plan.slices, slices_for(p.cols, p.x_dtype));
  }
}

// A tile or cluster thread holds all 8 of its weight chunks in registers (LayerNorm none: see
// LayerNormTakesTheTileWhereRmsNormDoesElseRegisters), but rmsnorm's clusters with a float32
// weight on 16-bit rows hold half past one wave of CTAs holding it whole (512 threads an SM):
// M x CTAs x 256 threads > 512 x 132 SMs. Other schedules hold none.
TEST(MakePlan, TilesAndClustersHoldTheWeightButHalfAWideOneInRmsNormClustersPastAWave) {
  for_each_case([](const Case& c) -> const char* {
    const bool tile = c.plan.variant == KernelVariant::kTile;
    const bool cluster = c.plan.variant == KernelVariant::kCluster;
    const bool wide = c.problem.has_weight && c.problem.w_dtype == DType::kFloat32 &&
                      c.problem.x_dtype != DType::kFloat32;
    const bool past_a_wave = c.plan.grid * c.plan.block_threads > 512 * 132;
    const int expected = cluster && wide && c.problem.op == NormOp::kRmsNorm && past_a_wave ? 4
                         : tile || cluster                                                  ? 8
                                                                                            : 0;
    return c.plan.weight_held_chunks == expected ? nullptr : "weight_held_chunks";
  });
  // The wave's edge: rows of 2 slices (N=32768, 16 bits), 132 rows make 264 CTAs of 256 threads.
  for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
    for (int64_t m : {int64_t{132}, int64_t{133}}) {
      const NormProblem p = problem(DType::kFloat16, Weight::kFloat32, op, 32768, m, kLayouts[0]);
      const NormPlan plan = make_plan(p, hopper());
      SCOPED_TRACE(describe(plan, p, hopper()));
      ASSERT_EQ(plan.variant, KernelVariant::kCluster);
      EXPECT_EQ(plan.weight_held_chunks, op == NormOp::kRmsNorm && m == 133 ? 4 : 8);
      EXPECT_NE(describe(plan, p, hopper()).find("weight_held_chunks="), std::string::npos);
    }
  }
}

// Leading dimensions that do not collapse into one row stride (a QKV head view [T, H, D] with
// strides (qkv_width, D, 1)): the registers schedule, with the same thread layout as contiguous
// rows of that N (batch invariance), and never the streamed one, whose cursor needs one stride.
TEST(MakePlan, HeadViewsKeepTheRowLayoutAndNeverStream) {
  for (int64_t heads_per_token : {8, 32}) {
    for (int64_t tokens : {1, 7, 4096, 65536}) {
      NormProblem p =
          problem(DType::kBFloat16, Weight::kSame, NormOp::kRmsNorm, 128, 0, kLayouts[0]);
      p.rows = tokens * heads_per_token;
      p.row_dims.count = 2;
      p.row_dims.size[0] = heads_per_token;
      p.row_dims.size[1] = tokens;
      const int64_t qkv_width = (heads_per_token + 2 * 8) * 128;
      p.x_strides = RowStrides{{128, qkv_width}};
      p.out_strides = RowStrides{{128, heads_per_token * 128}};
      const NormPlan plan = make_plan(p, hopper());
      SCOPED_TRACE(describe(plan, p, hopper()));
      EXPECT_EQ(plan_violation(plan, p, hopper()), "");
      EXPECT_NE(plan.variant, KernelVariant::kStreamed);
      EXPECT_TRUE(plan.vector_io);
      EXPECT_EQ(plan.threads_per_row, threads_per_row_for(128, DType::kBFloat16));
      EXPECT_NE(describe(plan, p, hopper()).find("row_dims=2"), std::string::npos);
      // An outer stride that breaks 16-byte alignment turns vector I/O off.
      p.x_strides.s[1] = qkv_width + 1;
      EXPECT_FALSE(make_plan(p, hopper()).vector_io);
    }
  }
}

TEST(MakePlan, VectorIoExactlyWhenAligned) {
  for_each_case([](const Case& c) -> const char* {
    if (!c.device.is_cuda()) return c.plan.vector_io ? "vector_io on the CPU" : nullptr;
    const NormProblem& p = c.problem;
    const int64_t chunk = 16 / dtype_size(p.x_dtype);
    const bool fused = p.op == NormOp::kFusedAddRmsNorm;
    const int64_t other_ld =
        fused ? p.residual_strides.s[0] : p.out_strides.s[0];  // fused: out is x
    const int other_align = fused ? p.residual_align : p.out_align;
    const bool misaligned = p.cols % chunk != 0 || p.x_align < 16 || p.ld_x() % chunk != 0 ||
                            other_align < 16 || other_ld % chunk != 0 ||
                            (p.has_weight && p.w_align < 16);
    if (misaligned) return c.plan.vector_io ? "vector_io on a misaligned problem" : nullptr;
    const bool fully_aligned = c.layout->x_align == 256 && c.layout->other_align == 256;
    return fully_aligned && !c.plan.vector_io ? "no vector_io on an aligned problem" : nullptr;
  });
}

TEST(MakePlan, CpuPlansAreOneTaskPerRow) {
  for_each_case([](const Case& c) -> const char* {
    if (c.device.is_cuda()) return c.plan.variant == KernelVariant::kCpu ? "kCpu on CUDA" : nullptr;
    if (c.plan.variant != KernelVariant::kCpu) return "CPU plan not kCpu";
    return c.plan.grid == c.problem.rows ? nullptr : "CPU grid != M";
  });
}

TEST(Describe, IsKeyValuePairsThatMatchThePlan) {
  for_each_case([](const Case& c) -> const char* {
    const std::string s = describe(c.plan, c.problem, c.device);
    std::map<std::string, std::string> kv;
    std::istringstream in(s);
    std::string token;
    size_t tokens = 0;
    while (std::getline(in, token, ' ')) {
      ++tokens;
      const size_t eq = token.find('=');
      if (eq == 0 || eq == std::string::npos || eq + 1 == token.size()) return "not key=value";
      if (token.find('=', eq + 1) != std::string::npos) return "two '=' in one pair";
      if (!kv.emplace(token.substr(0, eq), token.substr(eq + 1)).second) return "repeated key";
    }
    if (tokens == 0 || s.back() == ' ') return "empty or trailing space";
    if (kv["variant"] != variant_name(c.plan.variant)) return "variant= does not match";
    if (kv["threads_per_row"] != std::to_string(c.plan.threads_per_row)) return "threads_per_row=";
    if (kv["lanes_per_thread"] != std::to_string(c.plan.lanes_per_thread))
      return "lanes_per_thread=";
    if (kv["vector_io"] != (c.plan.vector_io ? "1" : "0")) return "vector_io= does not match";
    if (kv["grid"] != std::to_string(c.plan.grid)) return "grid= does not match";
    // Derived for the reader: a slice's chunks (a cluster CTA's share; the row when it is one
    // slice), and whether CTAs loop over row groups (the streamed schedule only).
    const bool gpu = c.plan.variant != KernelVariant::kCpu;
    const int64_t slice = gpu ? std::min<int64_t>(c.plan.chunks_per_row, kSliceChunks) : 0;
    if (kv["slice_chunks"] != std::to_string(slice)) return "slice_chunks= does not match";
    if (gpu && c.plan.slices * int64_t{kSliceChunks} < c.plan.chunks_per_row) return "slices";
    const bool streamed = c.plan.variant == KernelVariant::kStreamed;
    if (kv["persistent"] != (streamed ? "1" : "0")) return "persistent= does not match";
    if (kv["M"] != std::to_string(c.problem.rows)) return "M= does not match";
    return kv["N"] == std::to_string(c.problem.cols) ? nullptr : "N= does not match";
  });
}

// Each entry: a problem, a valid plan for it, and how to break the plan (or use it out of place).
struct Broken {
  const char* what;
  NormProblem made_for, used_for;
  DeviceInfo device;
  std::function<void(NormPlan&)> mutate;
  const char* mentions = "";  // a word the reason must contain
};

// rmsnorm_forward is rmsnorm that also writes rstd: the same plan at every shape (so the same
// bits in out); no other op saves it.
TEST(MakePlan, SavingRstdChangesNoPlanAndOnlyRmsNormSavesIt) {
  for (const int64_t n : {64, 4096, 16384, 131072}) {
    for (const int64_t m : {1, 1024, 65536}) {
      NormProblem p = bf16(n, m);
      NormProblem saving = p;
      saving.saves_stats = true;
      const NormPlan plan = make_plan(saving, hopper());
      EXPECT_EQ(describe(plan, saving, hopper()), describe(make_plan(p, hopper()), p, hopper()));
      EXPECT_EQ(plan_violation(plan, saving, hopper()), "");
    }
  }
  NormProblem fused = fused_bf16(4096, 17);
  const NormPlan plan = make_plan(fused, hopper());
  fused.saves_stats = true;
  EXPECT_NE(plan_violation(plan, fused, hopper()).find("statistics"), std::string::npos);
}

// LayerNorm on CUDA: the tile where rmsnorm takes it (from kTileMinGroupsPerSm row groups per
// SM, rows of at least kTileMinThreadsPerRow lanes, vector I/O), else the registers schedule; a
// float32 weight and bias (widened by the binding), rows of one slice; longer rows have a message
// naming the limit, not a plan.
NormProblem layernorm(DType x, int64_t n, int64_t m) {
  NormProblem p = problem(x, Weight::kFloat32, NormOp::kLayerNorm, n, m, kLayouts[0]);
  p.has_bias = true;
  return p;
}

TEST(MakePlan, LayerNormTakesTheTileWhereRmsNormDoesElseRegisters) {
  int tiles = 0;
  for (const DType x : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const int64_t longest = x == DType::kFloat32 ? 8192 : 16384;
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{4096}, int64_t{7168}, longest}) {
      for (const int64_t m : {1, 1024, 65536}) {
        NormProblem p = layernorm(x, n, m);
        EXPECT_EQ(cuda_forward_unsupported(p, hopper()), "");
        // rmsnorm's plan for the same rows with a weight of x's dtype (held in registers).
        const NormProblem rms = problem(x, Weight::kSame, NormOp::kRmsNorm, n, m, kLayouts[0]);
        const bool tile = make_plan(rms, hopper()).variant == KernelVariant::kTile;
        tiles += tile;
        for (const bool saving : {false, true}) {
          p.saves_stats = saving;
          const NormPlan plan = make_plan(p, hopper());
          SCOPED_TRACE(describe(plan, p, hopper()));
          if (tile) {
            EXPECT_EQ(plan.variant, KernelVariant::kTile);
            // x's slots only: the weight and bias are read at the store.
            EXPECT_EQ(plan.smem_bytes, 16 * kTileSlotsPerThread * plan.block_threads);
          } else {
            EXPECT_EQ(plan.variant, KernelVariant::kRowInRegisters);
            EXPECT_TRUE(plan.chunks_per_thread == 1 || plan.chunks_per_thread == 2);
          }
          // The reduction layout is rmsnorm's for the same row (batch invariance by N alone).
          EXPECT_EQ(plan.threads_per_row, threads_per_row_for(n, x));
        }
      }
    }
  }
  EXPECT_GT(tiles, 0);
  // A bias at an address that is not 16-byte aligned for its float32 chunks: element-wise I/O,
  // and so the registers schedule at any M.
  NormProblem p = layernorm(DType::kBFloat16, 4096, 65536);
  EXPECT_TRUE(make_plan(p, hopper()).vector_io);
  p.bias_align = 16;
  EXPECT_FALSE(make_plan(p, hopper()).vector_io);
  EXPECT_EQ(make_plan(p, hopper()).variant, KernelVariant::kRowInRegisters);
}

// LayerNorm's rows longer than one slice run rmsnorm's cluster (both reductions exchanged in it):
// the same slices and CTAs, the weight held by none. It has no two_pass kernel, so where no
// cluster takes the rows (before sm_90, element-wise I/O, more than kMaxClusterSlices slices) the
// call is refused before planning, with the reason.
TEST(MakePlan, LayerNormLongRowsTakeTheClusterOrAreRefusedWithTheReason) {
  for (const DType x : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const int64_t slice = x == DType::kFloat32 ? 8192 : 16384;
    for (const int64_t n : {slice + 8, 4 * slice, 16 * slice + 8, 32 * slice}) {
      for (const int64_t m : {1, 70, 4096}) {
        NormProblem p = layernorm(x, n, m);
        ASSERT_EQ(cuda_forward_unsupported(p, hopper()), "") << n;
        const NormProblem rms = problem(x, Weight::kFloat32, NormOp::kRmsNorm, n, m, kLayouts[0]);
        const NormPlan rms_plan = make_plan(rms, hopper());
        for (const bool saving : {false, true}) {
          p.saves_stats = saving;
          const NormPlan plan = make_plan(p, hopper());
          SCOPED_TRACE(describe(plan, p, hopper()));
          EXPECT_EQ(plan.variant, KernelVariant::kCluster);
          EXPECT_EQ(plan.slices, rms_plan.slices);
          EXPECT_EQ(plan.cluster_ctas, rms_plan.cluster_ctas);
          EXPECT_EQ(plan.block_threads, rms_plan.block_threads);
          EXPECT_EQ(plan.weight_held_chunks, 0);  // the weight and bias are read at the store
        }
      }
    }
    const auto refused = [&](const NormProblem& p, const DeviceInfo& d, const std::string& words) {
      const std::string why = cuda_forward_unsupported(p, d);
      EXPECT_NE(why.find(words), std::string::npos) << why;
    };
    const std::string one_slice = "N <= " + std::to_string(slice);
    refused(layernorm(x, 32 * slice + 8, 4), hopper(), "N <= " + std::to_string(32 * slice));
    refused(layernorm(x, slice + 8, 4), ampere(), one_slice + " (x.size(-1)) on CUDA");
    refused(layernorm(x, slice + 8, 4), ampere(), "compute capability 8.0");
    NormProblem unaligned = layernorm(x, slice + 8, 4);
    unaligned.x_align = 4;
    refused(unaligned, hopper(), one_slice);
    refused(unaligned, hopper(), "16-byte vectors");
    NormProblem small_smem = layernorm(x, slice + 8, 4);
    DeviceInfo tiny = hopper();
    tiny.max_smem_per_block = 16 * 1024;
    refused(small_smem, tiny, "shared memory");
    // One slice is taken anywhere; rmsnorm's long rows too (two_pass where no cluster fits).
    EXPECT_EQ(cuda_forward_unsupported(layernorm(x, slice, 4), ampere()), "");
    EXPECT_EQ(cuda_forward_unsupported(bf16(131072, 4), ampere()), "");
  }
}

TEST(PlanViolation, KeepsLayerNormToItsKernels) {
  const NormProblem p = layernorm(DType::kBFloat16, 4096, 65536);
  const NormPlan plan = make_plan(p, hopper());
  ASSERT_EQ(plan.variant, KernelVariant::kTile);
  NormPlan two_pass = make_plan(bf16(4096, 17), hopper());
  two_pass.variant = KernelVariant::kTwoPass;
  EXPECT_NE(plan_violation(two_pass, layernorm(DType::kBFloat16, 4096, 17), hopper())
                .find("no instantiated kernel"),
            std::string::npos);
  // Its parameters are float32 or x's dtype (bfloat16 here): a float16 pair has no kernel.
  NormProblem bf16_weight = p, f16_weight = p;
  bf16_weight.w_dtype = DType::kBFloat16;
  EXPECT_EQ(plan_violation(plan, bf16_weight, hopper()), "");
  f16_weight.w_dtype = DType::kFloat16;
  EXPECT_NE(plan_violation(plan, f16_weight, hopper()).find("no instantiated kernel"),
            std::string::npos);
  NormProblem rms_with_bias = bf16(4096, 65536);
  rms_with_bias.has_bias = true;
  EXPECT_NE(
      plan_violation(make_plan(bf16(4096, 65536), hopper()), rms_with_bias, hopper()).find("bias"),
      std::string::npos);
}

TEST(PlanViolation, CatchesBrokenPlans) {
  const DeviceInfo gpu = hopper(), cpu{};
  const Broken cases[] =
      {
          {"threads_per_row halved, registers doubled", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) {
             p.threads_per_row /= 2;
             p.chunks_per_thread *= 2;
             p.block_threads = p.threads_per_row * p.rows_per_cta;
           },
           "batch invariance"},
          {"plan for another N", bf16(4096, 17), bf16(8192, 17), gpu, [](NormPlan&) {}, "chunks do not cover"},
          {"threads_per_row not a power of two", bf16(64, 17), bf16(64, 17), gpu,
           [](NormPlan& p) { p.threads_per_row = 6; }, "power of two"},
          {"block_threads inconsistent", bf16(64, 17), bf16(64, 17), gpu,
           [](NormPlan& p) { p.block_threads += 32; }, "block_threads"},
          {"vector_io on an unaligned base", bf16(4096, 17, 2), bf16(4096, 17, 2), gpu,
           [](NormPlan& p) { p.vector_io = true; }},
          {"vector_io with N % 8 != 0", bf16(4095, 17), bf16(4095, 17), gpu,
           [](NormPlan& p) { p.vector_io = true; }},
          {"aligned plan used on an unaligned base", bf16(4096, 17), bf16(4096, 17, 2), gpu,
           [](NormPlan&) {}},
          {"grid one CTA short", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) { p.grid -= 1; }, "one CTA per row group"},
          {"plan for M=1 used for M=4097", bf16(4096, 1), bf16(4096, 4097), gpu, [](NormPlan&) {}, "one CTA per row group"},
          {"registers do not hold the row", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) { p.chunks_per_thread = 1; }, "registers do not hold"},
          {"chunks_per_thread 3", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) { p.chunks_per_thread = 3; }, "no instantiated kernel"},
          {"4 chunks in registers", bf16(8192, 17, 2), bf16(8192, 17, 2), gpu,
           [](NormPlan& p) { p.chunks_per_thread = 4; }, "no instantiated kernel"},
          {"two_pass keeping chunks", bf16(262144, 17, 2), bf16(262144, 17, 2), gpu,
           [](NormPlan& p) { p.chunks_per_thread = 1; }, "no instantiated kernel"},
          {"chunk not 16 bytes", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) { p.chunk_elems = 4; }, "16 bytes"},
          {"cpu plan for another M", bf16(4096, 17), bf16(4096, 18), cpu, [](NormPlan&) {}, "one task per row"},
          {"streamed with 5 stages", w32(1024, 65536), w32(1024, 65536), gpu,
           [](NormPlan& p) { p.stages = 5; }, "stages must be"},
          {"streamed smem not matching its layout", w32(1024, 65536), w32(1024, 65536), gpu,
           [](NormPlan& p) { p.smem_bytes -= 16; }, "streamed layout"},
          {"streamed plan used on an unaligned base", w32(1024, 65536), w32(1024, 65536, 2), gpu,
           [](NormPlan&) {}},
          {"streamed with too few slots", w32(1024, 65536), w32(1024, 65536), gpu,
           [](NormPlan& p) { p.chunks_per_thread = 1; }, "ceil(chunks_per_row"},
          {"streamed with 3 chunks per thread", w32(1024, 65536), w32(1024, 65536), gpu,
           [](NormPlan& p) { p.chunks_per_thread = 3; }, "ceil(chunks_per_row"},
          {"stages on a register plan", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) { p.stages = 2; }, "stages belong"},
          {"rmsnorm's streamed plan used for the fused op", w32(1024, 65536),
           w32(1024, 65536, 256, NormOp::kFusedAddRmsNorm), gpu, [](NormPlan&) {},
           "rmsnorm's only"},
          {"streamed plan used on rows with a weight no wider than x", w32(1024, 65536),
           bf16(1024, 65536), gpu, [](NormPlan&) {}, "float32 weight on 16-bit rows"},
          {"streamed plan on rows of 128 lanes (the tile's)", w32(2048, 65536), w32(2048, 65536),
           gpu,
           [](NormPlan& p) {
             p.variant = KernelVariant::kStreamed;
             p.lanes_per_thread = 1;
             p.rows_per_cta = 1;
             p.block_threads = p.threads_per_row;
             p.chunks_per_thread = 2;
             p.stages = 2;
             p.smem_bytes = static_cast<int>(streamed_smem_bytes(w32(2048, 65536), 2, 128, 2));
             p.grid = 132;
           },
           "64-127"},
          {"more CTAs than row groups", w32(1024, 65536), w32(1024, 65536), gpu,
           [](NormPlan& p) { p.grid = 32769; }, "more CTAs than row groups"},
          {"streamed plan used on a head view", w32(1024, 65536), w32_head_view(1024, 65536), gpu,
           [](NormPlan&) {}, "one stride"},
          {"tile with one lane per thread", bf16(4096, 4097), bf16(4096, 4097), gpu,
           [](NormPlan& p) { p.lanes_per_thread = 1; }, "lanes_per_thread"},
          {"tile lanes on a registers plan", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) { p.lanes_per_thread = 4; }, "lanes_per_thread"},
          {"folded registers with a CTA of one lane a thread", bf16(8192, 17), bf16(8192, 17), gpu,
           [](NormPlan& p) { p.block_threads *= 2; }, "block_threads"},
          {"folded registers on element-wise rows", bf16(8192, 17, 2), bf16(8192, 17, 2), gpu,
           [](NormPlan& p) {
             p.lanes_per_thread = 2;
             p.block_threads /= 2;
           },
           "folds"},
          {"folded registers on rows of 256 lanes", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) {
             p.lanes_per_thread = 2;
             p.block_threads /= 2;
           },
           "folds"},
          {"folded registers plan used for layernorm", bf16(8192, 17),
           layernorm(DType::kBFloat16, 8192, 17), gpu, [](NormPlan&) {}, "folds"},
          {"tile with 4 slots", bf16(4096, 4097), bf16(4096, 4097), gpu,
           [](NormPlan& p) { p.chunks_per_thread = 4; }, "no instantiated kernel"},
          {"tile smem not matching its layout", bf16(4096, 4097), bf16(4096, 4097), gpu,
           [](NormPlan& p) { p.smem_bytes /= 2; }, "tile layout"},
          {"rmsnorm's tile plan used for the fused op", bf16(4096, 4097), fused_bf16(4096, 4097),
           gpu, [](NormPlan&) {}, "tile layout"},
          {"tile plan used on an unaligned base", bf16(4096, 4097), bf16(4096, 4097, 2), gpu,
           [](NormPlan&) {}},
          {"tile on a row of 64 lanes", bf16(1024, 65536), bf16(1024, 65536), gpu,
           [](NormPlan& p) {
             p.variant = KernelVariant::kTile;
             p.lanes_per_thread = 4;
             p.stages = 0;
             p.chunks_per_thread = 8;
             p.block_threads = 16 * p.rows_per_cta;
             p.grid = 65536 / p.rows_per_cta;
             p.smem_bytes = 16 * 8 * p.block_threads;
           },
           "kTileMinThreadsPerRow"},
          {"tile without a grid of one CTA per row group", bf16(4096, 4097), bf16(4096, 4097), gpu,
           [](NormPlan& p) { p.grid = 132; }, "one CTA per row group"},
          {"tile holding half its weight chunks", bf16(4096, 4097), bf16(4096, 4097), gpu,
           [](NormPlan& p) { p.weight_held_chunks = 4; }, "no instantiated kernel"},
          {"registers plan holding weight chunks", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) { p.weight_held_chunks = 8; }, "no instantiated kernel"},
          {"chunks short of N", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) { p.chunks_per_row -= 1; }, "chunks do not cover"},
          {"streamed without vector I/O", w32(1024, 65536), w32(1024, 65536), gpu,
           [](NormPlan& p) { p.vector_io = false; }, "streamed variant needs vector I/O"},
          {"folded registers in CTAs past the kernel's 512-thread bounds", bf16(8192, 17),
           bf16(8192, 17), gpu,
           [](NormPlan& p) {
             p.rows_per_cta = 4;
             p.block_threads = 1024;
             p.grid = 5;
           },
           "kernel's bounds"},
          {"partial warps of several rows", bf16(64, 17), bf16(64, 17), gpu,
           [](NormPlan& p) {
             p.rows_per_cta = 2;
             p.block_threads = 8;
             p.grid = 9;
           },
           "partial warps"},
          {"tile on element-wise rows", bf16(4096, 4097), bf16(4095, 4097), gpu,
           [](NormPlan& p) { p.vector_io = false; }, "tile variant needs"},
          {"grid of no CTA", bf16(4096, 17), bf16(4096, 17), gpu, [](NormPlan& p) { p.grid = 0; },
           "one CTA per row group"},
          {"PDL below sm_90", bf16(4096, 17), bf16(4096, 17), ampere(),
           [](NormPlan& p) { p.use_pdl = true; }, "PDL needs sm_90"},
          {"PDL with a pre-sm_90 kernel image", bf16(4096, 17), bf16(4096, 17), gpu,
           [](NormPlan& p) {
             p.use_pdl = true;
             p.image_sass_arch = 90;
             p.image_ptx_arch = 80;
           },
           "griddepcontrol"},
      };
  const Broken cluster_cases[] = {
      {"cluster plan with the slices of another N", bf16(65536, 4), bf16(65536, 4), gpu,
       [](NormPlan& p) {
         p.slices = 8;
         p.cluster_ctas = 8;
         p.grid = 32;
       },
       "slices"},
      {"cluster with fewer CTAs than slices", bf16(65536, 4), bf16(65536, 4), gpu,
       [](NormPlan& p) { p.cluster_ctas = 2; }, "cluster_ctas"},
      {"cluster CTA of two rows", bf16(65536, 4), bf16(65536, 4), gpu,
       [](NormPlan& p) { p.rows_per_cta = 2; }, "1024 lanes each"},
      {"cluster smem not matching its layout", bf16(65536, 4), bf16(65536, 4), gpu,
       [](NormPlan& p) { p.smem_bytes -= 16; }, "cluster's tile layout"},
      {"streamed grid of no CTA", w32(1024, 65536), w32(1024, 65536), gpu,
       [](NormPlan& p) { p.grid = 0; }, "grid does not cover every row"},
      {"a grid past the CUDA limit", bf16(4096, 17), bf16(4096, int64_t{1} << 32), gpu,
       [](NormPlan& p) { p.grid = int64_t{1} << 32; }, "CUDA limit"},
      {"cluster grid of one CTA per row", bf16(65536, 4), bf16(65536, 4), gpu,
       [](NormPlan& p) { p.grid = 4; }, "one cluster per row"},
      {"cluster below sm_90", bf16(65536, 4), bf16(65536, 4), ampere(),
       [](NormPlan& p) {
         p.variant = KernelVariant::kCluster;
         p.lanes_per_thread = 4;
         p.block_threads = 256;
         p.chunks_per_thread = 8;
         p.cluster_ctas = p.slices;
         p.weight_held_chunks = 8;
         p.smem_bytes = 16 * 8 * 256;
         p.grid = 4 * p.slices;
       },
       "sm_90"},
      {"cluster holding half a bf16 weight", bf16(65536, 4097), bf16(65536, 4097), gpu,
       [](NormPlan& p) { p.weight_held_chunks = 4; }, "no instantiated kernel"},
      {"registers plan for a sliced row", bf16(65536, 4), bf16(65536, 4), gpu,
       [](NormPlan& p) {
         p.variant = KernelVariant::kRowInRegisters;
         p.lanes_per_thread = 1;
         p.cluster_ctas = 0;
         p.smem_bytes = 0;
         p.chunks_per_thread = 4;
         p.block_threads = 1024;
         p.grid = 4;
       },
       "several slices"},
  };
  for (const Broken& b : cluster_cases) {
    NormPlan plan = make_plan(b.made_for, b.device);
    b.mutate(plan);
    const std::string why = plan_violation(plan, b.used_for, b.device);
    EXPECT_NE(why, "") << b.what;
    EXPECT_NE(why.find(b.mentions), std::string::npos) << b.what << ": " << why;
  }
  for (const Broken& b : cases) {
    NormPlan plan = make_plan(b.made_for, b.device);
    ASSERT_EQ(plan_violation(plan, b.made_for, b.device), "") << b.what;
    b.mutate(plan);
    const std::string why = plan_violation(plan, b.used_for, b.device);
    EXPECT_NE(why, "") << b.what;
    EXPECT_NE(why.find(b.mentions), std::string::npos) << b.what << ": " << why;
  }
  // A problem of no leading dimension (row_dims counts at least one).
  NormProblem no_dims = bf16(4096, 17);
  no_dims.row_dims.count = 0;
  EXPECT_NE(plan_violation(make_plan(bf16(4096, 17), gpu), no_dims, gpu).find("row_dims.count"),
            std::string::npos);
  // A streamed plan on a device of less shared memory than the one it was made for.
  const NormPlan streamed = make_plan(w32(1024, 65536), gpu);
  ASSERT_EQ(streamed.variant, KernelVariant::kStreamed);
  DeviceInfo small = gpu;
  small.max_smem_per_block = streamed.smem_bytes;
  EXPECT_NE(plan_violation(streamed, w32(1024, 65536), small).find("shared memory exceeds"),
            std::string::npos);
}

TEST(PlanFacts, NameEveryFieldOnceWithThePlansValues) {
  const NormProblem view = head_view_bf16(4096, 4096);
  const NormPlan plan = make_plan(view, hopper());
  const PlanFacts facts = plan_facts(plan, view, hopper());  // throws if a field is left unset
  EXPECT_EQ(facts.text[0], "rmsnorm");
  EXPECT_EQ(facts.text[1], variant_name(plan.variant));
  EXPECT_EQ(facts.text[2], "sm_90");
  auto number = [&](std::string_view name) {
    for (size_t i = 0; i < kPlanNumberFields.size(); ++i) {
      if (name == kPlanNumberFields[i]) return facts.numbers[i];
    }
    ADD_FAILURE() << "no number field " << name;
    return int64_t{-1};
  };
  EXPECT_EQ(number("M"), 4096);
  EXPECT_EQ(number("N"), 4096);
  EXPECT_EQ(number("ld_residual"), 0);  // rmsnorm has no residual
  EXPECT_EQ(number("grid"), plan.grid);
  EXPECT_EQ(number("threads_per_row"), plan.threads_per_row);
  EXPECT_EQ(number("row_dims"), 2);
  // Outermost first: 1024 groups of 4 rows, 5N apart; rows N apart.
  EXPECT_EQ(facts.lists[0], (std::vector<int64_t>{1024, 4}));
  EXPECT_EQ(facts.lists[1], (std::vector<int64_t>{5 * 4096, 4096}));
  // describe() prints each field once, by name.
  const std::string line = describe(plan, view, hopper());
  for (const char* name : kPlanTextFields) {
    EXPECT_NE(line.find(std::string(name) + "="), std::string::npos) << name;
  }
  for (const char* name : kPlanNumberFields) {
    EXPECT_NE(line.find(" " + std::string(name) + "="), std::string::npos) << name;
  }
  EXPECT_NE(line.find(" row_sizes=1024,4 x_strides=20480,4096"), std::string::npos) << line;
  const NormProblem fused = fused_bf16(4096, 8);
  const PlanFacts fused_facts = plan_facts(make_plan(fused, hopper()), fused, hopper());
  EXPECT_EQ(fused_facts.text[0], "fused_add_rms_norm");
}

}  // namespace
}  // namespace oink
