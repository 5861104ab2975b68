// cpu::count_targets and cpu::reduce_loss (cpu/loss_scalars_cpu.h): the exact count and its
// reciprocal in both widths, the reduced loss against a long-double sum in every output dtype,
// and the empty and all-ignored cases (0 / 0 is NaN). Under ASan: no read past the rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/float_convert.h"
#include "cpu/loss_scalars_cpu.h"

namespace oink {
namespace {

constexpr int64_t kIgnore = -100;

TEST(LossScalarsCpu, CountIsExactInBothWidths) {
  std::vector<int64_t> target(1001);
  for (size_t i = 0; i < target.size(); ++i) target[i] = i % 3 == 0 ? kIgnore : int64_t(i % 50);
  const int64_t want = 1001 - 334;
  float f[2];
  cpu::count_targets(target.data(), 1001, kIgnore, /*wide=*/false, f);
  EXPECT_EQ(f[0], static_cast<float>(want));
  EXPECT_EQ(f[1], 1.f / static_cast<float>(want));
  double d[2];
  cpu::count_targets(target.data(), 1001, kIgnore, /*wide=*/true, d);
  EXPECT_EQ(d[0], static_cast<double>(want));
  EXPECT_EQ(d[1], 1.0 / static_cast<double>(want));
  cpu::count_targets(target.data(), 0, kIgnore, false, f);
  EXPECT_EQ(f[0], 0.f);
  EXPECT_TRUE(std::isinf(f[1]));
}

TEST(LossScalarsCpu, ReducedLossIsTheSumOrTheMeanRoundedOnce) {
  std::vector<float> loss(777);
  long double sum = 0;
  for (size_t i = 0; i < loss.size(); ++i) {
    loss[i] = 0.37f * static_cast<float>(i % 17) + 1e-3f;
    sum += loss[i];
  }
  const float count[2] = {700.f, 1.f / 700.f};
  float f = 0;
  cpu::reduce_loss(loss.data(), 777, nullptr, false, &f, DType::kFloat32);
  EXPECT_EQ(f, static_cast<float>(static_cast<double>(sum)));
  cpu::reduce_loss(loss.data(), 777, count, false, &f, DType::kFloat32);
  EXPECT_EQ(f, static_cast<float>(static_cast<double>(sum / 700)));
  uint16_t b = 0;
  cpu::reduce_loss(loss.data(), 777, count, false, &b, DType::kBFloat16);
  EXPECT_EQ(b, float_to_bf16(static_cast<float>(static_cast<double>(sum / 700))));
  uint16_t h = 0;
  cpu::reduce_loss(loss.data(), 777, count, false, &h, DType::kFloat16);
  EXPECT_EQ(h, float_to_half(static_cast<float>(static_cast<double>(sum / 700))));
  std::vector<double> wide(loss.begin(), loss.end());
  const double wide_count[2] = {700.0, 1.0 / 700.0};
  double d = 0;
  cpu::reduce_loss(wide.data(), 777, wide_count, true, &d, DType::kFloat64);
  EXPECT_NEAR(d, static_cast<double>(sum / 700), 1e-13);
}

TEST(LossScalarsCpu, NoRowsOrAllIgnored) {
  const float zero_count[2] = {0.f, INFINITY};
  const float zeros[3] = {0.f, 0.f, 0.f};
  float f = 1;
  cpu::reduce_loss(zeros, 0, nullptr, false, &f, DType::kFloat32);
  EXPECT_EQ(f, 0.f);
  cpu::reduce_loss(zeros, 3, zero_count, false, &f, DType::kFloat32);
  EXPECT_TRUE(std::isnan(f));
}

}  // namespace
}  // namespace oink
