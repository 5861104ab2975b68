// norm_rows_cpu against a float64 reference of docs/contract.md, and the ops' bitwise promises:
// fused-op invariant, batch invariance, zero/NaN/Inf rows. Random inputs (fixed seed per case, so
// a failure reproduces); buffers start poisoned; padding and guards must stay untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "cpu/norm_cpu.h"

namespace oink {
namespace {

struct Combo {
  DType x;
  bool has_w;
  DType w;
};
constexpr Combo kCombos[] = {
    {DType::kFloat16, false, DType::kFloat16},  {DType::kFloat16, true, DType::kFloat16},
    {DType::kFloat16, true, DType::kFloat32},   {DType::kBFloat16, false, DType::kBFloat16},
    {DType::kBFloat16, true, DType::kBFloat16}, {DType::kBFloat16, true, DType::kFloat32},
    {DType::kFloat32, false, DType::kFloat32},  {DType::kFloat32, true, DType::kFloat32},
};
constexpr int64_t kCols[] = {1, 7, 64, 111, 500, 4096};
constexpr int64_t kRows[] = {1, 3, 17};
constexpr float kEps = 1e-5f;
constexpr uint8_t kXTag = 0xa1, kResTag = 0xb2, kWTag = 0xc3, kOutTag = 0xd4;

std::string name(const Combo& c, int64_t m, int64_t n) {
  return std::string("x=") + dtype_name(c.x) + " w=" + (c.has_w ? dtype_name(c.w) : "none") +
         " M=" + std::to_string(m) + " N=" + std::to_string(n);
}

// M rows of N elements with row stride ld, between two guards. Every element starts as a NaN poison
// whose payload `tag` is distinct per buffer: an unwritten element fails any numeric check, reading
// padding poisons a row's sum, and a NaN copied from another buffer's padding still shows as a
// write.
struct Rows {
  static constexpr int64_t kGuard = 16;  // elements on each side
  DType t = DType::kFloat32;
  int64_t m = 0, n = 0, ld = 0;
  uint32_t poison = 0;  // 0x7fTT is NaN as float16 and as bfloat16 for TT >= 0x81
  std::vector<unsigned char> bytes;

  Rows() = default;
  // The element size (these tests cover the 16- and 32-bit types: an element fits a uint32_t).
  size_t elem() const { return std::min<size_t>(dtype_size(t), sizeof(uint32_t)); }
  Rows(DType t_, int64_t m_, int64_t n_, int64_t ld_, uint8_t tag)
      : t(t_), m(m_), n(n_), ld(ld_), bytes((2 * kGuard + m_ * ld_) * dtype_size(t_)) {
    poison = t == DType::kFloat32 ? (0x7f80u | tag) << 16 | tag : 0x7f00u | tag;
    for (int64_t e = -kGuard; e < m * ld + kGuard; ++e) std::memcpy(at(e), &poison, elem());
  }
  unsigned char* at(int64_t e) { return bytes.data() + (kGuard + e) * dtype_size(t); }
  const unsigned char* at(int64_t e) const { return bytes.data() + (kGuard + e) * dtype_size(t); }
  void* data() { return at(0); }
  uint32_t bits(int64_t e) const {
    uint32_t b = 0;
    std::memcpy(&b, at(e), elem());
    return b;
  }
  uint32_t bits(int64_t i, int64_t j) const { return bits(i * ld + j); }
  float get(int64_t i, int64_t j) const {
    const uint32_t b = bits(i, j);
    if (t == DType::kFloat32) return bits_float(b);
    return t == DType::kFloat16 ? half_to_float(static_cast<uint16_t>(b))
                                : bf16_to_float(static_cast<uint16_t>(b));
  }
  void set(int64_t i, int64_t j, float v) {  // rounds v to t
    const uint32_t b = t == DType::kFloat32   ? float_bits(v)
                       : t == DType::kFloat16 ? float_to_half(v)
                                              : float_to_bf16(v);
    std::memcpy(at(i * ld + j), &b, elem());
  }
  // Elements outside the valid M x N region (padding, guards) that no longer hold the poison.
  int64_t touched_outside() const {
    int64_t touched = 0;
    for (int64_t e = -kGuard; e < m * ld + kGuard; ++e) {
      if (e < 0 || e / ld >= m || e % ld >= n) touched += bits(e) != poison;
    }
    return touched;
  }
};

// Normal values; the row scale cycles through 1, 1e-3 (mean square 1e-6 < eps: eps dominates and a
// mishandled eps shows) and 30.
Rows random_rows(DType t, int64_t m, int64_t n, int64_t ld, uint8_t tag, std::mt19937& gen) {
  Rows r(t, m, n, ld, tag);
  std::normal_distribution<float> normal;
  constexpr float kScale[] = {1.0f, 1e-3f, 30.0f};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) r.set(i, j, normal(gen) * kScale[i % 3]);
  }
  return r;
}

