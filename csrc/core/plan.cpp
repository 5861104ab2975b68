#include "core/plan.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "core/kernel_table.h"

namespace oink {
namespace {

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Threads per CTA when several short rows share one: 4 warps keep enough rows in flight per SM
// without making the last CTA of a small batch mostly idle.
constexpr int kSharedCtaThreads = 128;

bool aligned_for_vectors(const NormProblem& p, int chunk_elems) {
  const int x_bytes = chunk_elems * dtype_size(p.x_dtype);  // always 16
  const bool fused = traits_of(p.op).adds_residual;
  if (p.cols % chunk_elems != 0) return false;
  if (p.x_align < x_bytes || !strides_multiple_of(p.x_strides, p.row_dims, chunk_elems))
    return false;
  if (!fused &&
      (p.out_align < x_bytes || !strides_multiple_of(p.out_strides, p.row_dims, chunk_elems))) {
    return false;
  }
  if (fused && (p.residual_align < x_bytes ||
                !strides_multiple_of(p.residual_strides, p.row_dims, chunk_elems))) {
    return false;
  }
  if (p.has_weight && p.w_align < chunk_elems * dtype_size(p.w_dtype)) return false;
  // LayerNorm's bias has its weight's dtype (NormProblem::w_dtype).
  if (p.has_bias && p.bias_align < chunk_elems * dtype_size(p.w_dtype)) return false;
  return true;
}

// The streamed schedule keeps rows in flight through shared memory at the cost of a round trip
// per chunk, a weight copy per CTA and a pipeline to fill and drain per CTA; it pays when every
// persistent CTA gets at least kStreamedMinGroupsPerCta row groups. Measured on the H200 (bf16,
// a schedule sweep, docs/kernels.md): rmsnorm N=7168, M=1024 ran in 9.6 us streamed (3.9 groups
// per CTA) against 12.1 us in registers; at M=65536 streaming won by 0-37% (N=7168: 483 against
// 661 us).
constexpr int64_t kStreamedMinGroupsPerCta = 3;

// A float32 weight on 16-bit rows: twice x's bytes a chunk. The tile and the cluster hold it in
// registers as float32 (norm_tile.cuh: 64 registers a thread, kernels compiled for 128); the
// streamed kernel converts it into shared memory once a CTA.
bool weight_wider_than_x(const NormProblem& p) {
  return p.has_weight && dtype_size(p.w_dtype) > dtype_size(p.x_dtype);
}

// rmsnorm with a float32 weight on 16-bit rows only (and, in make_plan, rows of
// kStreamedMinLanes lanes or more but too few for the tile: 64-127, N 520-1024): the streamed
// CTAs convert that weight into shared memory once, where the registers kernel reads its 2x x's
// bytes from L2 for every row. On rows the tile takes, the tile holding that weight in registers
// beat every streamed shape (H200, a schedule sweep, N 2048-16384,
// M 1024-65536: 1.01-1.16x; N=7168, M=65536: 447.0 against 484.6 us). With a weight no wider than
// x (or none, or float32 rows) the registers schedule was faster at every streamed shape measured
// (H200, a schedule sweep, rows of 64-1024 elements,
// M=16384-262144: 1.006-1.20x; bf16 N=256, M=262144: 65.6 against 78.8 us), so those kernels
// are not compiled. The fused op's registers schedule holds x, the residual and the weight of a
// row in registers with every load issued first (norm_row_group.cuh), twice rmsnorm's bytes in
// flight per thread, and it beat the streamed schedule at every measured size (H200,
// best streamed shape in parentheses: N=4096, M=65536: 528.5 us (563.2); N=7168,
// M=65536: 913.4 (960.1); N=4096, M=1024: 10.11 (10.19)). The streamed kernel also walks rows
// with one stride (a cursor per CTA); other layouts take the registers schedule, which splits
// each row index over the leading dimensions.
bool op_streams(const NormProblem& p) {
  return traits_of(p.op).streamed && p.row_dims.count == 1 && weight_wider_than_x(p);
}

// Rows of fewer lanes keep the registers schedule even with a float32 weight: 1.05-1.14x faster
// than every streamed shape at N=128 and 512 (8 and 32 lanes), where rows of 64 lanes (N=1024)
// streamed 1.02-1.04x faster than the registers kernel at M >= 16384 (H200,
// streamed_shapes.txt). Rows of kTileMinThreadsPerRow lanes or more take the tile. So a streamed
// row has 64 to 127 lanes, 65 to 128 chunks: 2 chunks a lane, the one instantiation.
constexpr int kStreamedMinLanes = 64;
bool streamed_lanes(int threads_per_row) {
  return threads_per_row >= kStreamedMinLanes && threads_per_row < kTileMinThreadsPerRow;
}

// Whether the registers schedule plays kRegistersLanesPerThread lanes a thread
// (kernels/norm_row_group.cuh, kLanes): where its kernel folds them (vector I/O, the RMSNorm
// family's one reduction) and the row has at least kRegistersFoldMinLanes lanes, at every batch
// size. A row is one CTA; each of its warps pays the row's fixed instructions (addresses, PDL,
// the shuffles, the barrier, the warp-sum loop, 1/rms), and a 1024-lane row's 32 warps, 8 a
// scheduler, wait on each other's issue: folded, half the warps pay them, with the same chunks,
// sums and tree (the same bits). Rows of 256 lanes or fewer (2 warps a scheduler or fewer) wait
// on memory instead, and lose latency hiding with half the warps. Measured on the H200, lanes
// 1 / lanes 2 in one sweep (M=1-256): 1.04-1.34x
// at 1024 lanes (N=16384; rmsnorm M=256: 8.02 -> 5.97 us), 0.95-1.06x at 512 (N=7168, 8192;
// geomean 1.017 rmsnorm, 0.998 fused with PDL, 1.02 both without), 0.96-0.99x at 256 and
// 0.87-0.94x at 128.
bool registers_fold(const NormProblem& p, int threads_per_row, bool vector_io) {
  return vector_io && !traits_of(p.op).two_reductions && threads_per_row >= kRegistersFoldMinLanes;
}

bool streamed_pays(int64_t groups, int64_t grid) {
  return grid > 0 && groups >= kStreamedMinGroupsPerCta * grid;
}

struct StreamedShape {
  int stages = 0;
  int smem_bytes = 0;
  int ctas_per_sm = 0;
};

// Stages and CTAs per SM of a streamed plan: the resident shape whose bytes in flight (the rows
// its stages fetch beside the one each CTA reads, whole device) come closest to
// kStreamedBytesInFlight (by ratio), more CTAs and fewer stages first on a tie: a CTA's row
// barrier then stalls fewer of the SM's warps, and a small batch gives each CTA's pipeline
// fewer rows to fill and drain. Empty (stages == 0) when two stages do not fit in one CTA's
// shared memory.
StreamedShape streamed_shape(const NormProblem& p, const DeviceInfo& d, int chunks_per_thread,
                             int block_threads, int rows_per_cta) {
  const int64_t group_bytes = int64_t{rows_per_cta} * p.cols * dtype_size(p.x_dtype);
  StreamedShape best;
  double best_distance = 0;
  const int threads_per_sm = std::min(kStreamedThreadsPerSm, d.max_threads_per_sm);
  for (int64_t ctas = threads_per_sm / block_threads; ctas >= 1; --ctas) {
    for (int stages = kMinStages; stages <= kMaxStages; ++stages) {
      const int64_t smem = streamed_smem_bytes(p, chunks_per_thread, block_threads, stages);
      const int64_t per_cta = smem + kStreamedStaticSmemBytes;
      if (per_cta > d.max_smem_per_block || ctas > d.max_blocks_per_sm ||
          ctas * (per_cta + d.reserved_smem_per_block) > d.max_smem_per_sm) {
        continue;
      }
      const double in_flight = static_cast<double>(d.sm_count) * ctas * (stages - 1) * group_bytes;
      const double distance = std::fabs(std::log(in_flight / kStreamedBytesInFlight));
      if (best.stages == 0 || distance < best_distance - 1e-9) {
        best = {stages, static_cast<int>(smem), static_cast<int>(ctas)};
        best_distance = distance;
      }
    }
  }
  return best;
}

// A tile CTA: whole rows of threads_per_row / kTileLanesPerThread threads, at least
// kSharedCtaThreads threads. (Rows of fewer lanes than kTileMinThreadsPerRow never take the tile;
// the shape is defined for them too, so that the planner may compute it for every row.)
struct TileShape {
  int rows_per_cta = 1;
  int block_threads = 1;
  int64_t groups = 0;
};

TileShape tile_shape(int threads_per_row, int64_t rows) {
  const int threads = std::max(1, threads_per_row / kTileLanesPerThread);
  TileShape shape;
  shape.rows_per_cta = std::max(1, kSharedCtaThreads / threads);
  shape.block_threads = threads * shape.rows_per_cta;
  shape.groups = ceil_div(rows, shape.rows_per_cta);
  return shape;
}

// The tile schedule: rows of 16-byte chunks whose reduction layout it can fold (at least
// kTileMinThreadsPerRow lanes of at most kTileMaxChunksPerLane chunks), any row layout, where its
// shared memory fits.
bool tile_fits(const NormProblem& p, const DeviceInfo& d, int threads_per_row, int64_t chunks,
               bool vector_io) {
  if (!vector_io) return false;
  if (threads_per_row < kTileMinThreadsPerRow) return false;
  if (chunks > int64_t{kTileMaxChunksPerLane} * threads_per_row) return false;
  const int block = tile_shape(threads_per_row, 1).block_threads;
  return d.max_smem_per_sm > 0 &&
         tile_smem_bytes(p, block) + kTileStaticSmemBytes <= d.max_smem_per_block;
}

// The cluster schedule: rows of several slices, one slice per CTA of a cluster (Hopper and
// later), each CTA a tile of one or two slices (256 threads playing 1024 lanes each). Rows past
// kMaxClusterSlices slices, element-wise I/O and older GPUs take two_pass, which sums the same
// slices one after another.
constexpr int kClusterCtaThreads = kMaxThreadsPerRow / kTileLanesPerThread;

// A CUDA grid's x dimension: the cluster grid is M x slices CTAs (M itself is at most this).
constexpr int64_t kMaxGridX = 0x7fffffff;

// A cluster's CTAs for a row of `slices` slices, `per_cta` slices each (the last CTA may have
// one fewer).
int cluster_ctas_for(int slices, int per_cta) { return (slices + per_cta - 1) / per_cta; }

// Whether rows of `slices` slices can run as clusters of CTAs of `per_cta` slices (1 or 2).
bool cluster_fits(const NormProblem& p, const DeviceInfo& d, int slices, int per_cta,
                  bool vector_io) {
  if (!vector_io || d.cc_major < 9 || slices < 2 || slices > kMaxClusterSlices) return false;
  if (per_cta < 1 || per_cta > kMaxSlicesPerClusterCta) return false;
  const int ctas = cluster_ctas_for(slices, per_cta);
  return ctas <= kMaxClusterCtas && p.rows <= kMaxGridX / ctas &&
         tile_smem_bytes(p, kClusterCtaThreads * per_cta) + kClusterStaticSmemBytes <=
             d.max_smem_per_block;
}

// Whether the fused op's paired cluster CTAs (512 threads, both streams of two slices in shared
// memory: 128 KB, one an SM on Hopper) fill the last wave of the grid they make: a whole number
// of waves, or a last one at least kFusedPairsMinLastWavePercent full. Where they do, every SM
// holds the same share of the batch, in clusters of at most two CTAs, and the pairs beat one
// slice a CTA by 1.05-1.19x (H200, bf16, a schedule sweep `cluster_pairs`: N=32768, M=128 10.71
// against 12.77 us; M=256 20.54 against 22.70; N=65536, M=64 10.90 against 12.79). A last wave
// less full leaves SMs idle at the end and lost 1.03-1.23x (N=32768, M=136: 15.15 against 13.33;
// M=96: 10.16 against 8.71). Clusters of four paired CTAs lost even at a full wave (N=131072,
// M=32: 14.97 against 12.62), hence kFusedPairsWaveMaxClusterCtas.
bool pairs_fill_last_wave(const NormProblem& p, const DeviceInfo& d, int slices) {
  const int ctas = cluster_ctas_for(slices, 2);
  if (ctas > kFusedPairsWaveMaxClusterCtas || d.max_smem_per_sm <= 0) return false;
  const int threads = kClusterCtaThreads * 2;
  const int64_t smem =
      tile_smem_bytes(p, threads) + kClusterStaticSmemBytes + d.reserved_smem_per_block;
  const int64_t per_sm =
      std::min({d.max_smem_per_sm / smem, int64_t{d.max_threads_per_sm / threads},
                int64_t{d.max_blocks_per_sm}});
  if (per_sm < 1) return false;
  const int64_t wave = per_sm * d.sm_count;
  const int64_t last = (p.rows * ctas) % wave;
  return last == 0 || 100 * last >= kFusedPairsMinLastWavePercent * wave;
}

// Slices per cluster CTA for rows of `slices` slices. Two past kMaxClusterCtas (a CTA each would
// not fit in a cluster). For the fused op, two also once the batch holds
// kFusedPairsMinSlicesPerSm slices per SM: half the CTAs, each 512 threads with both streams of
// two slices in shared memory (128 KB, one CTA an SM where one-slice CTAs fit three), were 1.00 to
// 1.05x as fast as one slice a CTA at every long-row shape from there (H200, a schedule sweep,
// `cluster_pairs`: N=262144, M=4096 2237 against 2354 us; N=131072, M=1024 279.5 against 286.2;
// N=32768, M=1024 level). Below, pairs lose where the batch does not fill the SMs (M=1: 0.66-0.77x,
// fewer SMs read each row) and go either way in between (0.84-1.20x, as the clusters' waves
// fall): there the fused op pairs where the pairs fill their last wave (pairs_fill_last_wave).
// rmsnorm's pairs were level or slower (0.97-1.02x at M >= 256), so its CTAs keep one slice.
int cluster_slices_per_cta(const NormProblem& p, const DeviceInfo& d, int slices) {
  if (slices > kMaxClusterCtas) return 2;
  if (!traits_of(p.op).adds_residual || d.sm_count <= 0) return 1;
  if (!cluster_fits(p, d, slices, 2, true)) return 1;
  const bool many = p.rows * slices >= int64_t{kFusedPairsMinSlicesPerSm} * d.sm_count;
  return many || pairs_fill_last_wave(p, d, slices) ? 2 : 1;
}

// Weight chunks a tile or cluster thread holds in registers (plan.h, kHeldWideWeightThreadsPerSm):
// all of them, but none for LayerNorm (its weight and bias are read at the store), and half for
// rmsnorm's float32 weight on 16-bit rows in cluster grids past one wave of CTAs that hold it
// whole. Measured (H200, a schedule sweep in turns):
// held half, 64 registers and 4 CTAs an SM against 96 and 2, batches ran 1.04-1.28x faster
// (N=131072, M=4096: 608 against 712 us; N=32768, M=256: 11.5 against 12.1), but one row 0.83-0.86x
// (N=131072: 3.59 against 2.98 us): within a wave every CTA runs at once either way, and the
// half read at the store lengthens each CTA's chain.
int weight_held_chunks(const NormProblem& p, const DeviceInfo& d, KernelVariant variant,
                       int64_t grid, int block_threads) {
  if (!traits_of(p.op).holds_weight) return 0;
  const bool past_a_wave =
      d.sm_count > 0 && grid * block_threads > int64_t{kHeldWideWeightThreadsPerSm} * d.sm_count;
  if (variant == KernelVariant::kCluster && traits_of(p.op).streamed && weight_wider_than_x(p) &&
      past_a_wave) {
    return kTileSlotsPerThread / 2;
  }
  return kTileSlotsPerThread;
}

// Whether the tile schedule beats the registers one for a batch of `groups` tile row groups: for
// rmsnorm from kTileMinGroupsPerSm groups per SM, and for rows of 1024 lanes (both ops) from more
// rows than SMs: the registers kernel's CTAs are then 512 threads of two lanes each, one (fused)
// or two (rmsnorm) per SM, against the tile's three or four of 256 (H200, a schedule sweep, bf16,
// N=16384: rmsnorm M=256 6.40 against 7.94 us, M=512 10.32 against 15.04, at M=128 registers,
// 4.45 against 4.65; fused M=192 7.87 against 9.40, M=256 9.65 against 10.91, M=320 12.28
// against 13.81, each with the PDL trigger pdl_early_trigger_pays() gives it, at M=128 registers,
// 5.78 against 6.01). The fused op's registers kernel holds both streams and the weight in
// registers with every load issued first, and otherwise kept up with the tile (N=4096, M=65536:
// 529.5 against 534.0 us; N=7168 922.3 against 922.0; N=8192 1043.2 against 1061.5) except where
// its CTAs are weak from kTileMinGroupsPerSm groups per SM: rows where half the lanes or more
// hold one chunk instead of two, their registers idle (N=6144, M=16384: 208.7 against 199.5 us).
// The same rules held with a float32 weight on bf16 rows (bench/results/nvidia-h200/
// tile_w32.txt): the fused op's tile at N=6144 and 16384 level with or ahead of its registers
// kernel (M=65536: 788.6 against 804.8 us), its registers kernel ahead at N=8192 (1042.4 against
// 1065.8); rmsnorm's tile 1.01-1.16x ahead of every streamed shape from M=1024 at N 2048-16384.
bool tile_pays(const NormProblem& p, int threads_per_row, int64_t chunks, int64_t groups,
               const DeviceInfo& d) {
  if (threads_per_row == kMaxThreadsPerRow) return groups > d.sm_count;
  if (groups < kTileMinGroupsPerSm * d.sm_count) return false;
  // One stream (rmsnorm, layernorm) from there; the fused op where most lanes hold two chunks.
  return !traits_of(p.op).adds_residual || 2 * chunks <= 3 * int64_t{threads_per_row};
}

}  // namespace

int64_t tile_smem_bytes(const NormProblem& p, int block_threads) {
  const int streams = traits_of(p.op).streams;
  return int64_t{16} * kTileSlotsPerThread * block_threads * streams;
}

int64_t streamed_smem_bytes(const NormProblem& p, int chunks_per_thread, int block_threads,
                            int stages) {
  const int64_t slots = int64_t{chunks_per_thread} * block_threads;  // 16-byte slots per stage
  // The weight is kept as float32 (converted once per CTA): 4 bytes per element of a chunk.
  const int weight_pieces = p.has_weight ? 4 / dtype_size(p.x_dtype) : 0;
  return 16 * slots * (weight_pieces + int64_t{stages});
}

const char* variant_name(KernelVariant v) {
  switch (v) {
    case KernelVariant::kCpu:
      return "cpu";
    case KernelVariant::kRowInRegisters:
      return "row_in_registers";
    case KernelVariant::kTwoPass:
      return "two_pass";
    case KernelVariant::kStreamed:
      return "streamed";
    case KernelVariant::kTile:
      return "tile";
    case KernelVariant::kCluster:
      return "cluster";
  }
  return "?";
}

int slices_for(int64_t cols, DType x_dtype) {
  const int64_t chunks = ceil_div(cols, 16 / dtype_size(x_dtype));
  return static_cast<int>(std::max<int64_t>(1, ceil_div(chunks, kSliceChunks)));
}

int threads_per_row_for(int64_t cols, DType x_dtype) {
  const int64_t chunks = ceil_div(cols, 16 / dtype_size(x_dtype));
  // Two chunks per thread: enough bytes in flight per thread, and enough threads per row that a
  // decode batch of one row still spreads over a whole CTA.
  const int64_t threads = next_pow2(ceil_div(chunks, 2));
  return static_cast<int>(threads < kMaxThreadsPerRow ? threads : kMaxThreadsPerRow);
}

std::string cuda_forward_unsupported(const NormProblem& p, const DeviceInfo& device) {
  const int slices = slices_for(p.cols, p.x_dtype);
  if (traits_of(p.op).two_pass_rows || slices == 1) return "";
  const bool vector_io = aligned_for_vectors(p, 16 / dtype_size(p.x_dtype));
  if (cluster_fits(p, device, slices, cluster_slices_per_cta(p, device, slices), vector_io)) {
    return "";
  }
  const std::string rows =
      std::string(" (x.size(-1)) on CUDA for ") + dtype_name(p.x_dtype) + " rows";
  const int64_t elems_per_slice = kSliceChunks * int64_t{16 / dtype_size(p.x_dtype)};
  const std::string one_slice = "must have N <= " + std::to_string(elems_per_slice) + rows;
  if (slices > kMaxClusterSlices) {
    return "must have N <= " + std::to_string(kMaxClusterSlices * elems_per_slice) + rows + ": " +
           op_name(p.op) + "'s longest rows are a cluster of " + std::to_string(kMaxClusterCtas) +
           " CTAs of two slices of " + std::to_string(elems_per_slice);
  }
  if (device.cc_major < 9) {
    return one_slice + " on compute capability " + std::to_string(device.cc_major) + "." +
           std::to_string(device.cc_minor) + ": longer " + op_name(p.op) +
           " rows run as a thread block cluster (9.0 and later)";
  }
  if (!vector_io) {
    return one_slice + " that are not 16-byte vectors: longer " + op_name(p.op) +
           " rows run as a thread block cluster, which needs N a multiple of " +
           std::to_string(16 / dtype_size(p.x_dtype)) +
           " and 16-byte aligned rows of x and out, weight and bias";
  }
  return one_slice + ": longer " + op_name(p.op) + " rows run as a thread block cluster, " +
         "whose shared memory does not fit this device's " +
         std::to_string(device.max_smem_per_block) + " bytes per block";
}

int kernel_ctas_per_sm(const KernelImage& image, int block_threads, int smem_bytes,
                       const DeviceInfo& device) {
  if (image.registers <= 0 || block_threads <= 0 || device.max_smem_per_sm <= 0) return 0;
  const int warps = (block_threads + 31) / 32;
  const int per_warp = (image.registers * 32 + kRegisterAllocationUnit - 1) /
                       kRegisterAllocationUnit * kRegisterAllocationUnit;
  const int smem = smem_bytes + image.static_smem_bytes + device.reserved_smem_per_block;
  return std::min({device.max_threads_per_sm / block_threads, device.max_blocks_per_sm,
                   device.registers_per_sm / (warps * per_warp), device.max_smem_per_sm / smem});
}

// The kernels call launch_dependents right after their own wait: the next PDL launch's CTAs then
// take whatever room this grid leaves on each SM and sit there until this grid ends, and its
// launch latency is hidden. That pays while the next grid fits beside this one whole (up to half
// a wave: all of it starts the moment this one ends) or hardly at all (from half an SM's CTA
// short of a full wave: the signal comes only as the last CTAs start). In between, the next grid
// splits: part of it waits beside this one, the rest launches only as this one's CTAs exit. There
// the exit trigger (no launch_dependents) was up to 1.28x faster (H200, bf16, a schedule sweep,
// back-to-back launches: the fused tile at N=16384, M=256 9.65 against 12.38 us, M=320 12.28
// against 14.09, N=8192, M=512 9.81 against 12.24; rmsnorm's tile at N=8192, M=768 7.89 against
// 8.94; the fused cluster at N=32768, M=160 13.14 against 14.53), and outside it up to 1.14x
// slower (rmsnorm N=4096, M=128: 2.07 against 1.82).
// The rule holds for every kernel that takes it, the registers kernels too: an A/B of this rule
// against their early trigger everywhere
// (a schedule sweep, six turns each) took the fused
// registers kernel's L2-warm calls at M=256, N=7168 and 8192 (grid 256 of a 396 wave) from 4.24
// to 3.30 us and 4.71 to 3.36 us (medians), its isolated ones 0.95-0.99x, and left rmsnorm's
// (M=128-256) level.
bool pdl_early_trigger_pays(const NormPlan& plan, const DeviceInfo& device) {
  if (!plan.use_pdl || plan.variant == KernelVariant::kStreamed) return false;
  if (plan.ctas_per_sm <= 0 || device.sm_count <= 0) return true;
  const int64_t wave = int64_t{plan.ctas_per_sm} * device.sm_count;
  const bool split = 2 * plan.grid > wave && 2 * (wave - plan.grid) >= device.sm_count;
  return !split;
}

NormPlan make_plan(const NormProblem& p, const DeviceInfo& device, const LaunchOptions& options,
                   const KernelImageOf& image_of) {
  NormPlan plan;
  plan.chunk_elems = 16 / dtype_size(p.x_dtype);
  plan.chunks_per_row = ceil_div(p.cols, plan.chunk_elems);

  if (!device.is_cuda()) {
    plan.variant = KernelVariant::kCpu;
    plan.grid = p.rows;
  } else {
    plan.threads_per_row = threads_per_row_for(p.cols, p.x_dtype);
    plan.slices = slices_for(p.cols, p.x_dtype);
    plan.vector_io = aligned_for_vectors(p, plan.chunk_elems);
    plan.rows_per_cta =
        plan.threads_per_row >= kSharedCtaThreads ? 1 : kSharedCtaThreads / plan.threads_per_row;
    plan.block_threads = plan.threads_per_row * plan.rows_per_cta;
    const int64_t groups = ceil_div(p.rows, plan.rows_per_cta);
    plan.grid = groups;
    const int64_t needed = ceil_div(plan.chunks_per_row, plan.threads_per_row);
    // Streamed rows (64-127 lanes: streamed_lanes) need 2 chunks a lane, its one instantiation.
    const StreamedShape streamed = op_streams(p) && streamed_lanes(plan.threads_per_row) &&
                                           plan.vector_io && needed <= kMaxChunksPerThread
                                       ? streamed_shape(p, device, static_cast<int>(needed),
                                                        plan.block_threads, plan.rows_per_cta)
                                       : StreamedShape{};
    const TileShape tile = tile_shape(plan.threads_per_row, p.rows);
    const bool takes_tile =
        tile_fits(p, device, plan.threads_per_row, plan.chunks_per_row, plan.vector_io) &&
        tile_pays(p, plan.threads_per_row, plan.chunks_per_row, tile.groups, device);
    if (plan.slices > 1) {
      // Every batch size the same way: a long row's reduction is its slices' (see kSliceChunks).
      const int per_cta = cluster_slices_per_cta(p, device, plan.slices);
      if (cluster_fits(p, device, plan.slices, per_cta, plan.vector_io)) {
        plan.variant = KernelVariant::kCluster;
        plan.lanes_per_thread = kTileLanesPerThread;
        plan.rows_per_cta = 1;
        plan.block_threads = kClusterCtaThreads * per_cta;
        plan.chunks_per_thread = kTileSlotsPerThread;
        plan.smem_bytes = static_cast<int>(tile_smem_bytes(p, plan.block_threads));
        plan.cluster_ctas = cluster_ctas_for(plan.slices, per_cta);
        plan.grid = p.rows * plan.cluster_ctas;
        plan.weight_held_chunks =
            weight_held_chunks(p, device, plan.variant, plan.grid, plan.block_threads);
      } else {
        // RMSNorm's; LayerNorm's long rows are refused where no cluster takes them
        // (cuda_forward_unsupported), and a two_pass plan for them names no kernel.
        plan.variant = KernelVariant::kTwoPass;
      }
    } else if (takes_tile) {
      plan.variant = KernelVariant::kTile;
      plan.lanes_per_thread = kTileLanesPerThread;
      plan.rows_per_cta = tile.rows_per_cta;
      plan.block_threads = tile.block_threads;
      plan.chunks_per_thread = kTileSlotsPerThread;
      plan.smem_bytes = static_cast<int>(tile_smem_bytes(p, plan.block_threads));
      plan.grid = tile.groups;
      plan.weight_held_chunks =
          weight_held_chunks(p, device, plan.variant, plan.grid, plan.block_threads);
    } else if (streamed.stages > 0 &&
               streamed_pays(groups, int64_t{device.sm_count} * streamed.ctas_per_sm)) {
      plan.variant = KernelVariant::kStreamed;
      plan.chunks_per_thread = static_cast<int>(needed);
      plan.stages = streamed.stages;
      plan.smem_bytes = streamed.smem_bytes;
      plan.grid = int64_t{device.sm_count} * streamed.ctas_per_sm;  // < groups (streamed_pays)
    } else if (needed <= kMaxChunksPerThread) {
      plan.variant = KernelVariant::kRowInRegisters;
      plan.chunks_per_thread = static_cast<int>(next_pow2(needed));
      if (registers_fold(p, plan.threads_per_row, plan.vector_io)) {
        plan.lanes_per_thread = kRegistersLanesPerThread;
        plan.block_threads = plan.threads_per_row / kRegistersLanesPerThread * plan.rows_per_cta;
      }
    } else {
      plan.variant = KernelVariant::kTwoPass;
    }
    KernelImage image;
    if (image_of) {
      image = image_of(plan);
      plan.image_sass_arch = image.sass_arch;
      plan.image_ptx_arch = image.ptx_arch;
      plan.ctas_per_sm = kernel_ctas_per_sm(image, plan.block_threads, plan.smem_bytes, device);
    }
    plan.use_pdl = options.allow_pdl && device.cc_major >= 9 && image.has_griddepcontrol();
    plan.pdl_early_trigger = pdl_early_trigger_pays(plan, device);
  }

  const std::string broken = plan_violation(plan, p, device);
  if (!broken.empty()) throw std::logic_error("oink planner bug: " + broken);
  return plan;
}

int forward_kernel_entry(const NormPlan& plan, const NormProblem& p) {
  const DType w = kernel_weight_dtype(p);
  if (p.x_dtype == DType::kFloat64 || w == DType::kFloat64) return -1;  // CPU only
  const KernelOps ops = traits_of(p.op).kernel_ops;
  for (int i = 0; i < static_cast<int>(std::size(kForwardKernels)); ++i) {
    const ForwardKernel& k = kForwardKernels[i];
    if (k.ops == ops && k.variant == plan.variant && k.vector_io == plan.vector_io &&
        k.chunks_per_thread == plan.chunks_per_thread &&
        k.lanes_per_thread == plan.lanes_per_thread &&
        k.weight_held_chunks == plan.weight_held_chunks &&
        kernel_weight_allowed(k.weight, p.x_dtype, w)) {
      return i;
    }
  }
  return -1;
}

std::string plan_violation(const NormPlan& plan, const NormProblem& p, const DeviceInfo& device) {
  if (p.saves_stats && !traits_of(p.op).saves_stats) {
    return "the fused op saves no statistics (rmsnorm_forward and layernorm_forward do)";
  }
  if (p.has_bias && !traits_of(p.op).has_bias) return "only layernorm has a bias";
  if (plan.chunk_elems * dtype_size(p.x_dtype) != 16) return "chunk is not 16 bytes";
  if (plan.chunks_per_row * plan.chunk_elems < p.cols) return "chunks do not cover the row";
  if (plan.variant == KernelVariant::kCpu) {
    return plan.grid == p.rows ? "" : "cpu plan must have one task per row";
  }
  const int tpr = plan.threads_per_row;
  if (tpr < 1 || tpr > kMaxThreadsPerRow || (tpr & (tpr - 1)) != 0) {
    return "threads_per_row must be a power of two in [1, 1024]";
  }
  if (tpr != threads_per_row_for(p.cols, p.x_dtype)) {
    return "threads_per_row must depend on (N, dtype) only (batch invariance)";
  }
  const bool tile = plan.variant == KernelVariant::kTile;
  const bool cluster = plan.variant == KernelVariant::kCluster;
  const bool folds_registers = plan.variant == KernelVariant::kRowInRegisters &&
                               plan.lanes_per_thread == kRegistersLanesPerThread;
  if (folds_registers && !registers_fold(p, tpr, plan.vector_io)) {
    return "row_in_registers folds kRegistersLanesPerThread lanes only for vector I/O RMSNorm "
           "rows of at least kRegistersFoldMinLanes lanes";
  }
  if (plan.slices != slices_for(p.cols, p.x_dtype)) {
    return "slices must depend on (N, dtype) only (batch invariance)";
  }
  if (plan.slices > 1 && !cluster && plan.variant != KernelVariant::kTwoPass) {
    return "rows of several slices run the cluster or two_pass variant";
  }
  // A cluster CTA holds one slice or two (block_threads says which: 256 or 512 threads).
  const int per_cta = cluster ? plan.block_threads / kClusterCtaThreads : 0;
  if (cluster && (per_cta < 1 || per_cta > kMaxSlicesPerClusterCta)) {
    return "a cluster CTA holds one or two slices: 256 or 512 threads";
  }
  if (plan.cluster_ctas != (cluster ? cluster_ctas_for(plan.slices, per_cta) : 0)) {
    return "cluster_ctas must be the CTAs for the slices (cluster_ctas_for, one or two slices a "
           "CTA) in the cluster variant, else 0";
  }
  // A CTA holds rows_per_cta rows, or a cluster CTA its slices, side by side.
  const int groups = cluster ? per_cta : plan.rows_per_cta;
  if (plan.lanes_per_thread < 1 || plan.block_threads != tpr / plan.lanes_per_thread * groups ||
      plan.block_threads > kMaxThreadsPerRow) {
    return "block_threads must be threads_per_row / lanes_per_thread * rows_per_cta (a cluster "
           "CTA: * its slices), at most 1024";
  }
  if (plan.block_threads % 32 != 0 && plan.rows_per_cta != 1) return "partial warps";
  if (plan.vector_io && !aligned_for_vectors(p, plan.chunk_elems)) {
    return "vector_io needs 16-byte aligned pointers, strides and N";
  }
  if (plan.use_pdl && device.cc_major < 9) return "PDL needs sm_90 or newer";
  if (plan.pdl_early_trigger && !plan.use_pdl) return "an early PDL trigger needs PDL";
  if (plan.pdl_early_trigger && plan.variant == KernelVariant::kStreamed) {
    return "the streamed kernel's CTAs persist: it triggers the next launch after its last row";
  }
  if (plan.use_pdl &&
      !KernelImage{plan.image_sass_arch, plan.image_ptx_arch}.has_griddepcontrol()) {
    return "PDL needs a kernel image compiled for sm_90 or newer (griddepcontrol)";
  }
  if (p.row_dims.count < 1 || p.row_dims.count > kMaxRowDims) {
    return "row_dims.count must be in [1, kMaxRowDims]";
  }
  const int c = plan.chunks_per_thread;
  const bool streamed = plan.variant == KernelVariant::kStreamed;
  if (streamed != (plan.stages != 0) || (streamed || tile || cluster) != (plan.smem_bytes != 0)) {
    return "stages belong to the streamed variant only, smem_bytes to streamed, tile and cluster";
  }
  if (plan.variant == KernelVariant::kRowInRegisters) {
    if (static_cast<int64_t>(c) * tpr < plan.chunks_per_row) return "registers do not hold the row";
  } else if (streamed) {
    if (!op_streams(p)) {
      return "the streamed variant is rmsnorm's only, with a float32 weight on 16-bit rows of one "
             "stride";
    }
    if (!streamed_lanes(tpr)) {
      return "the streamed variant takes rows of kStreamedMinLanes lanes up to the tile's "
             "kTileMinThreadsPerRow (64-127)";
    }
    if (!plan.vector_io) return "the streamed variant needs vector I/O";
    if (static_cast<int64_t>(c - 1) * tpr >= plan.chunks_per_row ||
        static_cast<int64_t>(c) * tpr < plan.chunks_per_row) {
      return "streamed chunks_per_thread must be ceil(chunks_per_row / threads_per_row)";
    }
    if (plan.stages < kMinStages || plan.stages > kMaxStages) return "stages must be in [2, 4]";
    if (plan.smem_bytes != streamed_smem_bytes(p, c, plan.block_threads, plan.stages)) {
      return "smem_bytes does not match the streamed layout";
    }
    if (plan.grid > ceil_div(p.rows, plan.rows_per_cta)) return "more CTAs than row groups";
  } else if (tile) {
    if (!tile_fits(p, device, tpr, plan.chunks_per_row, plan.vector_io)) {
      return "the tile variant needs vector I/O, rows of at least kTileMinThreadsPerRow lanes "
             "of at most kTileMaxChunksPerLane chunks, and its shared memory";
    }
    if (plan.smem_bytes != tile_smem_bytes(p, plan.block_threads)) {
      return "smem_bytes does not match the tile layout";
    }
  } else if (cluster) {
    if (!cluster_fits(p, device, plan.slices, per_cta, plan.vector_io)) {
      return "the cluster variant needs sm_90+, vector I/O, 2 to kMaxClusterSlices slices, at "
             "most kMaxClusterCtas CTAs, one grid for M x its CTAs, and its shared memory";
    }
    if (tpr != kMaxThreadsPerRow || plan.rows_per_cta != 1) {
      return "a cluster CTA's slices are 1024 lanes each on 256 threads, one row";
    }
    if (plan.smem_bytes != tile_smem_bytes(p, plan.block_threads)) {
      return "smem_bytes does not match the cluster's tile layout";
    }
    if (plan.grid != p.rows * plan.cluster_ctas) return "a cluster grid is one cluster per row";
  }
  // The kernel it launches: an entry of the table norm_forward.cu instantiates, whose limits the
  // launch fits.
  const int entry = forward_kernel_entry(plan, p);
  if (entry < 0) {
    return "no instantiated kernel (core/kernel_table.h) has the plan's variant, vector_io, "
           "chunks_per_thread, lanes_per_thread and weight_held_chunks for its op and dtypes";
  }
  const ForwardKernel& kernel = kForwardKernels[entry];
  if (plan.block_threads > kernel.max_threads) return "block_threads exceed the kernel's bounds";
  if (plan.smem_bytes + kernel.static_smem_bytes > device.max_smem_per_block) {
    return "shared memory exceeds the device's";
  }
  if (!streamed && !cluster && plan.grid != ceil_div(p.rows, plan.rows_per_cta)) {
    return "non-persistent plans have one CTA per row group";
  }
  if (plan.grid < 1 && p.rows > 0) return "grid does not cover every row";
  if (plan.grid > 0x7fffffff) return "grid exceeds the CUDA limit";
  return "";
}

namespace {

int field_index(const char* const* names, size_t count, std::string_view name) {
  for (size_t i = 0; i < count; ++i) {
    if (std::string_view(names[i]) == name) return static_cast<int>(i);
  }
  return -1;
}

// Sets each named field once; complete() says whether every field was set.
template <size_t kTexts, size_t kNumbers>
class FactsWriter {
 public:
  explicit FactsWriter(PlanFacts& facts) : facts_(facts) {}
  void text(std::string_view name, std::string value) {
    facts_.text[slot(kPlanTextFields.data(), kTexts, name, 0)] = std::move(value);
  }
  void number(std::string_view name, int64_t value) {
    facts_.numbers[slot(kPlanNumberFields.data(), kNumbers, name, kTexts)] = value;
  }
  bool complete() const { return set_ == (uint64_t{1} << (kTexts + kNumbers)) - 1; }

