// Which GPUs a build's kernel images serve, from the list of nvcc targets it embedded
// ("sm_80,sm_90a,sm_100a,sm_103a,sm_120,compute_90"): a pure function of the list and a compute
// capability, so availability can be answered without creating a CUDA context (vLLM asks in
// processes that must not initialise CUDA) and tested on the CPU. The CUDA runtime's own answer
// at launch (kernels/launch.h, kernel_image) is what plans PDL.
#pragma once

#include <string>
#include <vector>

namespace oink {

struct CudaTarget {
  bool ptx = false;  // compute_XY: PTX the driver compiles for the device at load time
  int arch = 0;      // XY, e.g. 90, 100, 120
  char suffix = 0;   // 'a' (this exact GPU only), 'f' (its family: same major, minor >= Y) or 0
};

// Parses a ';'- or ','-separated list; unknown items are skipped.
std::vector<CudaTarget> parse_cuda_targets(const std::string& list);

// True if one of `targets` runs on a GPU of capability major.minor:
//   sm_XY    SASS, same major and minor >= Y       sm_XYa / compute_XYa   exactly XY
//   sm_XYf   SASS, same major and minor >= Y       compute_XY             PTX, any capability >= XY
bool targets_serve(const std::vector<CudaTarget>& targets, int major, int minor);

}  // namespace oink
