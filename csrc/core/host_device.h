// OINK_HOST_DEVICE marks the few core functions that kernels share with host code (row offsets,
// fast division): one definition, compiled for the host everywhere and for the device by nvcc.
#pragma once

#if defined(__CUDACC__)
#define OINK_HOST_DEVICE __host__ __device__ __forceinline__
#define OINK_UNROLL _Pragma("unroll")
#else
#define OINK_HOST_DEVICE inline
#define OINK_UNROLL  // loops over kMaxRowDims: the host compiler unrolls them on its own
#endif
