// Element types oink kernels understand. Host-only, torch-free.
#pragma once

#include <cstdint>

namespace oink {

enum class DType : uint8_t { kFloat16, kBFloat16, kFloat32 };

constexpr int dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat32:
      return "float32";
  }
  return "?";
}

}  // namespace oink
