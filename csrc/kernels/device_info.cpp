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
  }
  return info;
}

}  // namespace oink
