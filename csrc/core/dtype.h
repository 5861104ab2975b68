// Element types oink kernels understand. Host-only, torch-free.
#pragma once

#include <cstdint>

namespace oink {

// kFloat64: CPU tensors only (torch.autograd.gradcheck needs it); the checks reject it on CUDA.
enum class DType : uint8_t { kFloat16, kBFloat16, kFloat32, kFloat64 };

constexpr int dtype_size(DType t) {
  return t == DType::kFloat64 ? 8 : t == DType::kFloat32 ? 4 : 2;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
  }
  return "?";
}

}  // namespace oink