 private:
  size_t slot(const char* const* names, size_t count, std::string_view name, size_t bit_base) {
    const int i = field_index(names, count, name);
    if (i < 0) throw std::logic_error("plan_facts: no plan field named " + std::string(name));
    const uint64_t bit = uint64_t{1} << (bit_base + static_cast<size_t>(i));
    if (set_ & bit) throw std::logic_error("plan_facts: field set twice: " + std::string(name));
    set_ |= bit;
    return static_cast<size_t>(i);
  }
  PlanFacts& facts_;
  uint64_t set_ = 0;
};

}  // namespace

PlanFacts plan_facts(const NormPlan& plan, const NormProblem& p, const DeviceInfo& device) {
  using std::to_string;
  constexpr size_t kTexts = kPlanTextFields.size(), kNumbers = kPlanNumberFields.size();
  static_assert(kTexts + kNumbers <= 64, "FactsWriter tracks the fields in one 64-bit mask");
  PlanFacts facts;
  FactsWriter<kTexts, kNumbers> put(facts);
  put.text("op", op_name(p.op));
  put.text("variant", variant_name(plan.variant));
  put.text("device", device.is_cuda()
                         ? "sm_" + to_string(device.cc_major) + to_string(device.cc_minor)
                         : "cpu");
  put.text("x_dtype", dtype_name(p.x_dtype));
  put.text("weight_dtype", p.has_weight ? dtype_name(p.w_dtype) : "none");
  put.number("M", p.rows);
  put.number("N", p.cols);
  put.number("ld_x", p.ld_x());
  // 0: no residual (rmsnorm).
  put.number("ld_residual", traits_of(p.op).adds_residual ? p.residual_strides.s[0] : 0);
  put.number("row_dims", p.row_dims.count);
  // Derived, for the reader: the chunks of one slice of the reduction layout (a cluster CTA's
  // share of a row; the whole row when it is one slice), and whether CTAs loop over row groups.
  put.number("slice_chunks", plan.variant == KernelVariant::kCpu
                                 ? 0
                                 : std::min<int64_t>(plan.chunks_per_row, kSliceChunks));
  put.number("persistent", plan.variant == KernelVariant::kStreamed);
  put.number("chunk_elems", plan.chunk_elems);
  put.number("vector_io", plan.vector_io);
  put.number("threads_per_row", plan.threads_per_row);
  put.number("lanes_per_thread", plan.lanes_per_thread);
  put.number("slices", plan.slices);
  put.number("cluster_ctas", plan.cluster_ctas);
  put.number("weight_held_chunks", plan.weight_held_chunks);
  put.number("chunks_per_thread", plan.chunks_per_thread);
  put.number("rows_per_cta", plan.rows_per_cta);
  put.number("block_threads", plan.block_threads);
  put.number("grid", plan.grid);
  put.number("stages", plan.stages);
  put.number("smem_bytes", plan.smem_bytes);
  put.number("pdl", plan.use_pdl);
  put.number("pdl_early_trigger", plan.pdl_early_trigger);
  put.number("ctas_per_sm", plan.ctas_per_sm);
  put.number("image_sass", plan.image_sass_arch);
  put.number("image_ptx", plan.image_ptx_arch);
  if (!put.complete()) throw std::logic_error("plan_facts: a plan field was left unset");
  // The leading dimensions walked, outermost first: sizes, then x's strides.
  for (int d = p.row_dims.count - 1; d >= 0; --d) {
    facts.lists[0].push_back(p.row_dims.size[d]);
    facts.lists[1].push_back(p.x_strides.s[d]);
  }
  return facts;
}

std::string describe(const NormPlan& plan, const NormProblem& p, const DeviceInfo& device) {
  const PlanFacts facts = plan_facts(plan, p, device);
  std::string s;
  auto field = [&](const char* name, const std::string& value) {
    s += (s.empty() ? "" : " ") + std::string(name) + "=" + value;
  };
  for (size_t i = 0; i < facts.text.size(); ++i) field(kPlanTextFields[i], facts.text[i]);
  for (size_t i = 0; i < facts.numbers.size(); ++i) {
    field(kPlanNumberFields[i], std::to_string(facts.numbers[i]));
  }
  for (size_t i = 0; i < facts.lists.size(); ++i) {
    std::string list;
    for (const int64_t v : facts.lists[i]) list += (list.empty() ? "" : ",") + std::to_string(v);
    field(kPlanListFields[i], list);
  }
  return s;
}

}  // namespace oink
