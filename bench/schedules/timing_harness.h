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
