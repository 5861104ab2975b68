// One kernel launch, with programmatic dependent launch when asked: the launch attribute that lets
// the kernel's griddepcontrol.wait overlap its start with the previous kernel's end. Shared by the
// library's launches (rmsnorm.cu) and the latency-floor kernels of bench/schedules.
#pragma once

#include <cuda_runtime.h>

namespace oink {

template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                          bool pdl, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  if (pdl) {
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...);
}

}  // namespace oink
