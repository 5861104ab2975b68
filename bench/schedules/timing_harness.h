// The timing harness of the torch-free bench tools (the schedule sweep, the latency floors): the
// current device and a stream, and device time per launch as the benchmark measures it: `calls`
// launches captured in one CUDA graph, replayed kReplays times between CUDA events, median
// replay over `calls`.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/problem.h"
#include "kernels/launch.h"

namespace oink::bench {

inline constexpr int kReplays = 15;

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "oink bench tool: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

struct Device {
  cudaDeviceProp prop{};
  DeviceInfo info;
  cudaStream_t stream = nullptr;  // non-blocking
};

inline Device current_device() {
  Device d;
  int index = 0;
  check(cudaGetDevice(&index), "device");
  check(cudaGetDeviceProperties(&d.prop, index), "properties");
  d.info = cuda_device_info(index);
  check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "stream");
  return d;
}

// Rotating buffer sets of a problem: per set, x and a second [M, N] buffer (the output, or the
// fused op's residual); one weight, and one bias where the problem has one (LayerNorm's, float32
// as the binding passes it). Filled with 0x3f bytes (bfloat16 0.746).
struct Buffers {
  std::vector<void*> x, other;
  void* weight = nullptr;
  void* bias = nullptr;
};

inline Buffers allocate(const NormProblem& p, size_t sets) {
  const size_t bytes = static_cast<size_t>(p.rows) * p.cols * dtype_size(p.x_dtype);
  const size_t weight_bytes = static_cast<size_t>(p.cols) * dtype_size(p.w_dtype);
  Buffers b;
  for (size_t i = 0; i < sets; ++i) {
    void *x = nullptr, *other = nullptr;
    check(cudaMalloc(&x, bytes), "cudaMalloc x");
    check(cudaMalloc(&other, bytes), "cudaMalloc out/residual");
    check(cudaMemset(x, 0x3f, bytes), "memset");
    check(cudaMemset(other, 0x3f, bytes), "memset");
    b.x.push_back(x);
    b.other.push_back(other);
  }
  check(cudaMalloc(&b.weight, weight_bytes), "cudaMalloc weight");
  check(cudaMemset(b.weight, 0x3f, weight_bytes), "memset");
  if (p.has_bias) {
    const size_t bias_bytes = static_cast<size_t>(p.cols) * sizeof(float);
    check(cudaMalloc(&b.bias, bias_bytes), "cudaMalloc bias");
    check(cudaMemset(b.bias, 0x3f, bias_bytes), "memset");
  }
  return b;
}

inline void release(Buffers& b) {
  for (void* x : b.x) cudaFree(x);
  for (void* o : b.other) cudaFree(o);
  cudaFree(b.weight);
  cudaFree(b.bias);
  b = Buffers{};
}

// launch_calls() issues `calls` launches on `stream`; it runs once uncaptured (warm-up, and
// one-time attribute setting outside the capture), then once under capture. Median µs per
// launch, or a negative value if a launch failed.
template <typename LaunchCalls>
double median_us_per_call(LaunchCalls&& launch_calls, int calls, cudaStream_t stream) {
  if (launch_calls() != cudaSuccess) return -1;
  check(cudaStreamSynchronize(stream), "warm-up");
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  const cudaError_t launched = launch_calls();
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  if (launched != cudaSuccess) return -1;
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<float> ms;
  check(cudaGraphLaunch(exec, stream), "replay");
  for (int r = 0; r < kReplays; ++r) {
    check(cudaEventRecord(start, stream), "record");
    check(cudaGraphLaunch(exec, stream), "replay");
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 1000.0 * ms[ms.size() / 2] / calls;
}

}  // namespace oink::bench
