// The CPU training kernels (cpu/norm_backward_cpu.*, cpu/layernorm_cpu.*): RMSNorm's dx and
// dweight, LayerNorm's forward and its dx, dweight and dbias, on padded rows against a float64
// reference, the block partials added in order, the CUDA plan's blocks (weight_grad_blocks_for),
// and every element written exactly where it belongs (run under ASan and UBSan in CI).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu/layernorm_cpu.h"
#include "cpu/norm_backward_cpu.h"

namespace oink {
namespace {

// Nine blocks of 8 rows (32-thread CTAs: at most 256 blocks, 8 rows or more), the last of 6.
constexpr int64_t kRows = 70, kCols = 33, kLd = 40;
constexpr int64_t kBlocks = 9, kBlockRows = 8;

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
  const WeightGradBlocks wg = weight_grad_blocks_for(kRows, kCols, dtype);
  ASSERT_EQ(wg.block_rows, kBlockRows);
  ASSERT_EQ(wg.blocks, kBlocks);
  const int64_t blocks = wg.blocks;
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
  const int64_t blocks = weight_grad_blocks_for(kRows, kCols, DType::kFloat64).blocks;
  ASSERT_EQ(blocks, kBlocks);
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

// The rows for_each_block_row walks in each block, M float64 rows of N elements (all of them at
// one address: a row stride of 0, so no memory of M rows is needed), in block order.
std::vector<std::vector<int64_t>> block_rows_walked(int64_t m, int64_t n) {
  const DType dtype = DType::kFloat64;
  NormBackwardProblem bp;
  bp.rows.x_dtype = bp.rows.w_dtype = dtype;
  bp.rows.rows = m;
  bp.rows.cols = n;
  set_row_stride(bp.rows, 0);
  bp.dy_strides = bp.dx_strides = bp.rows.x_strides;
  std::vector<double> row(static_cast<size_t>(n));
  std::vector<std::vector<int64_t>> walked;
  for (int64_t b = 0; b < weight_grad_blocks_for(m, n, dtype).blocks; ++b) {
    walked.emplace_back();
    for_each_block_row<double>(bp, row.data(), row.data(), row.data(), b,
                               [&](int64_t r, const double* x, const double* dy, double* dx) {
                                 EXPECT_TRUE(x == row.data() && dy == x && dx == row.data());
                                 walked.back().push_back(r);
                               });
  }
  return walked;
}

// The CPU sums the CUDA plan's blocks: at most 256 blocks where the CUDA CTA has at most 256
// threads, 128 where it has 512 (16-bit N > 4096, float32 N > 2048, float64 N > 1024: the
// dtype's backward_threads_per_row, even where only the CPU runs), each of 8 rows or more.
TEST(NormBackwardCpu, WeightGradBlocksAreTheCudaCtas) {
  struct Want {
    int64_t m, n;
    DType dtype;
    int64_t block_rows, blocks;
  };
  const Want wants[] = {
      {0, 4096, DType::kBFloat16, 8, 1},
      {1, 7168, DType::kBFloat16, 8, 1},
      {70, 7168, DType::kBFloat16, 8, 9},
      {4096, 4096, DType::kBFloat16, 16, 256},
      {4096, 7168, DType::kBFloat16, 32, 128},
      {8192, 4096, DType::kBFloat16, 32, 256},
      {8192, 7168, DType::kBFloat16, 64, 128},
      {2048, 2048, DType::kFloat32, 8, 256},
      {4096, 2048, DType::kFloat32, 16, 256},
      {4096, 4096, DType::kFloat32, 32, 128},
      {4096, 1024, DType::kFloat64, 16, 256},
      {4096, 2048, DType::kFloat64, 32, 128},
      {1 << 20, 65536, DType::kFloat64, 8192, 128},  // CPU only: no cluster
      {4096, 65536, DType::kBFloat16, 128, 32},      // clusters of 4 CTAs: 32 in a wave of 128
      {4096, 131072, DType::kFloat32, 512, 8},       // clusters of 16
  };
  for (const Want& w : wants) {
    const WeightGradBlocks got = weight_grad_blocks_for(w.m, w.n, w.dtype);
    EXPECT_EQ(std::make_pair(got.block_rows, got.blocks), std::make_pair(w.block_rows, w.blocks))
        << "M=" << w.m << " N=" << w.n << " " << dtype_name(w.dtype);
  }
  // for_each_block_row walks those blocks: every row once, in order, block by block, the last
  // block short. 2100 float64 rows: 124 blocks of 17 (the last of 9) at N=2048 (512-thread
  // CTAs), 234 of 9 (the last of 3) at N=1024 (256-thread CTAs).
  for (const auto& [n, block_rows, blocks] :
       {std::tuple<int64_t, int64_t, int64_t>{2048, 17, 124}, {1024, 9, 234}}) {
    const auto walked = block_rows_walked(2100, n);
    ASSERT_EQ(static_cast<int64_t>(walked.size()), blocks) << n;
    int64_t next = 0;
    for (size_t b = 0; b < walked.size(); ++b) {
      const int64_t want = b + 1 < walked.size() ? block_rows : 2100 - (blocks - 1) * block_rows;
      EXPECT_EQ(static_cast<int64_t>(walked[b].size()), want) << n << " block " << b;
      for (const int64_t r : walked[b]) EXPECT_EQ(r, next++) << n;
    }
    EXPECT_EQ(next, 2100) << n;
  }
}

}  // namespace
}  // namespace oink
