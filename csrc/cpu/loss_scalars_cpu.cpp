#include "cpu/loss_scalars_cpu.h"

#include "cpu/host_elem.h"

namespace oink::cpu {

namespace {

OINK_INLINE double load_wide(const void* values, bool wide, int64_t i) {
  return wide ? static_cast<const double*>(values)[i]
              : static_cast<double>(static_cast<const float*>(values)[i]);
}

}  // namespace

void count_targets(const int64_t* target, int64_t rows, int64_t ignore_index, bool wide,
                   void* out) {
  int64_t count = 0;
  for (int64_t i = 0; i < rows; ++i) count += target[i] != ignore_index;
  if (wide) {
    auto* o = static_cast<double*>(out);
    o[0] = static_cast<double>(count);
    o[1] = 1.0 / o[0];
  } else {
    auto* o = static_cast<float*>(out);
    o[0] = static_cast<float>(count);
    o[1] = 1.f / o[0];
  }
}

void reduce_loss(const void* loss, int64_t rows, const void* count, bool wide, void* out,
                 DType out_dtype) {
  double total = lane_sum(rows, [&](int64_t i) { return load_wide(loss, wide, i); });
  if (count != nullptr) total /= load_wide(count, wide, 0);
  with_dtype(out_dtype, [&](auto d) {
    using X = HostElem<decltype(d)::value>;
    *static_cast<typename X::Storage*>(out) = X::store_result(total);
  });
}

}  // namespace oink::cpu