struct Inputs {
  Rows x, res, w;  // res is used by the fused op only
};

Inputs random_inputs(const Combo& c, int64_t m, int64_t n, int64_t x_pad, int64_t res_pad,
                     uint32_t seed) {
  std::mt19937 gen(seed);
  return {random_rows(c.x, m, n, n + x_pad, kXTag, gen),
          random_rows(c.x, m, n, n + res_pad, kResTag, gen), random_rows(c.w, 1, n, n, kWTag, gen)};
}

struct Result {
  Rows x, out, res;  // after the call; for the fused op `out` is `x`
};

// Runs `op` on copies of the inputs, one norm_rows_cpu call per range [cuts[k], cuts[k + 1]). out
// gets its own row stride (N + 3), so that a kernel mixing up ld_x and ld_out shows.
Result run(NormOp op, const Combo& c, const Inputs& in, std::vector<int64_t> cuts) {
  const bool fused = op == NormOp::kFusedAddRmsNorm;
  const Rows &x = in.x, &res = in.res;
  Rows w = in.w;
  Result r{x, Rows(x.t, x.m, x.n, x.n + 3, kOutTag), res};
  NormProblem p;
  p.op = op;
  p.x_dtype = c.x;
  p.w_dtype = c.w;
  p.has_weight = c.has_w;
  p.rows = x.m;
  p.cols = x.n;
  set_row_stride(p, x.ld);
  p.out_strides.s[0] = r.out.ld;  // the fused op writes x (NormProblem::written_strides)
  p.residual_strides.s[0] = res.ld;
  const NormArgs a{r.x.data(), fused ? r.x.data() : r.out.data(), fused ? r.res.data() : nullptr,
                   c.has_w ? w.data() : nullptr, kEps};
  for (size_t k = 0; k + 1 < cuts.size(); ++k) norm_rows_cpu(p, a, cuts[k], cuts[k + 1]);
  if (fused) r.out = r.x;
  return r;
}

double ulp(DType t, double v) {
  const int mant = t == DType::kFloat32 ? 23 : t == DType::kFloat16 ? 10 : 7;
  const int emin = t == DType::kFloat16 ? -14 : -126;
  const int e = v == 0 ? emin : std::max(std::ilogb(v), emin);
  return std::ldexp(1.0, e - mant);
}

// docs/contract.md, 'How correctness is measured', holds oink to PyTorch's error plus 1 ulp, and
// PyTorch's CPU kernels accumulate in float64; so does norm_rows_cpu (sum of squares, rstd and
// products in double, then rounded to float and to the output dtype). Its error: the double
// pipeline, ~N * 2^-53 relative, is far below 1 ulp of float; rounding to float adds <= 1/2 ulp of
// float; rounding that float to a 16-bit dtype adds <= 1/2 ulp of the output (the double rounding
// stays within it). So <= 1 ulp of the output dtype; we allow 2 ulp at |ref|, which also covers a y
// that rounded across a power of two. No absolute slack is needed beyond the ulp's floor at the
// subnormal spacing: y = x * rstd * w is a product, its errors are relative to |y|, with no
// cancellation. Measured: <= 0.5 ulp + 3e-4 ulp here; the earlier float32 accumulation reached 3.2
// ulp of float32 at N = 4096 and fails.
double tolerance(DType out, double ref) { return 2 * ulp(out, std::fabs(ref)); }

