// PDL launches captured into a CUDA graph: their edges from the nodes before them
// (core/pdl_edges.h says which and why). Host code over the CUDA runtime's capture state.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace oink {

enum class CapturedPdl : uint8_t {
  kNotCapturing,  // an ordinary stream launch: the PDL attribute does it
  kAsUsual,       // captured, edges left to the PDL attribute
  kEdgesSet,      // captured, the stream's dependencies set with their edges: no attribute
};

// Before a PDL launch on `stream`. Never fails: a query or update the runtime refuses leaves
// the capture as it was (kAsUsual) and clears the error it set.
CapturedPdl prepare_pdl_capture(cudaStream_t stream);

// After a captured PDL launch succeeded: the node it made is oink's (its signal is planned).
void note_captured_pdl_launch(cudaStream_t stream);

}  // namespace oink
