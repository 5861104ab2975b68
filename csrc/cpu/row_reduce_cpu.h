// The CPU kernels of the reduce-then-map row ops (core/row_reduce.h): float64 math, each result
// rounded once to its type, a row's sums in an order fixed by N alone (cpu/host_elem.h,
// lane_sum). Every dtype, float64 included. Rows [begin, end): the binding splits the rows over
// threads (torch::stable::parallel_for), each row's result independent of the split.
#pragma once

#include <cstdint>

#include "core/row_reduce.h"

namespace oink::cpu {

// softmax and softmax_backward (cpu/softmax_cpu.cpp).
void softmax_rows(const ReduceProblem& problem, const ReduceArgs& args, int64_t begin, int64_t end);

// cross_entropy, cross_entropy_backward and scale_gradient_ (cpu/cross_entropy_cpu.cpp).
void cross_entropy_rows(const ReduceProblem& problem, const ReduceArgs& args, int64_t begin,
                        int64_t end);

}  // namespace oink::cpu
