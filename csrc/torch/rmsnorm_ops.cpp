// oink::rmsnorm, oink::fused_add_rms_norm and oink::explain for CPU and CUDA tensors:
// validate -> NormProblem -> make_plan -> launch. Fake (meta) kernels live in python/oink/_fake.py
// because they must work on symbolic shapes, which C++ kernels cannot read.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/plan.h"
#include "cpu/norm_cpu.h"
#include "torch/checks.h"

#ifdef OINK_WITH_CUDA
#include <torch/csrc/stable/accelerator.h>

#include "kernels/launch.h"
#endif

namespace oink {
namespace {

// Process-wide launch options (oink.set_pdl). Read once per call, at launch (or capture) time.
std::atomic<bool> g_allow_pdl{true};

LaunchOptions launch_options() {
  LaunchOptions options;
  options.allow_pdl = g_allow_pdl.load(std::memory_order_relaxed);
  return options;
}

DeviceInfo device_info_of(const Tensor& x) {
  if (x.is_cpu()) return DeviceInfo{};
#ifdef OINK_WITH_CUDA
  return cuda_device_info(x.get_device_index());
#else
  throw std::runtime_error("oink was built without CUDA support; got a CUDA tensor");
#endif
}

// Output with x's shape and strides (GUIDE §1): one stable layout for torch.compile and graphs.
Tensor empty_like_strided(const Tensor& x) {
  AtenTensorHandle handle = nullptr;
  const auto sizes = x.sizes();
  const auto strides = x.strides();
  int32_t device_type = x.is_cuda() ? aoti_torch_device_type_cuda() : aoti_torch_device_type_cpu();
  int32_t dtype = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(x.get(), &dtype));
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(x.dim(), sizes.data(), strides.data(), dtype,
                                                  device_type,
                                                  x.is_cuda() ? x.get_device_index() : 0, &handle));
  return Tensor(handle);
}

void run(const NormProblem& problem, const NormArgs& args, const Tensor& x) {
  if (problem.rows == 0 || problem.cols == 0) return;
  const DeviceInfo device = device_info_of(x);
  const NormPlan plan = make_plan(problem, device, launch_options());
  if (plan.variant == KernelVariant::kCpu) {
    // Enough elements per task that scheduling costs stay small next to the work.
    const int64_t grain = std::max<int64_t>(1, 32768 / problem.cols);
    torch::stable::parallel_for(0, problem.rows, grain, [&](int64_t begin, int64_t end) {
      norm_rows_cpu(problem, args, begin, end);
    });
    return;
  }
#ifdef OINK_WITH_CUDA
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
  const cudaError_t err = launch_norm(plan, problem, args, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // leave no error pending for the caller's next CUDA call
    throw std::runtime_error(std::string("oink.") + op_name(problem.op) +
                             ": kernel launch failed: " + cudaGetErrorString(err) + " (" +
                             describe(plan, problem, device) + ")");
  }
#endif
}

Tensor rmsnorm(Tensor x, std::optional<Tensor> weight, double eps) {
  NormProblem problem = check_norm_inputs(NormOp::kRmsNorm, x, weight, nullptr, eps);
  Tensor out = empty_like_strided(x);
  problem.out_align = pointer_alignment(out.data_ptr());
  NormArgs args;
  args.x = x.data_ptr();
  args.out = out.data_ptr();
  args.weight = weight ? weight->data_ptr() : nullptr;
  args.eps = static_cast<float>(eps);
  run(problem, args, x);
  return out;
}

void fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, double eps) {
  const NormProblem problem =
      check_norm_inputs(NormOp::kFusedAddRmsNorm, x, weight, &residual, eps);
  NormArgs args;
  args.x = x.data_ptr();
  args.out = x.data_ptr();
  args.residual = residual.data_ptr();
  args.weight = weight.data_ptr();
  args.eps = static_cast<float>(eps);
  run(problem, args, x);
}

std::string explain(std::string op, Tensor x, std::optional<Tensor> weight,
                    std::optional<Tensor> residual, double eps) {
  NormOp norm_op;
  if (op == "rmsnorm") {
    norm_op = NormOp::kRmsNorm;
  } else if (op == "fused_add_rms_norm") {
    norm_op = NormOp::kFusedAddRmsNorm;
    if (!residual) throw ArgError("explain", "residual", "is required for " + op, "None");
    if (!weight) throw ArgError("explain", "weight", "is required for " + op, "None");
  } else {
    throw ArgError("explain", "op", "must be 'rmsnorm' or 'fused_add_rms_norm'", "'" + op + "'");
  }
  const NormProblem problem =
      check_norm_inputs(norm_op, x, weight, residual ? &*residual : nullptr, eps);
  // rmsnorm's output is a fresh allocation with x's strides: assume the allocator's alignment.
  const DeviceInfo device = device_info_of(x);
  return describe(make_plan(problem, device, launch_options()), problem, device);
}

bool set_pdl(bool enabled) { return g_allow_pdl.exchange(enabled); }

}  // namespace

// No tensor arguments: one kernel for every dispatch key.
STABLE_TORCH_LIBRARY_IMPL(oink, CompositeExplicitAutograd, m) {
  m.impl("set_pdl", TORCH_BOX(&set_pdl));
}

STABLE_TORCH_LIBRARY_IMPL(oink, CPU, m) {
  m.impl("rmsnorm", TORCH_BOX(&rmsnorm));
  m.impl("fused_add_rms_norm", TORCH_BOX(&fused_add_rms_norm));
  m.impl("explain", TORCH_BOX(&explain));
}

#ifdef OINK_WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(oink, CUDA, m) {
  m.impl("rmsnorm", TORCH_BOX(&rmsnorm));
  m.impl("fused_add_rms_norm", TORCH_BOX(&fused_add_rms_norm));
  m.impl("explain", TORCH_BOX(&explain));
}
#endif

}  // namespace oink
