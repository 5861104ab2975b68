// The launch plan: every schedule decision for one call, made on the host by make_plan().
//
// Batch invariance (docs/contract.md) is built into the plan's shape: the *reduction order* of a
// row is fixed by (N, x dtype) alone. A row is cut into 16-byte "chunks" (8 elements of a 16-bit
// type, 4 of float32); chunk c belongs to thread c % threads_per_row, each thread sums its chunks
// in increasing order, element by element, then the threads combine in a fixed butterfly tree.
// Whether a chunk travels as one 16-byte vector or element by element, whether the row is kept in
// registers or read twice, and how many rows share a CTA change speed, never the bits.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/problem.h"

namespace oink {

enum class KernelVariant : uint8_t {
  kCpu,             // host loop, one row per task
  kRowInRegisters,  // CUDA: the row is read once into registers, written once
  kTwoPass,   // CUDA: rows too long for registers: pass 1 sums, pass 2 re-reads (L2) and writes
  kStreamed,  // CUDA: persistent CTAs keep `stages` rows in flight in shared memory (cp.async)
  kTile,      // CUDA: one small CTA per row group, each thread plays several reduction lanes
  kCluster,   // CUDA: a long row split over a thread block cluster, one slice per CTA
};

const char* variant_name(KernelVariant v);

// ceil(a / b) for a >= 0, b > 0: chunks of a row, CTAs of a grid (both planners).
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Largest number of chunks a thread keeps in registers (the registers and streamed kernels are
// instantiated for 1 and 2): a row of one slice (below, kSliceChunks) has at most 2 chunks per
// lane; longer rows are sliced and run the cluster or two_pass kernels.
inline constexpr int kMaxChunksPerThread = 2;
inline constexpr int kMaxThreadsPerRow = 1024;
// Warp values a CTA's row reductions exchange (device::row_reduce): one per warp of the largest
// CTA a schedule launches (1024 threads, the CUDA limit): the size of the kernels' buffers.
inline constexpr int kMaxWarpsPerCta = kMaxThreadsPerRow / 32;
// The streamed kernel keeps 2 to 4 row groups in flight per CTA (cp.async.wait_group immediates).
inline constexpr int kMinStages = 2;
inline constexpr int kMaxStages = 4;
// The streamed kernels are compiled for at most 64 registers per thread (__launch_bounds__(1024,
// 1); ptxas, sm_90a: 48, 53 saving rstd): at 32 (two 1024-thread CTAs) the compiler recomputed
// addresses every row and the kernel was issue-bound (ncu, H200: 0.89 warps issued per scheduler
// per cycle). So at most 1024 of their threads share an SM.
inline constexpr int kStreamedThreadsPerSm = 1024;
// Bytes of rows the streamed CTAs of the whole device keep in flight while each reads one row
// group from shared memory: (stages - 1) x CTAs x row-group bytes, the stage being read not
// counted. Measured on the H200 (a schedule sweep: rmsnorm, bf16 rows,
// float32 weight, N 2048-16384, M 1024-65536, every resident (stages, CTAs per SM)): the planner
// then picks 2 stages and the most CTAs near 3 MiB, 1.02-1.16x faster than its earlier rule
// (all stages counted, 7 MiB: 3 stages of one CTA at N=8192, M=1024 12.16 us against 10.53 for
// 2 stages of two) where small batches gave each CTA few rows, and within 1% of the fastest
// shape at large M. (Those rows take the tile since, its float32 weight held in registers; the
// rule now shapes rows of 64-127 lanes, N 520-1024.) A Blackwell value is not measured.
inline constexpr int64_t kStreamedBytesInFlight = 3 << 20;
// The tile schedule (kernels/norm_tile.cuh) runs a row on threads_per_row / kTileLanesPerThread
// threads, each playing kTileLanesPerThread lanes of the row's reduction layout (the same
// chunks, sums and tree as threads_per_row threads: the same bits) with up to
// kTileMaxChunksPerLane chunks per lane in shared-memory slots. 4 lanes of 2 chunks make 8
// chunks per thread: the leaders' amortization of a row's fixed cost (~8 chunks per thread, one
// small CTA per row group). A row's tile threads fill whole warps, so rows of fewer than
// kTileMinThreadsPerRow lanes (N < 2048 at 16 bits) keep the registers schedule.
inline constexpr int kTileLanesPerThread = 4;
// The registers schedule may fold lanes too (kernels/norm_row_group.cuh): 2 a thread, where its
// rows have vector I/O, one reduction (the RMSNorm family) and at least kRegistersFoldMinLanes
// lanes (core/plan.cpp, registers_fold, says why from there).
inline constexpr int kRegistersLanesPerThread = 2;
inline constexpr int kRegistersFoldMinLanes = 512;
static_assert(kRegistersFoldMinLanes >= 32 * kRegistersLanesPerThread,
              "a folded row's threads fill whole warps (device::folded_row_reduce)");
inline constexpr int kTileMaxChunksPerLane = 2;
inline constexpr int kTileSlotsPerThread = kTileLanesPerThread * kTileMaxChunksPerLane;
inline constexpr int kTileMinThreadsPerRow = 32 * kTileLanesPerThread;
inline constexpr int kTileMaxThreads = kMaxThreadsPerRow / kTileLanesPerThread;
// A tile or cluster thread holds its chunks of the weight in registers from before its
// reduction to its store (NormPlan::weight_held_chunks; read after the reduction, the weight
// lengthens every row's tail: docs/kernels.md, "tile"). 16-bit rmsnorm rows are compiled for
// 64 registers a thread (kTileThreadsPerSm: 1024 threads an SM), of which a 16-bit weight's
// chunks take 32. A float32 weight's take 64: held whole, its kernels are compiled for 128
// (kHeldWideWeightThreadsPerSm: 512 threads an SM); held half, within the 64, the other half
// read at the store.
inline constexpr int kTileThreadsPerSm = 1024;
inline constexpr int kHeldWideWeightThreadsPerSm = 512;
// Long rows are cut into slices of kSliceChunks chunks (16384 elements of a 16-bit type, 8192 of
// float32: 32 KB), each reduced like a row of that length (1024 lanes of 2 chunks), and the row's
// sum is the slices' sums added in slice order. A row of at most kSliceChunks chunks is one slice.
// So a long row's bits are fixed by N like any row's, and its slices can be summed apart: by the
// CTAs of a cluster (kCluster), or one after another by one CTA (kTwoPass).
inline constexpr int kSliceChunks = kTileMaxChunksPerLane * kMaxThreadsPerRow;
// A cluster has at most 16 CTAs (Hopper's limit with the non-portable cluster size opted into;
// 8 portably). A CTA holds one slice (256 threads), or two (512 threads, two tiles side by side)
// for rows of more than 16 slices: up to 32 slices, N = 524288 at 16 bits, 262144 at float32.
inline constexpr int kMaxClusterCtas = 16;
inline constexpr int kPortableClusterCtas = 8;
inline constexpr int kMaxSlicesPerClusterCta = 2;
inline constexpr int kMaxClusterSlices = kMaxClusterCtas * kMaxSlicesPerClusterCta;
// Slices per cluster CTA: make_plan() pairs them past kMaxClusterCtas slices, and for the fused
// op from kFusedPairsMinSlicesPerSm slices a batch per SM, or, in clusters of at most
// kFusedPairsWaveMaxClusterCtas paired CTAs, where the paired grid's last wave is at least
// kFusedPairsMinLastWavePercent full (core/plan.cpp, cluster_slices_per_cta); plan_violation
// takes one or two a CTA, its CTAs at most kMaxClusterCtas.
inline constexpr int kFusedPairsMinSlicesPerSm = 16;
inline constexpr int kFusedPairsWaveMaxClusterCtas = 2;
inline constexpr int kFusedPairsMinLastWavePercent = 80;
// Static shared memory of the tile kernel: the sums of up to 32 lane warps, float64 at most, for
// each of up to two reductions (LayerNorm's mean, then its squared deviations).
inline constexpr int kTileMaxReductions = 2;
inline constexpr int kTileStaticSmemBytes =
    kTileMaxReductions * kTileMaxThreads * kTileLanesPerThread / 32 * 8;
// Static shared memory of the cluster kernel, for each of up to two reductions (LayerNorm's):
// the lane-warp sums of up to two slices and the row's slice sums, float64 at most.
inline constexpr int kClusterMaxThreads = kTileMaxThreads * kMaxSlicesPerClusterCta;
inline constexpr int kClusterStaticSmemBytes =
    kTileMaxReductions *
    (kClusterMaxThreads * kTileLanesPerThread / 32 * 8 + kMaxClusterSlices * 8);
// Row groups per SM from which rmsnorm takes the tile schedule; below, the registers schedule
// (one lane per thread: the shortest path through a row) is faster. Measured on the H200
// (a schedule sweep, bf16): at 2 groups per SM registers won (N=4096, M=512: 3.90 against
// 4.51 us; N=7168, M=256: 3.94 against 4.27), at 4 the tile did (N=4096, M=1024: 6.29 against
// 6.73; N=7168, M=512: 5.61 against 6.55).
inline constexpr int64_t kTileMinGroupsPerSm = 3;
// Static shared memory of the streamed kernel (two rows of warp partial sums, float64 at most),
// which the opt-in per-block limit includes.
inline constexpr int kStreamedStaticSmemBytes = 2 * 32 * 8;

struct NormPlan {
  KernelVariant variant = KernelVariant::kCpu;
  int chunk_elems = 8;         // elements of x in one 16-byte chunk: the unit of row ownership
  int64_t chunks_per_row = 0;  // ceil(N / chunk_elems)
  bool vector_io = false;   // chunks move as 16-byte vectors (every pointer, stride and N aligned)
  int threads_per_row = 1;  // a power of two; depends on (N, dtype) only: the reduction lanes
  // Reduction lanes one CUDA thread plays: kTileLanesPerThread for kTile and kCluster,
  // kRegistersLanesPerThread where kRowInRegisters folds (registers_fold in core/plan.cpp), else
  // 1. A row runs on threads_per_row / lanes_per_thread threads.
  int lanes_per_thread = 1;
  // Slices of the row's reduction layout (kSliceChunks chunks each): depends on (N, dtype) only.
  int slices = 1;
  int cluster_ctas = 0;  // kCluster: CTAs per cluster (one per slice); 0 otherwise
  // kTile, kCluster: chunks of the weight a thread holds in registers from before its reduction
  // (kTileSlotsPerThread, or half of them: a float32 weight on 16-bit rmsnorm cluster batches
  // past a wave; 0: LayerNorm), the rest read at the store; 0 otherwise.
  int weight_held_chunks = 0;
  // kRowInRegisters: register capacity per lane (1, 2 or 4; a thread holds lanes_per_thread
  // times that); kStreamed: shared-memory slots per thread
  // and stream (ceil(chunks_per_row / threads_per_row)); kTile: kTileSlotsPerThread shared-memory
  // slots; 0 for kTwoPass.
  int chunks_per_thread = 0;
  int rows_per_cta = 1;   // rows that share one CTA (a row group)
  int block_threads = 1;  // threads_per_row / lanes_per_thread * rows_per_cta
  int64_t grid = 0;       // CTAs (CUDA) or tasks (CPU); kStreamed: persistent, <= row groups
  int stages = 0;         // kStreamed: row groups in flight per CTA; 0 otherwise
  int smem_bytes = 0;     // dynamic shared memory per CTA (kStreamed, kTile)
  bool use_pdl = false;   // programmatic dependent launch (see KernelImage)
  // With PDL: whether each CTA lets the next PDL launch start its CTAs as soon as its own wait
  // returns (true), or the next launch starts only as this grid's CTAs exit (false; the streamed
  // kernel signals after its last row instead). See pdl_early_trigger_pays().
  bool pdl_early_trigger = false;
  // CTAs of this plan's kernel one SM holds at once (its registers, shared memory, threads and
  // the SM's limits; kernel_ctas_per_sm()); 0 where the image's registers are not known.
  int ctas_per_sm = 0;
  // The image of the plan's kernel the CUDA runtime runs on the device (0: not asked, CPU).
  int image_sass_arch = 0;
  int image_ptx_arch = 0;
};

// What the CUDA runtime loads for one kernel on one device (cudaFuncAttributes): the SASS
// architecture that runs and the virtual (PTX) architecture the kernel was compiled for. sm_90a
// SASS reads 90/90; compute_90 PTX JIT-compiled on an sm_120 GPU reads 120/90; compute_80 PTX
// JIT-compiled on an sm_90 GPU reads 90/80. The kernels' `griddepcontrol` exists only in code
// compiled for 90 and later (device/async.cuh): with an older PTX the wait compiles to nothing,
// and a PDL launch would let the kernel race the previous one. So PDL follows the image, never
// the device's capability alone.
struct KernelImage {
  int sass_arch = 0;
  int ptx_arch = 0;
  int registers = 0;          // per thread (cudaFuncAttributes::numRegs); 0: not known
  int static_smem_bytes = 0;  // the kernel's static shared memory (sharedSizeBytes)

  bool has_griddepcontrol() const { return ptx_arch >= 90 && sass_arch >= 90; }
};

// Looks up the image of the kernel a plan selects (the binding asks the CUDA runtime, once per
// kernel and device; tests pass a function). Called with the finished schedule, before PDL.
using KernelImageOf = std::function<KernelImage(const NormPlan&)>;

// Threads that share one row of `cols` elements of `x_dtype`: the batch-invariant part of the plan.
int threads_per_row_for(int64_t cols, DType x_dtype);
// Slices of a row's reduction layout (1 up to kSliceChunks chunks): batch-invariant too.
int slices_for(int64_t cols, DType x_dtype);

// Why `problem` has no CUDA schedule on `device` (a message naming N and the limit), or "" when
// it has one: LayerNorm has no two_pass kernel, so its rows longer than one slice (16-bit N >
// 16384, float32 N > 8192) need the cluster (sm_90+, vector I/O, at most kMaxClusterSlices
// slices). The binding raises it as an argument error before planning.
std::string cuda_forward_unsupported(const NormProblem& problem, const DeviceInfo& device);

// Pure function of its inputs (and of what `image_of` answers). Throws std::logic_error if the
// plan it built breaks an invariant (a bug in the planner, never a user error: inputs are
// validated before planning). Without `image_of` the image is unknown and PDL is never planned.
NormPlan make_plan(const NormProblem& problem, const DeviceInfo& device,
                   const LaunchOptions& options = {}, const KernelImageOf& image_of = nullptr);

// Registers are allocated per warp in units of this many (every architecture from sm_50 through
// sm_120: the CUDA occupancy calculator's "register allocation unit size").
inline constexpr int kRegisterAllocationUnit = 256;

// CTAs of `block_threads` threads with `smem_bytes` of dynamic shared memory that one SM holds at
// once, for a kernel image of known registers (0 when they are not known): the CUDA occupancy
// rule, registers allocated per warp in units of kRegisterAllocationUnit.
int kernel_ctas_per_sm(const KernelImage& image, int block_threads, int smem_bytes,
                       const DeviceInfo& device);

// Whether a PDL plan should let the next launch start its CTAs as soon as its own wait returns
// (see the definition for the measurements behind the rule).
bool pdl_early_trigger_pays(const NormPlan& plan, const DeviceInfo& device);

// Dynamic shared memory of a streamed plan: the weight slots plus `stages` stages.
int64_t streamed_smem_bytes(const NormProblem& problem, int chunks_per_thread, int block_threads,
                            int stages);

// Dynamic shared memory of a tile or cluster plan: kTileSlotsPerThread 16-byte slots per thread and
// stream (x, and the fused op's residual). The weight waits in registers (RMSNorm) or is read at
// the store (LayerNorm's weight and bias): no slot.
int64_t tile_smem_bytes(const NormProblem& problem, int block_threads);

// Empty if `plan` is consistent with `problem` and launchable on `device`, otherwise the first
// broken invariant. Launchable: the plan names an entry of the kernels the CUDA dispatch
// instantiates (core/kernel_table.h, forward_kernel_entry) and fits that entry's launch limits.
std::string plan_violation(const NormPlan& plan, const NormProblem& problem,
                           const DeviceInfo& device);

// A plan as named values: what oink.explain() returns (its Python Plan has exactly these fields,
// tests/python/test_python_surface.py) and what describe() prints. Names, in order:
inline constexpr std::array<const char*, 5> kPlanTextFields = {"op", "variant", "device", "x_dtype",
                                                               "weight_dtype"};
inline constexpr std::array<const char*, 25> kPlanNumberFields = {"M",
                                                                  "N",
                                                                  "ld_x",
                                                                  "ld_residual",
                                                                  "row_dims",
                                                                  "chunk_elems",
                                                                  "vector_io",
                                                                  "threads_per_row",
                                                                  "lanes_per_thread",
                                                                  "slices",
                                                                  "slice_chunks",
                                                                  "cluster_ctas",
                                                                  "weight_held_chunks",
                                                                  "chunks_per_thread",
                                                                  "rows_per_cta",
                                                                  "block_threads",
                                                                  "grid",
                                                                  "stages",
                                                                  "persistent",
                                                                  "smem_bytes",
                                                                  "pdl",
                                                                  "pdl_early_trigger",
                                                                  "ctas_per_sm",
                                                                  "image_sass",
                                                                  "image_ptx"};
// The two lists (sizes and x strides over the leading dimensions walked per row, outermost
// first) come after the numbers, under these names.
inline constexpr std::array<const char*, 2> kPlanListFields = {"row_sizes", "x_strides"};

struct PlanFacts {
  std::array<std::string, kPlanTextFields.size()> text;
  std::array<int64_t, kPlanNumberFields.size()> numbers;  // flags are 0 or 1
  std::array<std::vector<int64_t>, kPlanListFields.size()> lists;
};

PlanFacts plan_facts(const NormPlan& plan, const NormProblem& problem, const DeviceInfo& device);

// One line of `key=value` pairs from plan_facts(), for messages and traces.
std::string describe(const NormPlan& plan, const NormProblem& problem, const DeviceInfo& device);

}  // namespace oink
