#include "core/pdl_edges.h"

#include <algorithm>

namespace oink {

std::vector<PdlEdge> pdl_capture_edges(const std::vector<Upstream>& upstream) {
  std::vector<PdlEdge> edges;
  edges.reserve(upstream.size());
  for (const Upstream u : upstream) {
    switch (u) {
      case Upstream::kForeignKernel:
        edges.push_back(PdlEdge::kAfterAllBlocksStart);
        break;
      case Upstream::kOinkKernel:
        edges.push_back(PdlEdge::kAfterSignal);
        break;
      case Upstream::kOther:
      case Upstream::kAnnotated:
        edges.push_back(PdlEdge::kKeep);
        break;
    }
  }
  return edges;
}

bool pdl_edges_change(const std::vector<PdlEdge>& edges) {
  return std::any_of(edges.begin(), edges.end(),
                     [](PdlEdge e) { return e == PdlEdge::kAfterAllBlocksStart; });
}

}  // namespace oink
