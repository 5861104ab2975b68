// Division of row indices by a divisor fixed per call, as a multiply and a shift: a kernel that
// maps row r onto several leading dimensions divides once per dimension and row, and a 32-bit
// integer division costs about 20 instructions on the GPU, this about 4.
//
// Round-up method (Granlund and Montgomery, 1994): with l = ceil(log2 d) and
// m = floor(2^32 * (2^l - d) / d) + 1, which fits in 32 bits, q = (umulhi(m, n) + n) >> l for every
// n < 2^31 (the sum cannot overflow 32 bits there). Rows are < 2^31 (one CUDA grid, checked by the
// binding). Tested against plain division on the CPU (tests/cpp/test_rows.cpp).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace oink {

struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;

  FastDivmod() = default;
  // Host only. Precondition: 1 <= d < 2^31.
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    multiplier =
        static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }

  // Precondition: n < 2^31.
  OINK_HOST_DEVICE uint32_t quotient(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(multiplier, n);
#else
    const auto hi = static_cast<uint32_t>((uint64_t{multiplier} * n) >> 32);
#endif
    return (hi + n) >> shift;
  }
  OINK_HOST_DEVICE void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = quotient(n);
    r = n - q * divisor;
  }
};

}  // namespace oink
