// compute-sanitizer synccheck on a cluster kernel with no divergent path, to tell its reports on
// oink's 16-CTA clusters (docs/kernels.md, "compute-sanitizer synccheck and 16-CTA clusters")
// from a divergence of oink's own: every thread of every warp runs every instruction below.
//
//   nvcc -arch=sm_90a -O3 -o /tmp/repro tools/synccheck_cluster_repro.cu
//   /tmp/repro CLUSTER_CTAS GRID_CTAS DYNAMIC_SMEM_BYTES      # e.g. 16 2112 50000
//   compute-sanitizer --tool synccheck /tmp/repro 16 2112 50000
//
// The kernel is the cluster schedule's synchronisation alone, on 256-thread CTAs: the early
// cluster arrive, a warp-shuffle sum, one CTA barrier, the cluster wait, one store into each CTA
// of the cluster (distributed shared memory), the cluster barrier. DYNAMIC_SMEM_BYTES limits the
// CTAs resident per SM as oink's slots do (50000: four).
#include <cooperative_groups.h>

#include <cstdio>
#include <cstdlib>

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kMaxClusterCtas = 16;

__global__ void cluster_sync_only(float* out) {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float cta_sums[kMaxClusterCtas];
  float v = static_cast<float>(threadIdx.x);
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float sum = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) sum += warp_sums[w];
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x < cluster.num_blocks()) {
    *cluster.map_shared_rank(&cta_sums[rank], threadIdx.x) = sum;
  }
  cluster.sync();
  float total = 0.f;
  for (unsigned c = 0; c < cluster.num_blocks(); ++c) total += cta_sums[c];
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CLUSTER_CTAS GRID_CTAS DYNAMIC_SMEM_BYTES\n", argv[0]);
    return 2;
  }
  const int cluster = std::atoi(argv[1]), grid = std::atoi(argv[2]), smem = std::atoi(argv[3]);
  if (cluster < 1 || cluster > kMaxClusterCtas || grid % cluster != 0 || smem < 0) {
    std::fprintf(stderr, "CLUSTER_CTAS in [1, %d] dividing GRID_CTAS, DYNAMIC_SMEM_BYTES >= 0\n",
                 kMaxClusterCtas);
    return 2;
  }
  float* out = nullptr;
  cudaMalloc(&out, grid * sizeof(float));
  cudaFuncSetAttribute(cluster_sync_only, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(cluster_sync_only, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.attrs = attr;
  config.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&config, cluster_sync_only, out);
  const cudaError_t finished = cudaDeviceSynchronize();
  // Every CTA's total is the same: the sum of 0..255 once per CTA of its cluster.
  float* host = static_cast<float*>(std::malloc(grid * sizeof(float)));
  cudaMemcpy(host, out, grid * sizeof(float), cudaMemcpyDeviceToHost);
  const float expected = 255.f * 256.f / 2.f * static_cast<float>(cluster);
  int wrong = 0;
  for (int i = 0; i < grid; ++i) wrong += host[i] != expected;
  std::printf("cluster %d, grid %d, smem %d: launch %s, run %s, %d wrong of %d\n", cluster, grid,
              smem, cudaGetErrorString(launched), cudaGetErrorString(finished), wrong, grid);
  std::free(host);
  cudaFree(out);
  return launched == cudaSuccess && finished == cudaSuccess && wrong == 0 ? 0 : 1;
}
