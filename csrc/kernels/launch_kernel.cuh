// One kernel launch, with programmatic dependent launch when asked: the launch attribute that lets
// the kernel's griddepcontrol.wait overlap its start with the previous kernel's end, or, captured
// into a CUDA graph after another library's kernel, the graph edge that starts it once that
// kernel's blocks have all started (kernels/pdl_capture.h). Used by every launch of the
// library (norm_forward.cu, norm_backward.cu). The caller asks for PDL
// only for a kernel whose image holds griddepcontrol (core/plan.h, KernelImage).
#pragma once

#include <cuda_runtime.h>

#include "kernels/pdl_capture.h"

namespace oink {

// `kernel` is a __global__ function's address; `args` points at each of its parameters.
// cluster_x > 0: thread block clusters of cluster_x CTAs along x (grid.x a multiple of it).
inline cudaError_t launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes,
                                 bool pdl, cudaStream_t stream, void** args, int cluster_x = 0) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  const CapturedPdl captured = pdl ? prepare_pdl_capture(stream) : CapturedPdl::kNotCapturing;
  if (pdl && captured != CapturedPdl::kEdgesSet) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster_x > 0) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = static_cast<unsigned>(cluster_x);
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  config.attrs = count > 0 ? attributes : nullptr;
  config.numAttrs = count;
  const cudaError_t err = cudaLaunchKernelExC(&config, kernel, args);
  if (err == cudaSuccess && captured != CapturedPdl::kNotCapturing) {
    note_captured_pdl_launch(stream);
  }
  return err;
}

template <typename T>
struct NotDeduced {
  using type = T;
};

// The same for a typed kernel; the arguments convert to its parameter types.
template <typename... Params>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                          bool pdl, cudaStream_t stream,
                          typename NotDeduced<Params>::type... args) {
  void* pointers[] = {static_cast<void*>(&args)..., nullptr};
  return launch_kernel(reinterpret_cast<const void*>(kernel), grid, block, smem_bytes, pdl, stream,
                       pointers);
}

}  // namespace oink
