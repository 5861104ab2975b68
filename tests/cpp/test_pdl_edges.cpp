// The edges a PDL launch captured into a CUDA graph takes from the nodes it depends on.
#include <gtest/gtest.h>

#include "core/pdl_edges.h"

namespace oink {
namespace {

TEST(PdlCaptureEdges, AnotherLibrarysKernelLetsTheLaunchStartOnceItsBlocksHaveStarted) {
  // A cuBLAS GEMM before the norm: it may never signal, so the edge leaves from its
  // launch-completion port, and the launch sets the stream's dependencies itself.
  const auto edges = pdl_capture_edges({Upstream::kForeignKernel});
  EXPECT_EQ(edges, std::vector<PdlEdge>{PdlEdge::kAfterAllBlocksStart});
  EXPECT_TRUE(pdl_edges_change(edges));
}

TEST(PdlCaptureEdges, OinksOwnKernelKeepsTheSignalThePlannerPlaced) {
  const auto edges = pdl_capture_edges({Upstream::kOinkKernel});
  EXPECT_EQ(edges, std::vector<PdlEdge>{PdlEdge::kAfterSignal});
  EXPECT_FALSE(pdl_edges_change(edges));  // the PDL launch attribute says the same
}

TEST(PdlCaptureEdges, NodesThatAreNotKernelsAndEdgesAlreadyAnnotatedAreLeftAlone) {
  EXPECT_EQ(pdl_capture_edges({Upstream::kOther, Upstream::kAnnotated}),
            (std::vector<PdlEdge>{PdlEdge::kKeep, PdlEdge::kKeep}));
  EXPECT_FALSE(pdl_edges_change(pdl_capture_edges({Upstream::kOther, Upstream::kAnnotated})));
  EXPECT_FALSE(pdl_edges_change(pdl_capture_edges({})));  // a capture's first node
}

TEST(PdlCaptureEdges, AJoinOfSeveralNodesTakesEachItsOwnEdgeInOrder) {
  // Streams joined before the norm (an event's wait): one edge a node, the same order.
  const auto edges = pdl_capture_edges(
      {Upstream::kOther, Upstream::kOinkKernel, Upstream::kForeignKernel, Upstream::kAnnotated});
  EXPECT_EQ(edges, (std::vector<PdlEdge>{PdlEdge::kKeep, PdlEdge::kAfterSignal,
                                         PdlEdge::kAfterAllBlocksStart, PdlEdge::kKeep}));
  EXPECT_TRUE(pdl_edges_change(edges));
}

}  // namespace
}  // namespace oink
