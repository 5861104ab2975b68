// What must happen once per kernel and device before a kernel may launch: the opt-ins of shared
// memory above 48 KiB and of clusters above the portable 8 CTAs (norm_forward.cu,
// norm_backward.cu, row_reduce.cu).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace oink {

// Runs `setup(device)` on the current device unless it has succeeded there before for the owner
// of `devices_done` (one flag per kernel: see below); only a success is remembered.
template <typename Setup>
cudaError_t once_per_device(std::atomic<uint64_t>& devices_done, Setup setup) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (devices_done.load(std::memory_order_acquire) & bit) return cudaSuccess;
  err = setup(device);
  if (err == cudaSuccess) devices_done.fetch_or(bit, std::memory_order_release);
  return err;
}

// Shared memory above 48 KiB, static and dynamic together, must be opted into, per kernel and
// device. Done once per kernel and device, to the device's limit, whatever this plan needs, so
// that every later plan fits. (On the H200 a plan of exactly 48 KiB of dynamic shared memory
// plus the kernel's 512 static bytes failed to launch before the first opt-in.) The flag lives in
// a function templated on the kernel itself: every instantiation has the same pointer type, so a
// static keyed on that type would be shared by all of them.
template <auto kKernel>
cudaError_t allow_large_smem() {
  static std::atomic<uint64_t> devices_done{0};
  return once_per_device(devices_done, [](int device) {
    int limit = 0;
    cudaError_t err =
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err != cudaSuccess) return err;
    cudaFuncAttributes attributes{};
    err = cudaFuncGetAttributes(&attributes, kKernel);
    if (err != cudaSuccess) return err;
    // The opt-in limit covers static and dynamic shared memory together.
    return cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                limit - static_cast<int>(attributes.sharedSizeBytes));
  });
}

// Clusters of more than the portable 8 CTAs (Hopper runs 16 with this attribute set).
template <auto kKernel>
cudaError_t allow_non_portable_clusters() {
  static std::atomic<uint64_t> devices_done{0};
  return once_per_device(devices_done, [](int) {
    return cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  });
}

// The kernel a plan runs, and what must happen once before it may launch.
struct SelectedKernel {
  const void* function = nullptr;      // nullptr: the plan names no instantiated kernel
  cudaError_t (*prepare)() = nullptr;  // shared-memory and cluster kernels: the opt-ins
};

template <typename Kernel>
SelectedKernel kernel_of(Kernel* kernel, cudaError_t (*prepare)() = nullptr) {
  return {reinterpret_cast<const void*>(kernel), prepare};
}

// A cluster kernel with dynamic shared memory: both opt-ins.
template <auto kKernel>
cudaError_t allow_large_clusters() {
  const cudaError_t err = allow_large_smem<kKernel>();
  return err != cudaSuccess ? err : allow_non_portable_clusters<kKernel>();
}

}  // namespace oink
