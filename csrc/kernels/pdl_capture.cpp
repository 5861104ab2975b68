#include "kernels/pdl_capture.h"

#include <vector>

#include "core/pdl_edges.h"

namespace oink {
namespace {

// The node of oink's last captured PDL launch, per thread (a stream is captured from one thread,
// unless capture mode is relaxed; a node another thread made reads as another library's, which
// only starts the launch earlier).
struct LastLaunch {
  unsigned long long capture = 0;
  cudaGraphNode_t node = nullptr;
};
thread_local LastLaunch last_launch;

struct Capture {
  unsigned long long id = 0;
  const cudaGraphNode_t* nodes = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t count = 0;
};

// The capture queries with edge data: CUDA 12.3's _v3/_v2 names, CUDA 13's plain ones. Older
// runtimes have no edge data: captured launches keep the PDL attribute there.
#if CUDART_VERSION >= 13000
constexpr bool kEdgeData = true;
cudaError_t capture_info(cudaStream_t stream, cudaStreamCaptureStatus* status, Capture* capture) {
  return cudaStreamGetCaptureInfo(stream, status, &capture->id, nullptr, &capture->nodes,
                                  &capture->edges, &capture->count);
}
cudaError_t set_dependencies(cudaStream_t stream, cudaGraphNode_t* nodes,
                             const cudaGraphEdgeData* edges, size_t count) {
  return cudaStreamUpdateCaptureDependencies(stream, nodes, edges, count,
                                             cudaStreamSetCaptureDependencies);
}
#elif CUDART_VERSION >= 12030
constexpr bool kEdgeData = true;
cudaError_t capture_info(cudaStream_t stream, cudaStreamCaptureStatus* status, Capture* capture) {
  return cudaStreamGetCaptureInfo_v3(stream, status, &capture->id, nullptr, &capture->nodes,
                                     &capture->edges, &capture->count);
}
cudaError_t set_dependencies(cudaStream_t stream, cudaGraphNode_t* nodes,
                             const cudaGraphEdgeData* edges, size_t count) {
  return cudaStreamUpdateCaptureDependencies_v2(stream, nodes, edges, count,
                                                cudaStreamSetCaptureDependencies);
}
#else
constexpr bool kEdgeData = false;
cudaError_t capture_info(cudaStream_t, cudaStreamCaptureStatus*, Capture*) {
  return cudaErrorNotSupported;
}
cudaError_t set_dependencies(cudaStream_t, cudaGraphNode_t*, const cudaGraphEdgeData*, size_t) {
  return cudaErrorNotSupported;
}
#endif

// True while `stream` captures; its dependency set in `capture`.
bool capturing(cudaStream_t stream, Capture* capture) {
  if (!kEdgeData) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (capture_info(stream, &status, capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

bool annotated(const cudaGraphEdgeData& e) {
  return e.from_port != 0 || e.to_port != 0 || e.type != 0;
}

cudaGraphEdgeData edge_data(PdlEdge edge, const cudaGraphEdgeData& kept) {
  cudaGraphEdgeData data{};
  switch (edge) {
    case PdlEdge::kKeep:
      return kept;
    case PdlEdge::kAfterSignal:
      data.from_port = cudaGraphKernelNodePortProgrammatic;
      break;
    case PdlEdge::kAfterAllBlocksStart:
      data.from_port = cudaGraphKernelNodePortLaunchCompletion;
      break;
  }
  data.type = cudaGraphDependencyTypeProgrammatic;
  return data;
}

}  // namespace

CapturedPdl prepare_pdl_capture(cudaStream_t stream) {
  Capture capture;
  if (!capturing(stream, &capture)) return CapturedPdl::kNotCapturing;
  std::vector<Upstream> upstream(capture.count, Upstream::kOther);
  for (size_t i = 0; i < capture.count; ++i) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    if (capture.edges != nullptr && annotated(capture.edges[i])) {
      upstream[i] = Upstream::kAnnotated;
    } else if (cudaGraphNodeGetType(capture.nodes[i], &type) != cudaSuccess) {
      (void)cudaGetLastError();
    } else if (type == cudaGraphNodeTypeKernel) {
      const bool ours = last_launch.capture == capture.id && last_launch.node == capture.nodes[i];
      upstream[i] = ours ? Upstream::kOinkKernel : Upstream::kForeignKernel;
    }
  }
  const std::vector<PdlEdge> edges = pdl_capture_edges(upstream);
  if (!pdl_edges_change(edges)) return CapturedPdl::kAsUsual;
  // Copies: the runtime's arrays are valid only until the next call on the stream.
  std::vector<cudaGraphNode_t> nodes(capture.nodes, capture.nodes + capture.count);
  std::vector<cudaGraphEdgeData> data(capture.count);
  for (size_t i = 0; i < capture.count; ++i) {
    data[i] =
        edge_data(edges[i], capture.edges != nullptr ? capture.edges[i] : cudaGraphEdgeData{});
  }
  if (set_dependencies(stream, nodes.data(), data.data(), nodes.size()) != cudaSuccess) {
    (void)cudaGetLastError();
    return CapturedPdl::kAsUsual;
  }
  return CapturedPdl::kEdgesSet;
}

void note_captured_pdl_launch(cudaStream_t stream) {
  Capture capture;
  if (capturing(stream, &capture) && capture.count == 1) {
    last_launch = {capture.id, capture.nodes[0]};
  }
}

}  // namespace oink
