// The CPU training kernels (cpu/norm_backward_cpu.*, cpu/layernorm_cpu.*): RMSNorm's dx and
// dweight, LayerNorm's forward and its dx, dweight and dbias, on padded rows against a float64
// reference, the block partials added in order, and every element written exactly where it
// belongs (run under ASan and UBSan in CI).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/layernorm_cpu.h"
#include "cpu/norm_backward_cpu.h"

namespace oink {
namespace {

constexpr int64_t kRows = 70, kCols = 33, kLd = 40;  // 3 blocks of weight_grad_block_rows(70)

template <typename T>
struct Case {
  std::vector<T> x, dy, dx;
  std::vector<T> w;
  std::vector<double> rstd_d;
  std::vector<float> rstd_f;
};

template <typename T>
void run_case(DType dtype) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  const T poison = std::nan("");
  Case<T> c;
  c.x.assign(kRows * kLd, poison);
  c.dy.assign(kRows * kLd, poison);
  c.dx.assign(kRows * kLd, poison);
  c.w.resize(kCols);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      c.x[i * kLd + j] = static_cast<T>(normal(rng));
      c.dy[i * kLd + j] = static_cast<T>(normal(rng));
    }
  }
  for (auto& v : c.w) v = static_cast<T>(1 + 0.5 * normal(rng));
  for (int64_t i = 0; i < kRows; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < kCols; ++j) ss += double{c.x[i * kLd + j]} * c.x[i * kLd + j];
    const double r = 1 / std::sqrt(ss / kCols + 1e-6);
    c.rstd_d.push_back(r);
    c.rstd_f.push_back(static_cast<float>(r));
  }

  NormBackwardProblem bp;
  NormProblem& p = bp.rows;
  p.op = NormOp::kRmsNorm;
  p.x_dtype = p.w_dtype = dtype;
  p.has_weight = true;
  p.rows = kRows;
  p.cols = kCols;
  p.x_strides.s[0] = bp.dy_strides.s[0] = bp.dx_strides.s[0] = kLd;
  const int64_t block_rows = weight_grad_block_rows(kRows);
  const int64_t blocks = (kRows + block_rows - 1) / block_rows;
  ASSERT_EQ(blocks, 3);
  std::vector<double> partials(blocks * kCols, std::nan(""));
  NormBackwardArgs a;
  a.dy = c.dy.data();
  a.x = c.x.data();
  a.weight = c.w.data();
  a.rstd = dtype == DType::kFloat64 ? static_cast<const void*>(c.rstd_d.data()) : c.rstd_f.data();
  a.dx = c.dx.data();
  a.dweight_partials = partials.data();
  for (int64_t b = blocks; b-- > 0;) norm_backward_block_cpu(bp, a, b);  // any block order
  std::vector<T> dw(kCols, poison);
  reduce_partials_cpu(dtype, partials.data(), blocks, kCols, dw.data(), 0, kCols);

  const double tol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
  std::vector<double> ref_dw(kCols, 0.0);
  for (int64_t i = 0; i < kRows; ++i) {
    const double r = c.rstd_d[i];
    double dot = 0;
    for (int64_t j = 0; j < kCols; ++j)
      dot += double{c.dy[i * kLd + j]} * c.w[j] * c.x[i * kLd + j];
    for (int64_t j = 0; j < kCols; ++j) {
      const double x = c.x[i * kLd + j], g = double{c.dy[i * kLd + j]} * c.w[j];
      const double want = r * g - x * r * r * r * dot / kCols;
      EXPECT_NEAR(c.dx[i * kLd + j], want, tol * (1 + std::abs(want))) << i << "," << j;
      ref_dw[j] += double{c.dy[i * kLd + j]} * x * r;
    }
    for (int64_t j = kCols; j < kLd; ++j) EXPECT_TRUE(std::isnan(c.dx[i * kLd + j]));  // padding
  }
  for (int64_t j = 0; j < kCols; ++j) {
    EXPECT_NEAR(dw[j], ref_dw[j], tol * (1 + std::abs(ref_dw[j]))) << j;
  }
}

TEST(NormBackwardCpu, Float32PaddedRowsMatchFloat64) { run_case<float>(DType::kFloat32); }
TEST(NormBackwardCpu, Float64PaddedRowsMatchFloat64) { run_case<double>(DType::kFloat64); }

