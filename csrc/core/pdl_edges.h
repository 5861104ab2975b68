// Where a PDL launch captured into a CUDA graph may start, against each node it depends on.
//
// Launched into a stream, a PDL kernel starts once the kernel before it signals
// (griddepcontrol.launch_dependents) or ends. A kernel of another library that never signals
// makes that start late: between cuBLAS GEMMs that do not signal, oink's norm started 0.64 µs
// after the GEMM, a plain launch 0.26-0.29 µs after it (H200, decode/chain_trace.txt), and PDL
// cost 0.35-0.38 µs a norm there instead of saving it. In a graph, an edge can say more than a
// launch attribute: from a kernel node's launch-completion port, the dependent kernel may start
// once every block of the kernel before it has started, whatever that kernel signals, and its
// griddepcontrol.wait still waits for that kernel's end and memory (a programmatic edge). So
// captured oink launches take that edge from another library's kernel, and keep the
// signal-driven edge from oink's own kernels, whose signal the planner places
// (pdl_early_trigger_pays in core/plan.cpp). Measured in turns between GEMMs: 0.82x the norm's
// marginal cost with PDL (decode/ab_launch_completion.txt). Pure and CUDA-free: the binding reads
// the capture state and maps the answer onto cudaGraphEdgeData (kernels/pdl_capture.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace oink {

// What a captured launch depends on, one entry per node of the stream's dependency set.
enum class Upstream : uint8_t {
  kOther,          // not a kernel (a copy, a memset, an event's join, a host node...)
  kForeignKernel,  // another library's kernel (cuBLAS, PyTorch, ...)
  kOinkKernel,     // the kernel oink captured last on this stream
  kAnnotated,      // an edge that already carries data the capturing code set: left as it is
};

enum class PdlEdge : uint8_t {
  kKeep,                 // the edge as the capture has it (full completion, or its own data)
  kAfterSignal,          // programmatic: once every block has signalled or ended
  kAfterAllBlocksStart,  // programmatic, from the launch-completion port
};

// The edge a captured PDL launch takes from each node of its dependency set (same order).
std::vector<PdlEdge> pdl_capture_edges(const std::vector<Upstream>& upstream);

// Whether the launch sets the stream's dependencies itself (and goes without the PDL launch
// attribute, the edges saying it): only where some edge starts at the launch-completion port.
// Otherwise it launches with the attribute, as outside a graph.
bool pdl_edges_change(const std::vector<PdlEdge>& edges);

}  // namespace oink