// y against the float64 reference computed from `src` (x, or the residual the fused op stored).
void expect_near_reference(const Rows& src, const Rows& w, bool has_w, const Rows& y) {
  int bad = 0;
  for (int64_t i = 0; i < src.m; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < src.n; ++j) ss += static_cast<double>(src.get(i, j)) * src.get(i, j);
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(src.n) + kEps);
    for (int64_t j = 0; j < src.n; ++j) {
      const double ref = src.get(i, j) * rstd * (has_w ? w.get(0, j) : 1.0);
      const double got = y.get(i, j);
      if (!(std::fabs(got - ref) <= tolerance(y.t, ref)) && ++bad <= 5) {
        ADD_FAILURE() << "row " << i << " col " << j << ": got " << got << ", reference " << ref;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

bool same_bits(const Rows& a, const Rows& b, int64_t ia, int64_t ib) {
  for (int64_t j = 0; j < a.n; ++j) {
    if (a.bits(ia, j) != b.bits(ib, j)) return false;
  }
  return true;
}

TEST(NormRowsCpu, RmsNormMatchesFloat64Reference) {
  for (const Combo& c : kCombos) {
    for (int64_t n : kCols) {
      for (int64_t m : kRows) {
        SCOPED_TRACE(name(c, m, n));
        const Inputs in = random_inputs(c, m, n, 5, 0, static_cast<uint32_t>(n * 131 + m));
        const Result r = run(NormOp::kRmsNorm, c, in, {0, m});
        EXPECT_EQ(r.x.bytes, in.x.bytes) << "x was modified";
        EXPECT_EQ(r.out.touched_outside(), 0) << "padding or guard bytes of out written";
        expect_near_reference(in.x, in.w, c.has_w, r.out);
      }
    }
  }
}

// The documented operations, one by one, in this file's own (baseline x86-64) build: 16 float64
// lanes (element j in lane j % 16) combined pairwise, rstd = 1 / sqrt(ss / N + eps), then
// round(float(x * rstd * w)). norm_rows_cpu runs whichever ISA clone the CPU supports (AVX-512
// on the CI machine) and must give the same bits: no clone may reassociate or contract.
TEST(NormRowsCpu, EveryIsaCloneGivesTheDocumentedBits) {
  for (const Combo& c : kCombos) {
    for (int64_t n : kCols) {
      SCOPED_TRACE(name(c, 3, n));
      const Inputs in = random_inputs(c, 3, n, 0, 0, static_cast<uint32_t>(n * 7 + 1));
      const Result r = run(NormOp::kRmsNorm, c, in, {0, 3});
      Rows expected(c.x, 3, n, n + 3, kOutTag);
      for (int64_t i = 0; i < 3; ++i) {
        double lanes[16] = {};
        for (int64_t j = 0; j < n; ++j) {
          const double v = in.x.get(i, j);
          lanes[j % 16] += v * v;
        }
        for (int width = 8; width > 0; width /= 2) {
          for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
        }
        const double rstd = 1.0 / std::sqrt(lanes[0] / static_cast<double>(n) + kEps);
        for (int64_t j = 0; j < n; ++j) {
          const double w = c.has_w ? static_cast<double>(in.w.get(0, j)) : 1.0;
          expected.set(i, j, static_cast<float>(in.x.get(i, j) * rstd * w));
        }
        EXPECT_TRUE(same_bits(expected, r.out, i, i)) << "row " << i;
      }
    }
  }
}

TEST(NormRowsCpu, FusedAddStoresRoundedSumThenNormalisesIt) {
  for (const Combo& c : kCombos) {
    for (int64_t n : kCols) {
      for (int64_t m : kRows) {
        SCOPED_TRACE(name(c, m, n));
        const Inputs in = random_inputs(c, m, n, 5, 2, static_cast<uint32_t>(n * 137 + m));
        const Result r = run(NormOp::kFusedAddRmsNorm, c, in, {0, m});
        EXPECT_EQ(r.x.touched_outside(), 0) << "padding or guard bytes of x written";
        EXPECT_EQ(r.res.touched_outside(), 0) << "padding or guard bytes of residual written";
        Rows sum = in.res;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) sum.set(i, j, in.x.get(i, j) + in.res.get(i, j));
        }
        EXPECT_EQ(r.res.bytes, sum.bytes) << "residual is not round(x + residual)";
        const Result alone = run(NormOp::kRmsNorm, c, {r.res, Rows(), in.w}, {0, m});
        for (int64_t i = 0; i < m; ++i) {
          EXPECT_TRUE(same_bits(r.x, alone.out, i, i)) << "x != rmsnorm(residual) in row " << i;
        }
        expect_near_reference(r.res, in.w, c.has_w, r.x);
      }
    }
  }
}