TEST(LayerNormCpu, Float64PaddedRowsMatchFloat64) {
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  const double poison = std::nan("");
  std::vector<double> x(kRows * kLd, poison), dy(kRows * kLd, poison), y(kRows * kLd, poison),
      dx(kRows * kLd, poison), w(kCols), b(kCols), mean(kRows), rstd(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      x[i * kLd + j] = 2 * normal(rng) + 1;
      dy[i * kLd + j] = normal(rng);
    }
  }
  for (int64_t j = 0; j < kCols; ++j) {
    w[j] = 1 + 0.5 * normal(rng);
    b[j] = normal(rng);
  }
  NormBackwardProblem bp;
  NormProblem& p = bp.rows;
  p.op = NormOp::kLayerNorm;
  p.x_dtype = p.w_dtype = DType::kFloat64;
  p.rows = kRows;
  p.cols = kCols;
  p.x_strides.s[0] = p.out_strides.s[0] = bp.dy_strides.s[0] = bp.dx_strides.s[0] = kLd;
  LayerNormArgs f;
  f.x = x.data();
  f.out = y.data();
  f.weight = w.data();
  f.bias = b.data();
  f.mean = mean.data();
  f.rstd = rstd.data();
  f.eps = 1e-5;
  layernorm_rows_cpu(p, f, 0, kRows);
  const int64_t blocks = 3;
  std::vector<double> dw_partials(blocks * kCols, poison), db_partials(blocks * kCols, poison);
  LayerNormBackwardArgs a;
  a.dy = dy.data();
  a.x = x.data();
  a.weight = w.data();
  a.mean = mean.data();
  a.rstd = rstd.data();
  a.dx = dx.data();
  a.dweight_partials = dw_partials.data();
  a.dbias_partials = db_partials.data();
  for (int64_t k = blocks; k-- > 0;) layernorm_backward_block_cpu(bp, a, k);
  std::vector<double> dw(kCols), db(kCols);
  reduce_partials_cpu(DType::kFloat64, dw_partials.data(), blocks, kCols, dw.data(), 0, kCols);
  reduce_partials_cpu(DType::kFloat64, db_partials.data(), blocks, kCols, db.data(), 0, kCols);

  std::vector<double> ref_dw(kCols, 0.0), ref_db(kCols, 0.0);
  for (int64_t i = 0; i < kRows; ++i) {
    const double* xi = &x[i * kLd];
    const double* dyi = &dy[i * kLd];
    double m = 0, v = 0;
    for (int64_t j = 0; j < kCols; ++j) m += xi[j];
    m /= kCols;
    for (int64_t j = 0; j < kCols; ++j) v += (xi[j] - m) * (xi[j] - m);
    const double r = 1 / std::sqrt(v / kCols + 1e-5);
    EXPECT_NEAR(mean[i], m, 1e-12);
    EXPECT_NEAR(rstd[i], r, 1e-12 * r);
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < kCols; ++j) {
      const double xhat = (xi[j] - m) * r;
      EXPECT_NEAR(y[i * kLd + j], xhat * w[j] + b[j], 1e-12) << i << "," << j;
      mg += dyi[j] * w[j] / kCols;
      mgx += dyi[j] * w[j] * xhat / kCols;
      ref_dw[j] += dyi[j] * xhat;
      ref_db[j] += dyi[j];
    }
    for (int64_t j = 0; j < kCols; ++j) {
      const double want = r * (dyi[j] * w[j] - mg - (xi[j] - m) * r * mgx);
      EXPECT_NEAR(dx[i * kLd + j], want, 1e-11 * (1 + std::abs(want))) << i << "," << j;
    }
    for (int64_t j = kCols; j < kLd; ++j) {  // the padding is never written
      EXPECT_TRUE(std::isnan(y[i * kLd + j]) && std::isnan(dx[i * kLd + j]));
    }
  }
  for (int64_t j = 0; j < kCols; ++j) {
    EXPECT_NEAR(dw[j], ref_dw[j], 1e-11 * (1 + std::abs(ref_dw[j])));
    EXPECT_NEAR(db[j], ref_db[j], 1e-11 * (1 + std::abs(ref_db[j])));
  }
}

TEST(NormBackwardCpu, WeightGradBlocksDependOnMAlone) {
  EXPECT_EQ(weight_grad_block_rows(1), 32);
  EXPECT_EQ(weight_grad_block_rows(256 * 32), 32);
  EXPECT_EQ(weight_grad_block_rows(256 * 32 + 1), 33);  // at most 256 blocks
  EXPECT_EQ(weight_grad_block_rows(1 << 20), 4096);
}

}  // namespace
}  // namespace oink
