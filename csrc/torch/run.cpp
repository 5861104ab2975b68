// Planning and running a forward row op on its tensor's device (torch/run.h).
#include "torch/run.h"

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "cpu/norm_cpu.h"

#ifdef OINK_WITH_CUDA
#include <torch/csrc/stable/accelerator.h>

#include "kernels/launch.h"
#endif

namespace oink {
namespace {

// Process-wide launch options (oink.set_pdl). Read once per call, at launch (or capture) time.
std::atomic<bool> g_allow_pdl{true};

}  // namespace

bool exchange_allow_pdl(bool enabled) { return g_allow_pdl.exchange(enabled); }

LaunchOptions launch_options() {
  LaunchOptions options;
  options.allow_pdl = g_allow_pdl.load(std::memory_order_relaxed);
  return options;
}

#ifndef OINK_WITH_CUDA
namespace {
[[noreturn]] void no_cuda_kernels(const char* op, const Tensor& x) {
  throw std::runtime_error(
      std::string("oink.") + op + ": this oink was built without CUDA kernels (no nvcc when it " +
      "was built), so it cannot run on cuda:" + std::to_string(x.get_device_index()) +
      "; use a CPU tensor, or rebuild oink with the CUDA toolkit installed " +
      "(oink.cuda_available() tells which build this is)");
}
}  // namespace
#endif

// First thing in every op: a CUDA tensor needs a build with CUDA kernels.
void require_kernels_for(const char* op, const Tensor& x) {
#ifndef OINK_WITH_CUDA
  if (x.defined() && x.is_cuda()) no_cuda_kernels(op, x);
#else
  (void)op;
  (void)x;
#endif
}

// The plan of a call: the CPU's, or the device's with the runtime's kernel images.
NormPlan plan_call(const char* op, const NormProblem& problem, const Tensor& x) {
  require_kernels_for(op, x);
  if (x.is_cpu()) return make_plan(problem, DeviceInfo{}, launch_options());
#ifdef OINK_WITH_CUDA
  const int device = x.get_device_index();
  return plan_on_device(problem, cuda_device_info(device), device, launch_options());
#else
  no_cuda_kernels(op, x);
#endif
}

#ifdef OINK_WITH_CUDA
cudaStream_t current_stream_of(const Tensor& x) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

void check_launch(const char* op, cudaError_t err, const std::string& detail) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // leave no error pending for the caller's next CUDA call
  throw std::runtime_error(std::string("oink.") + op + ": kernel launch failed: " +
                           cudaGetErrorString(err) + (detail.empty() ? "" : " (" + detail + ")"));
}
#endif

DeviceInfo device_info_of(const Tensor& x) {
#ifdef OINK_WITH_CUDA
  if (x.is_cuda()) return cuda_device_info(x.get_device_index());
#else
  (void)x;
#endif
  return DeviceInfo{};
}

void run_forward(const char* op, const NormProblem& problem, const NormArgs& args,
                 const Tensor& x) {
  if (problem.rows == 0 || problem.cols == 0) return;
  if (x.is_cpu()) {
    // The CPU's layernorm has its own row loop (cpu/layernorm_cpu.h, torch/layernorm_ops.cpp).
    if (problem.op == NormOp::kLayerNorm) {
      throw std::logic_error("oink: run_forward runs layernorm on CUDA only");
    }
    // Enough elements per task that scheduling costs stay small next to the work.
    const int64_t grain = std::max<int64_t>(1, 32768 / problem.cols);
    torch::stable::parallel_for(0, problem.rows, grain, [&](int64_t begin, int64_t end) {
      norm_rows_cpu(problem, args, begin, end);
    });
    return;
  }
#ifdef OINK_WITH_CUDA
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const NormPlan plan = plan_call(op, problem, x);
  const cudaError_t err = launch_norm(plan, problem, args, current_stream_of(x));
  if (err != cudaSuccess) check_launch(op, err, describe(plan, problem, device_info_of(x)));
#else
  no_cuda_kernels(op, x);
#endif
}

}  // namespace oink