TEST(NormRowsCpu, RowBitsIgnoreBatchAndSplit) {
  for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
    for (const Combo& c : kCombos) {
      for (int64_t n : kCols) {
        SCOPED_TRACE(std::string(op_name(op)) + " " + name(c, 17, n));
        const Inputs in = random_inputs(c, 17, n, 5, 1, static_cast<uint32_t>(n * 139));
        const Result whole = run(op, c, in, {0, 17});
        const Result split = run(op, c, in, {0, 5, 17});
        EXPECT_EQ(whole.out.bytes, split.out.bytes);
        EXPECT_EQ(whole.res.bytes, split.res.bytes);
        // Row 7 alone, as row 0 of a one-row batch with unpadded rows.
        Inputs one_row{Rows(c.x, 1, n, n, kXTag), Rows(c.x, 1, n, n, kResTag), in.w};
        for (int64_t j = 0; j < n; ++j) {
          one_row.x.set(0, j, in.x.get(7, j));
          one_row.res.set(0, j, in.res.get(7, j));
        }
        const Result one = run(op, c, one_row, {0, 1});
        EXPECT_TRUE(same_bits(one.out, whole.out, 0, 7));
        EXPECT_TRUE(same_bits(one.res, whole.res, 0, 7));
      }
    }
  }
}

// Special rows stay in their row (the others keep their bits) and give what the float64 reference
// gives: a row of zeros with eps > 0 gives zeros; a NaN poisons its row; an Inf makes the sum of
// squares Inf, so rstd = 0: Inf * 0 = NaN at that column, zeros elsewhere.
TEST(NormRowsCpu, ZeroNanAndInfRows) {
  enum Kind { kZeros, kNan, kInf };
  for (NormOp op : {NormOp::kRmsNorm, NormOp::kFusedAddRmsNorm}) {
    for (const Combo& c : kCombos) {
      for (int64_t n : {1, 7, 500}) {
        SCOPED_TRACE(std::string(op_name(op)) + " " + name(c, 3, n));
        const Inputs in = random_inputs(c, 3, n, 0, 0, static_cast<uint32_t>(n));
        const Result clean = run(op, c, in, {0, 3});
        for (Kind kind : {kZeros, kNan, kInf}) {
          Inputs special = in;
          if (kind == kZeros) {
            for (int64_t j = 0; j < n; ++j) {
              special.x.set(1, j, 0.0f);
              special.res.set(1, j, 0.0f);
            }
          } else {  // for the fused op the value reaches the sum through x
            special.x.set(1, n / 2, kind == kNan ? NAN : INFINITY);
          }
          const Result r = run(op, c, special, {0, 3});
          for (int64_t i : {0, 2}) {
            EXPECT_TRUE(same_bits(r.out, clean.out, i, i) && same_bits(r.res, clean.res, i, i))
                << "kind " << kind << " changed row " << i;
          }
          for (int64_t j = 0; j < n; ++j) {
            const float y = r.out.get(1, j);
            if (kind == kNan || (kind == kInf && j == n / 2)) {
              EXPECT_TRUE(std::isnan(y)) << "kind " << kind << " col " << j << ": " << y;
            } else {
              EXPECT_EQ(y, 0.0f) << "kind " << kind << " col " << j;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace oink
