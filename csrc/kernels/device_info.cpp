// The device side of planning: DeviceInfo read from the device, and plans made with the CUDA
// runtime's answer about the kernel images (kernel_image in norm_forward.cu).
#include <array>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/launch.h"

namespace oink {

DeviceInfo cuda_device_info(int index) {
  static std::mutex mutex;
  static std::array<DeviceInfo, 64> cache{};
  if (index < 0 || index >= static_cast<int>(cache.size())) {
    throw std::out_of_range("oink: CUDA device index " + std::to_string(index) + " out of range");
  }
  std::lock_guard<std::mutex> lock(mutex);
  DeviceInfo& info = cache[index];
  if (info.cc_major == 0) {
    cudaDeviceProp prop{};
    const cudaError_t err = cudaGetDeviceProperties(&prop, index);
    if (err != cudaSuccess) {
      throw std::runtime_error(std::string("oink: cudaGetDeviceProperties failed: ") +
                               cudaGetErrorString(err));
    }
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.sm_count = prop.multiProcessorCount;
    info.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    info.max_blocks_per_sm = prop.maxBlocksPerMultiProcessor;
    info.max_smem_per_block = static_cast<int>(prop.sharedMemPerBlockOptin);
    info.max_smem_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
    info.reserved_smem_per_block = static_cast<int>(prop.reservedSharedMemPerBlock);
    info.registers_per_sm = prop.regsPerMultiprocessor;
  }
  return info;
}

namespace {

// Whether the runtime's answer about a kernel image means that this build has no code for the
// device. Anything else (an error left by an earlier kernel, which CUDA keeps for the context)
// must not send the user off to rebuild.
bool missing_kernel_image(cudaError_t err) {
  return err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction ||
         err == cudaErrorUnsupportedPtxVersion || err == cudaErrorInvalidPtx ||
         err == cudaErrorJitCompilerNotFound;
}

}  // namespace

NormPlan plan_on_device(const NormProblem& problem, const DeviceInfo& info, int device,
                        const LaunchOptions& options) {
  return make_plan(problem, info, options, [&](const NormPlan& schedule) {
    KernelImage image;
    const cudaError_t err = kernel_image(schedule, problem, device, &image);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // leave no error pending for the caller's next CUDA call
      const std::string where = "cuda:" + std::to_string(device) + " (sm_" +
                                std::to_string(info.cc_major) + std::to_string(info.cc_minor) + ")";
      if (!missing_kernel_image(err)) {
        throw std::runtime_error("oink: CUDA failed before oink's kernel ran on " + where + ": " +
                                 cudaGetErrorString(err) +
                                 " (an error an earlier kernel left on the device, if that is "
                                 "what it says: CUDA keeps it for the process)");
      }
      throw std::runtime_error("oink: no kernel image of this build runs on " + where + ": " +
                               cudaGetErrorString(err) +
                               ". This build embeds " OINK_CUDA_TARGETS
                               "; rebuild oink with the CUDA toolkit for this GPU (CMake option "
                               "OINK_CUDA_GENCODE)");
    }
    return image;
  });
}

}  // namespace oink
