// New tensors for the ops' results.
#include "torch/tensors.h"

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace oink {

namespace {

// The dtypes oink allocates, by name and element size (0: another code, not expected here).
struct DTypeFacts {
  std::string name;
  int64_t bytes;
};
DTypeFacts dtype_facts(int32_t code) {
  if (code == aoti_torch_dtype_float16()) return {"float16", 2};
  if (code == aoti_torch_dtype_bfloat16()) return {"bfloat16", 2};
  if (code == aoti_torch_dtype_float32()) return {"float32", 4};
  if (code == aoti_torch_dtype_float64()) return {"float64", 8};
  if (code == aoti_torch_dtype_uint8()) return {"uint8", 1};
  return {"dtype code " + std::to_string(code), 0};
}

// What a failed allocation asked for. The shim keeps the allocator's own exception to itself
// (it logs "Exception in aoti_torch: ..." on stderr and returns an error code), so without this
// the caller saw only "aoti_torch_empty_strided(...) API call failed at tensors.cpp".
std::string allocation_failure(const Tensor& x, int32_t dtype, int64_t dims, const int64_t* sizes,
                               const int64_t* strides) {
  const DTypeFacts facts = dtype_facts(dtype);
  std::string shape = "[";
  int64_t span = 1;  // elements the strides reach (the storage asked for)
  bool empty = false;
  for (int64_t d = 0; d < dims; ++d) {
    shape += (d ? ", " : "") + std::to_string(sizes[d]);
    span += (sizes[d] - 1) * strides[d];
    empty = empty || sizes[d] == 0;
  }
  shape += "]";
  if (empty) span = 0;
  const std::string device = x.is_cuda() ? "cuda:" + std::to_string(x.get_device_index()) : "cpu";
  std::string bytes;
  if (facts.bytes > 0) bytes = ", " + std::to_string(span * facts.bytes) + " bytes";
  return "oink: could not allocate a result of shape " + shape + " (" + facts.name + bytes +
         ") on " + device +
         ": out of memory? PyTorch logged the allocator's reason on stderr "
         "(\"Exception in aoti_torch: ...\")";
}

}  // namespace

Tensor empty_on(const Tensor& x, int32_t dtype, int64_t dims, const int64_t* sizes,
                const int64_t* strides) {
  AtenTensorHandle handle = nullptr;
  int32_t device_type = x.is_cuda() ? aoti_torch_device_type_cuda() : aoti_torch_device_type_cpu();
  if (aoti_torch_empty_strided(dims, sizes, strides, dtype, device_type,
                               x.is_cuda() ? x.get_device_index() : 0,
                               &handle) != AOTI_TORCH_SUCCESS) {
    throw std::runtime_error(allocation_failure(x, dtype, dims, sizes, strides));
  }
  return Tensor(handle);
}

Tensor empty_strided_like(const Tensor& x, const int64_t* sizes, const int64_t* strides) {
  int32_t dtype = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(x.get(), &dtype));
  return empty_on(x, dtype, x.dim(), sizes, strides);
}

Tensor output_for(const Tensor& x, const RowView& x_rows) {
  const auto sizes = x.sizes();
  if (x_rows.one_row_stride()) return empty_strided_like(x, sizes.data(), x.strides().data());
  std::vector<int64_t> strides(sizes.size());
  int64_t step = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = step;
    step *= std::max<int64_t>(sizes[d], 1);
  }
  return empty_strided_like(x, sizes.data(), strides.data());
}

Tensor per_row_for(const Tensor& x, DType x_dtype) {
  const auto sizes = x.sizes();
  const int64_t dims = static_cast<int64_t>(sizes.size()) - 1;
  std::vector<int64_t> strides(std::max<int64_t>(dims, 1));
  int64_t step = 1;
  for (int64_t d = dims; d-- > 0;) {
    strides[d] = step;
    step *= std::max<int64_t>(sizes[d], 1);
  }
  const int32_t dtype =
      x_dtype == DType::kFloat64 ? aoti_torch_dtype_float64() : aoti_torch_dtype_float32();
  Tensor stats = empty_on(x, dtype, dims, sizes.data(), strides.data());
  // Rows of no elements have no kernel run over them: their statistics are 0 / 0, NaN, as
  // PyTorch's (native_layer_norm, _fused_rms_norm), never whatever the allocation held.
  if (!sizes.empty() && sizes.back() == 0 && stats.numel() > 0) {
    torch::stable::fill_(stats, std::numeric_limits<double>::quiet_NaN());
  }
  return stats;
}

}  // namespace oink
