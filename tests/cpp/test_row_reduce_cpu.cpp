// softmax_rows and cross_entropy_rows against long-double references of the family's semantics
// (core/row_reduce.h): every dtype, float64 included; padded and multi-dimensional row layouts
// with different strides per stream; -inf, NaN, ignored and out-of-range rows; the in-place
// gradient. Buffers start poisoned (a NaN per buffer), and padding and guards must stay so. The
// suite runs under ASan: an out-of-range target read would be reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "cpu/row_reduce_cpu.h"

namespace oink {
namespace {

constexpr DType kDtypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64};
constexpr int64_t kCols[] = {1, 2, 7, 64, 111, 1000, 4099};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr uint8_t kInTag = 0xa1, kIn2Tag = 0xb2, kOutTag = 0xd4;

int mantissa_bits(DType t) {
  return t == DType::kFloat64 ? 52 : t == DType::kFloat32 ? 23 : t == DType::kFloat16 ? 10 : 7;
}

// The spacing of t's values at |v| (its subnormal spacing below the normal range).
double ulp(DType t, long double v) {
  const int emin = t == DType::kFloat64 ? -1022 : t == DType::kFloat16 ? -14 : -126;
  const double a = static_cast<double>(std::fabs(v));
  const int e = a == 0 || !std::isfinite(a) ? emin : std::max(std::ilogb(a), emin);
  return std::ldexp(1.0, e - mantissa_bits(t));
}

// The per-row values' type: float32, float64 for float64 rows.
DType row_value_type(DType t) { return t == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

// `got` within `tol` of `ref`; a NaN or infinite reference must be matched exactly.
bool near(double got, long double ref, double tol) {
  if (std::isnan(static_cast<double>(ref))) return std::isnan(got);
  if (std::isinf(static_cast<double>(ref))) return got == static_cast<double>(ref);
  return std::fabs(static_cast<long double>(got) - ref) <= tol;
}

std::string str(DType t, int64_t m, int64_t n) {
  return std::string(dtype_name(t)) + " M=" + std::to_string(m) + " N=" + std::to_string(n);
}

// `count` elements of t between two guards of `guard` elements, all poisoned: a NaN whose payload
// `tag` is distinct per buffer.
struct Buf {
  DType t = DType::kFloat32;
  int64_t count = 0, guard = 0;
  uint64_t poison = 0;
  std::vector<unsigned char> bytes;

  Buf() = default;
  Buf(DType t_, int64_t count_, uint8_t tag, int64_t guard_)
      : t(t_), count(count_), guard(guard_), bytes((count_ + 2 * guard_) * dtype_size(t_)) {
    poison = t == DType::kFloat64   ? 0x7ff8000000000000ull | tag
             : t == DType::kFloat32 ? (0x7f80u | tag) << 16 | tag
                                    : 0x7f00u | tag;  // NaN as float16 and bfloat16 (tag >= 0x81)
    for (int64_t e = -guard; e < count + guard; ++e) std::memcpy(at(e), &poison, size());
  }
  size_t size() const { return static_cast<size_t>(dtype_size(t)); }
  unsigned char* at(int64_t e) { return bytes.data() + (guard + e) * size(); }
  const unsigned char* at(int64_t e) const { return bytes.data() + (guard + e) * size(); }
  uint64_t bits(int64_t e) const {
    uint64_t b = 0;
    std::memcpy(&b, at(e), size());
    return b;
  }
  double get(int64_t e) const {
    const uint64_t b = bits(e);
    switch (t) {
      case DType::kFloat64: {
        double d;
        std::memcpy(&d, &b, sizeof d);
        return d;
      }
      case DType::kFloat32:
        return bits_float(static_cast<uint32_t>(b));
      case DType::kFloat16:
        return half_to_float(static_cast<uint16_t>(b));
      case DType::kBFloat16:
        return bf16_to_float(static_cast<uint16_t>(b));
    }
    return kNaN;
  }
  void set(int64_t e, double v) {  // rounds v to t
    uint64_t b = 0;
    switch (t) {
      case DType::kFloat64:
        std::memcpy(&b, &v, sizeof v);
        break;
      case DType::kFloat32:
        b = float_bits(static_cast<float>(v));
        break;
      case DType::kFloat16:
        b = float_to_half(static_cast<float>(v));
        break;
      case DType::kBFloat16:
        b = float_to_bf16(static_cast<float>(v));
        break;
    }
    std::memcpy(at(e), &b, size());
  }
};

// v rounded to t as the kernels round a float64 result (through float32; float64 kept).
double host_round(DType t, double v) {
  Buf b(t, 1, 0x81, 0);
  b.set(0, t == DType::kFloat64 ? v : static_cast<float>(v));
  return b.get(0);
}

// M rows of N elements placed by leading dimensions `dims` and strides `st` (computed here
// independently of core/rows.h).
struct Rows {
  Buf buf;
  int64_t m = 0, n = 0;
  std::vector<int64_t> off;  // each row's first element

  double get(int64_t r, int64_t j) const { return buf.get(off[r] + j); }
  void set(int64_t r, int64_t j, double v) { buf.set(off[r] + j, v); }
  uint64_t bits(int64_t r, int64_t j) const { return buf.bits(off[r] + j); }
  void* data() { return buf.at(0); }
  // Elements outside the rows (padding, gaps, guards) that no longer hold the poison.
  int64_t touched_outside() const {
    std::vector<bool> in_row(static_cast<size_t>(buf.count), false);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) in_row[off[r] + j] = true;
    }
    int64_t touched = 0;
    for (int64_t e = -buf.guard; e < buf.count + buf.guard; ++e) {
      const bool inside = e >= 0 && e < buf.count && in_row[e];
      touched += !inside && buf.bits(e) != buf.poison;
    }
    return touched;
  }
};

Rows make_rows(DType t, const RowDims& dims, const RowStrides& st, int64_t m, int64_t n,
               uint8_t tag, int64_t guard = 16) {
  Rows r;
  r.m = m;
  r.n = n;
  int64_t end = 0;
  for (int64_t row = 0; row < m; ++row) {
    int64_t rest = row, offset = 0;
    for (int d = 0; d < dims.count; ++d) {
      const bool outer = d + 1 == dims.count;
      offset += (outer ? rest : rest % dims.size[d]) * st.s[d];
      if (!outer) rest /= dims.size[d];
    }
    r.off.push_back(offset);
    end = std::max(end, offset + n);
  }
  r.buf = Buf(t, end, tag, guard);
  return r;
}

RowDims one_dim(int64_t m) {
  RowDims d;
  d.size[0] = m;
  return d;
}
RowStrides stride(int64_t ld) { return RowStrides{{ld}}; }

// Per-row values [M]: float32, float64 for float64 rows; NaN until written.
struct PerRow {
  DType t;
  std::vector<float> f;
  std::vector<double> d;
  PerRow(DType rows_t, int64_t m)
      : t(row_value_type(rows_t)),
        f(static_cast<size_t>(m), NAN),
        d(static_cast<size_t>(m), kNaN) {}
  void* data() { return t == DType::kFloat64 ? static_cast<void*>(d.data()) : f.data(); }
  double get(int64_t r) const { return t == DType::kFloat64 ? d[r] : f[r]; }
  void set(int64_t r, double v) {
    if (t == DType::kFloat64) {
      d[r] = v;
    } else {
      f[r] = static_cast<float>(v);
    }
  }
};

// Normal values, the row's scale cycling through 1, 8 and 30.
void fill_random(Rows& r, std::mt19937& gen, double base = 1.0) {
  std::normal_distribution<double> normal;
  constexpr double kScale[] = {1.0, 8.0, 30.0};
  for (int64_t i = 0; i < r.m; ++i) {
    for (int64_t j = 0; j < r.n; ++j) r.set(i, j, normal(gen) * kScale[i % 3] * base);
  }
}

// Every row of a call, in two ranges [0, M / 2) and [M / 2, M) (the binding's threads split the
// rows; a row's result must not depend on the split).
void softmax_all(const ReduceProblem& p, const ReduceArgs& a) {
  cpu::softmax_rows(p, a, 0, p.rows / 2);
  cpu::softmax_rows(p, a, p.rows / 2, p.rows);
}
void cross_entropy_all(const ReduceProblem& p, const ReduceArgs& a) {
  cpu::cross_entropy_rows(p, a, 0, p.rows / 2);
  cpu::cross_entropy_rows(p, a, p.rows / 2, p.rows);
}

// --- softmax -----------------------------------------------------------------------------------

ReduceProblem softmax_problem(ReduceOp op, DType t, const Rows& in, const RowDims& dims,
                              const RowStrides& in_st, const RowStrides& in2_st,
                              const RowStrides& out_st) {
  ReduceProblem p;
  p.op = op;
  p.dtype = t;
  p.rows = in.m;
  p.cols = in.n;
  p.row_dims = dims;
  p.in_strides = in_st;
  p.in2_strides = in2_st;
  p.out_strides = out_st;
  return p;
}

// y = softmax(x) of `in`'s rows, written to a fresh buffer with strides `out_st`.
Rows run_softmax(DType t, const Rows& in, const RowDims& dims, const RowStrides& in_st,
                 const RowStrides& out_st) {
  Rows x = in;
  Rows y = make_rows(t, dims, out_st, in.m, in.n, kOutTag);
  ReduceArgs a;
  a.in = x.data();
  a.out = y.data();
  softmax_all(softmax_problem(ReduceOp::kSoftmax, t, in, dims, in_st, {}, out_st), a);
  EXPECT_EQ(x.buf.bytes, in.buf.bytes) << "x was modified";
  EXPECT_EQ(y.touched_outside(), 0) << "padding, gaps or guards of y written";
  return y;
}

std::vector<long double> softmax_reference(const Rows& x, int64_t r) {
  long double m = -INFINITY;
  for (int64_t j = 0; j < x.n; ++j) m = std::max<long double>(m, x.get(r, j));
  std::vector<long double> y(static_cast<size_t>(x.n));
  if (m == -INFINITY) {
    std::fill(y.begin(), y.end(), static_cast<long double>(NAN));
    return y;
  }
  long double s = 0;
  for (int64_t j = 0; j < x.n; ++j) s += std::exp(static_cast<long double>(x.get(r, j)) - m);
  for (int64_t j = 0; j < x.n; ++j) y[j] = std::exp(static_cast<long double>(x.get(r, j)) - m) / s;
  return y;
}

// The CPU's error: exp(x - m) and the sum in float64 (relative error ~|x - m| * 2^-53 and
// ~N * 2^-53, far below a float32 ulp), then one rounding to float32 and, for 16-bit rows, one to
// the element (<= 1/2 ulp each: within 1 ulp of the element). float64 rows keep the float64
// error: x - m rounds to ~2^-53 * |x - m| (|x - m| < 300 here), 2^-44 relative bounds it.
double softmax_tolerance(DType t, long double ref) {
  return t == DType::kFloat64 ? std::ldexp(static_cast<double>(std::fabs(ref)), -44) + 1e-300
                              : ulp(t, ref);
}

void expect_softmax_near_reference(DType t, const Rows& x, const Rows& y) {
  int bad = 0;
  for (int64_t r = 0; r < x.m; ++r) {
    const std::vector<long double> ref = softmax_reference(x, r);
    long double sum = 0;
    for (int64_t j = 0; j < x.n; ++j) {
      const double got = y.get(r, j);
      sum += got;
      if (!near(got, ref[j], softmax_tolerance(t, ref[j])) && ++bad <= 5) {
        ADD_FAILURE() << "row " << r << " col " << j << ": got " << got << ", reference "
                      << static_cast<double>(ref[j]);
      }
    }
    // Each y_j within 1 ulp (<= 2^-mantissa * y_j, or the subnormal spacing): the row sums to 1
    // within 2^-mantissa plus N subnormal spacings.
    if (!std::isnan(static_cast<double>(ref[0]))) {
      const double bound =
          t == DType::kFloat64 ? 1e-12 : std::ldexp(1.0, -mantissa_bits(t)) + x.n * ulp(t, 0);
      EXPECT_LE(std::fabs(static_cast<double>(sum - 1)), bound) << "row " << r << " sum";
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(RowReduceCpu, SoftmaxMatchesReference) {
  for (const DType t : kDtypes) {
    for (const int64_t n : kCols) {
      for (const int64_t m : {1, 5}) {
        SCOPED_TRACE(str(t, m, n));
        std::mt19937 gen(static_cast<uint32_t>(n * 31 + m));
        // x rows padded by 5, y rows by 3: a kernel mixing up the strides shows.
        Rows x = make_rows(t, one_dim(m), stride(n + 5), m, n, kInTag);
        fill_random(x, gen);
        const Rows y = run_softmax(t, x, one_dim(m), stride(n + 5), stride(n + 3));
        expect_softmax_near_reference(t, x, y);
      }
    }
  }
}

// Three leading dimensions, each stream with its own strides (gaps between the outer rows).
TEST(RowReduceCpu, SoftmaxMultiDimRows) {
  RowDims dims;
  dims.count = 3;
  dims.size[0] = 2;
  dims.size[1] = 3;
  dims.size[2] = 2;
  for (const DType t : kDtypes) {
    for (const int64_t n : {1, 9, 300}) {
      SCOPED_TRACE(str(t, 12, n));
      const RowStrides in_st{{n + 2, 2 * (n + 2) + 7, 3 * (2 * (n + 2) + 7) + 1}};
      const RowStrides out_st{{3 * n, n, 7 * n}};  // the middle dimension innermost in memory
      std::mt19937 gen(static_cast<uint32_t>(n));
      Rows x = make_rows(t, dims, in_st, 12, n, kInTag);
      fill_random(x, gen);
      const Rows y = run_softmax(t, x, dims, in_st, out_st);
      expect_softmax_near_reference(t, x, y);
    }
  }
}

// Some -inf: their y are exactly 0. All -inf: NaN, as torch.softmax (the empty combination,
// max -inf and sum 0). One finite value among -inf: exactly 1. A NaN: the row is NaN. The other
// rows keep their bits.
TEST(RowReduceCpu, SoftmaxNegInfAndNanRows) {
  for (const DType t : kDtypes) {
    for (const int64_t n : {1, 7, 100}) {
      SCOPED_TRACE(str(t, 6, n));
      std::mt19937 gen(static_cast<uint32_t>(n + 3));
      Rows x = make_rows(t, one_dim(6), stride(n), 6, n, kInTag);
      fill_random(x, gen);
      const Rows clean = run_softmax(t, x, one_dim(6), stride(n), stride(n));
      for (int64_t j = 0; j < n; ++j) {
        if (j % 3 == 1) x.set(1, j, -kInf);     // row 1: some -inf
        x.set(2, j, -kInf);                     // row 2: all -inf
        x.set(3, j, j == n / 2 ? 0.5 : -kInf);  // row 3: one finite value
      }
      x.set(4, n / 2, kNaN);  // row 4: one NaN
      const Rows y = run_softmax(t, x, one_dim(6), stride(n), stride(n));
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(y.bits(0, j), clean.bits(0, j));
        EXPECT_EQ(y.bits(5, j), clean.bits(5, j));
        if (j % 3 == 1) {
          EXPECT_EQ(y.get(1, j), 0.0) << j;
        }
        EXPECT_TRUE(std::isnan(y.get(2, j))) << j;
        EXPECT_EQ(y.get(3, j), j == n / 2 ? 1.0 : 0.0) << j;
        EXPECT_TRUE(std::isnan(y.get(4, j))) << j;
      }
      Rows partial = make_rows(t, one_dim(1), stride(n), 1, n, kInTag);
      for (int64_t j = 0; j < n; ++j) partial.set(0, j, x.get(1, j));
      if (n > 1) {
        expect_softmax_near_reference(t, partial,
                                      run_softmax(t, partial, one_dim(1), stride(n), stride(n)));
      }
    }
  }
}

// A row's bits do not depend on the batch around it.
TEST(RowReduceCpu, SoftmaxRowBitsIgnoreBatch) {
  for (const DType t : kDtypes) {
    for (const int64_t n : kCols) {
      SCOPED_TRACE(str(t, 9, n));
      std::mt19937 gen(static_cast<uint32_t>(n * 5));
      Rows x = make_rows(t, one_dim(9), stride(n + 1), 9, n, kInTag);
      fill_random(x, gen);
      const Rows y = run_softmax(t, x, one_dim(9), stride(n + 1), stride(n));
      Rows one = make_rows(t, one_dim(1), stride(n), 1, n, kInTag);
      for (int64_t j = 0; j < n; ++j) one.set(0, j, x.get(7, j));
      const Rows y1 = run_softmax(t, one, one_dim(1), stride(n), stride(n));
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(y1.bits(0, j), y.bits(7, j)) << j;
    }
  }
}

// The documented operations in this file's own (baseline) build: max, exp(x - max) in float64,
// 16 lanes (element j in lane j % 16) combined pairwise, then round(float(e / s)) (float64 rows:
// e / s). softmax_rows runs whichever ISA clone the CPU supports and must give the same bits.
TEST(RowReduceCpu, SoftmaxEveryIsaCloneGivesTheDocumentedBits) {
  for (const DType t : kDtypes) {
    for (const int64_t n : kCols) {
      SCOPED_TRACE(str(t, 3, n));
      std::mt19937 gen(static_cast<uint32_t>(n * 11));
      Rows x = make_rows(t, one_dim(3), stride(n), 3, n, kInTag);
      fill_random(x, gen);
      const Rows y = run_softmax(t, x, one_dim(3), stride(n), stride(n));
      Rows expected = make_rows(t, one_dim(3), stride(n), 3, n, kOutTag);
      for (int64_t r = 0; r < 3; ++r) {
        double m = -kInf;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, x.get(r, j));
        double lanes[16] = {};
        for (int64_t j = 0; j < n; ++j) lanes[j % 16] += std::exp(x.get(r, j) - m);
        for (int width = 8; width > 0; width /= 2) {
          for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
        }
        for (int64_t j = 0; j < n; ++j) {
          const double v = std::exp(x.get(r, j) - m) / lanes[0];
          expected.set(r, j, t == DType::kFloat64 ? v : static_cast<float>(v));
        }
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(expected.bits(r, j), y.bits(r, j)) << r << " " << j;
      }
    }
  }
}

// --- softmax_backward --------------------------------------------------------------------------

struct BackwardLayout {
  const char* name;
  RowDims dims;
  RowStrides dy, y, dx;
};

std::vector<BackwardLayout> backward_layouts(int64_t n) {
  RowDims two;
  two.count = 2;
  two.size[0] = 3;
  two.size[1] = 2;
  return {
      {"contiguous", one_dim(6), stride(n), stride(n), stride(n)},
      {"padded", one_dim(6), stride(n + 3), stride(n + 8), stride(n + 1)},
      {"dims2", two, {{n + 1, 4 * (n + 1)}}, {{2 * n, n}}, {{n + 5, 3 * (n + 5) + 2}}},
  };
}

// dx = y * (dy - dot) with dot = sum(dy * y), against the long-double formula from the same
// (rounded) dy and y. The CPU's dot carries a float64 error of at most ~(N + 16) 2^-53 sum|dy y|
// (16 lanes, combined pairwise), which y_j scales; dy - dot and the product add 2^-52 relative;
// then the output's rounding (1 ulp; float64 rows: none beyond the above).
TEST(RowReduceCpu, SoftmaxBackwardMatchesFormula) {
  for (const DType t : kDtypes) {
    for (const int64_t n : kCols) {
      for (const BackwardLayout& l : backward_layouts(n)) {
        SCOPED_TRACE(str(t, 6, n) + " " + l.name);
        std::mt19937 gen(static_cast<uint32_t>(n * 17 + 1));
        Rows dy = make_rows(t, l.dims, l.dy, 6, n, kInTag);
        fill_random(dy, gen);
        Rows x = make_rows(t, l.dims, l.y, 6, n, kIn2Tag);
        fill_random(x, gen);
        const Rows y = run_softmax(t, x, l.dims, l.y, l.y);
        Rows y_in = y, dy_in = dy;
        Rows dx = make_rows(t, l.dims, l.dx, 6, n, kOutTag);
        ReduceArgs a;
        a.in = dy_in.data();
        a.in2 = y_in.data();
        a.out = dx.data();
        softmax_all(softmax_problem(ReduceOp::kSoftmaxBackward, t, dy, l.dims, l.dy, l.y, l.dx), a);
        EXPECT_EQ(dy_in.buf.bytes, dy.buf.bytes);
        EXPECT_EQ(y_in.buf.bytes, y.buf.bytes);
        EXPECT_EQ(dx.touched_outside(), 0);
        int bad = 0;
        for (int64_t r = 0; r < 6; ++r) {
          long double dot = 0, dot_abs = 0;
          for (int64_t j = 0; j < n; ++j) {
            dot += static_cast<long double>(dy.get(r, j)) * y.get(r, j);
            dot_abs += std::fabs(static_cast<long double>(dy.get(r, j)) * y.get(r, j));
          }
          const double dot_err = std::ldexp(static_cast<double>(dot_abs), -52) * (n + 16);
          for (int64_t j = 0; j < n; ++j) {
            const long double yj = y.get(r, j), dyj = dy.get(r, j);
            const long double ref = yj * (dyj - dot);
            const double tol =
                (t == DType::kFloat64 ? 0.0 : ulp(t, ref)) + static_cast<double>(yj) * dot_err +
                std::ldexp(static_cast<double>(yj * (std::fabs(dyj) + std::fabs(dot))), -51);
            if (!near(dx.get(r, j), ref, tol) && ++bad <= 5) {
              ADD_FAILURE() << "row " << r << " col " << j << ": got " << dx.get(r, j)
                            << ", reference " << static_cast<double>(ref);
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// dx written over dy (each element read before it is written): the out-of-place bits.
TEST(RowReduceCpu, SoftmaxBackwardInPlace) {
  for (const DType t : kDtypes) {
    for (const int64_t n : {7, 1000}) {
      SCOPED_TRACE(str(t, 6, n));
      std::mt19937 gen(static_cast<uint32_t>(n));
      Rows dy = make_rows(t, one_dim(6), stride(n + 2), 6, n, kInTag);
      fill_random(dy, gen);
      Rows x = make_rows(t, one_dim(6), stride(n), 6, n, kIn2Tag);
      fill_random(x, gen);
      Rows y = run_softmax(t, x, one_dim(6), stride(n), stride(n));
      Rows dx = make_rows(t, one_dim(6), stride(n + 2), 6, n, kOutTag);
      const ReduceProblem p = softmax_problem(ReduceOp::kSoftmaxBackward, t, dy, one_dim(6),
                                              stride(n + 2), stride(n), stride(n + 2));
      ReduceArgs a;
      a.in = dy.data();
      a.in2 = y.data();
      a.out = dx.data();
      softmax_all(p, a);
      a.out = dy.data();
      softmax_all(p, a);
      for (int64_t r = 0; r < 6; ++r) {
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(dy.bits(r, j), dx.bits(r, j)) << r << " " << j;
      }
    }
  }
}

// --- cross_entropy -----------------------------------------------------------------------------

struct CeOptions {
  bool smoothing = false;
  float eps = 0.f;
  bool softcap = false;
  float c = 0.f;
  int64_t ignore_index = -100;
};

std::vector<CeOptions> ce_options() {
  return {{false, 0.f, false, 0.f, -100},
          {true, 0.1f, false, 0.f, -100},
          {false, 0.f, true, 30.f, -100},
          {true, 0.25f, true, 15.f, -100}};
}

std::string str(const CeOptions& o) {
  return std::string("smoothing=") + std::to_string(o.smoothing ? o.eps : 0.f) +
         " softcap=" + std::to_string(o.softcap ? o.c : 0.f);
}

ReduceProblem ce_problem(ReduceOp op, DType t, int64_t m, int64_t n, int64_t ld_in, int64_t ld_out,
                         bool writes_rows, const CeOptions& o) {
  ReduceProblem p;
  p.op = op;
  p.dtype = t;
  p.rows = m;
  p.cols = n;
  p.row_dims = one_dim(m);
  p.in_strides = stride(ld_in);
  p.out_strides = stride(ld_out);
  p.writes_rows = writes_rows;
  p.label_smoothing = o.smoothing;
  p.softcap = o.softcap;
  return p;
}

ReduceArgs ce_args(const CeOptions& o, const std::vector<int64_t>& target) {
  ReduceArgs a;
  a.target = target.data();
  a.ignore_index = o.ignore_index;
  a.label_smoothing = o.smoothing ? o.eps : 0.5f;  // off: must not be read
  a.softcap = o.softcap ? o.c : 7.f;               // off: must not be read
  return a;
}

long double capped(const CeOptions& o, double x) {
  return o.softcap ? o.c * std::tanh(static_cast<long double>(x) / o.c)
                   : static_cast<long double>(x);
}

long double ce_lse(const Rows& x, int64_t r, const CeOptions& o) {
  long double m = -INFINITY;
  for (int64_t j = 0; j < x.n; ++j) m = std::max(m, capped(o, x.get(r, j)));
  if (m == -INFINITY) return m;
  long double s = 0;
  for (int64_t j = 0; j < x.n; ++j) s += std::exp(capped(o, x.get(r, j)) - m);
  return m + std::log(s);
}

bool in_range(int64_t t, int64_t n) { return t >= 0 && t < n; }

long double ce_loss(const Rows& x, int64_t r, int64_t t, long double lse, const CeOptions& o) {
  if (t == o.ignore_index) return 0;
  if (!in_range(t, x.n)) return NAN;
  const long double eps = o.smoothing ? o.eps : 0.f;
  long double loss = lse - (1 - eps) * capped(o, x.get(r, t));
  if (o.smoothing) {
    long double sum = 0;
    for (int64_t j = 0; j < x.n; ++j) sum += capped(o, x.get(r, j));
    loss -= eps / x.n * sum;
  }
  return loss;
}

long double ce_grad(const Rows& x, int64_t r, int64_t j, int64_t t, long double lse,
                    long double scale, const CeOptions& o) {
  if (t == o.ignore_index) return 0;
  if (!in_range(t, x.n)) return NAN;
  const long double eps = o.smoothing ? o.eps : 0.f;
  const long double z = capped(o, x.get(r, j));
  long double g = std::exp(z - lse) - (j == t ? 1 - eps : 0) - eps / x.n;
  g *= scale;
  if (o.softcap) g *= 1 - (z / o.c) * (z / o.c);
  return g;
}

// The CPU's float64 pipeline: lse's error is ~|z - m| 2^-53 from the exponentials plus the log's
// (< 1e-13 absolute here); the loss adds the cancellation of lse against z_t (and the smoothing
// sum); exp(z - lse) inherits lse's error relative. 1e-12 covers these with room; the rounding of
// the stored value (1 ulp) comes on top.
double lse_tolerance(DType rows_t, long double lse) {
  return ulp(row_value_type(rows_t), lse) + 1e-12 * (1 + std::fabs(static_cast<double>(lse)));
}
double grad_tolerance(DType t, long double ref, long double p, long double scale) {
  return ulp(t, ref) + static_cast<double>(std::fabs(scale) * (p * 1e-12L + 1e-15L));
}

struct CeCase {
  DType t;
  int64_t m, n;
  int64_t ld_in, ld_out;
  CeOptions o;
};

// Targets: random in [0, V), with an ignored row, and two out-of-range rows (V and -5) where M
// allows.
std::vector<int64_t> targets(int64_t m, int64_t n, const CeOptions& o, std::mt19937& gen) {
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  std::vector<int64_t> t(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) t[r] = pick(gen);
  if (m > 2) t[2] = o.ignore_index;
  if (m > 4) t[4] = n;
  if (m > 5) t[5] = -5;
  return t;
}

struct CeForward {
  Rows g;
  PerRow loss, lse;
};

CeForward run_ce_forward(const CeCase& c, const Rows& x, const std::vector<int64_t>& target,
                         bool writes_rows, double grad_scale) {
  Rows xin = x;
  CeForward f{make_rows(c.t, one_dim(c.m), stride(c.ld_out), c.m, c.n, kOutTag), PerRow(c.t, c.m),
              PerRow(c.t, c.m)};
  PerRow scale(c.t, 1);
  scale.set(0, grad_scale);
  ReduceArgs a = ce_args(c.o, target);
  a.in = xin.data();
  a.out = writes_rows ? f.g.data() : nullptr;
  a.loss = f.loss.data();
  a.lse = f.lse.data();
  a.grad_scale = writes_rows ? scale.data() : nullptr;
  cross_entropy_all(
      ce_problem(ReduceOp::kCrossEntropy, c.t, c.m, c.n, c.ld_in, c.ld_out, writes_rows, c.o), a);
  EXPECT_EQ(xin.buf.bytes, x.buf.bytes) << "logits were modified";
  EXPECT_EQ(f.g.touched_outside(), 0);
  return f;
}

Rows run_ce_backward(const CeCase& c, const Rows& x, const std::vector<int64_t>& target,
                     PerRow& lse, PerRow& dloss) {
  Rows xin = x;
  Rows g = make_rows(c.t, one_dim(c.m), stride(c.ld_out), c.m, c.n, kOutTag);
  ReduceArgs a = ce_args(c.o, target);
  a.in = xin.data();
  a.out = g.data();
  a.lse = lse.data();
  a.dloss = dloss.data();
  cross_entropy_all(
      ce_problem(ReduceOp::kCrossEntropyBackward, c.t, c.m, c.n, c.ld_in, c.ld_out, true, c.o), a);
  EXPECT_EQ(xin.buf.bytes, x.buf.bytes) << "logits were modified";
  EXPECT_EQ(g.touched_outside(), 0);
  return g;
}

// The gradient rows of `g` against the reference from `lse_of(r)` and `scale_of(r)`.
template <typename Lse, typename Scale>
void expect_grad_near_reference(const CeCase& c, const Rows& x, const std::vector<int64_t>& target,
                                const Rows& g, Lse lse_of, Scale scale_of) {
  int bad = 0;
  for (int64_t r = 0; r < c.m; ++r) {
    const long double lse = lse_of(r), scale = scale_of(r);
    for (int64_t j = 0; j < c.n; ++j) {
      const long double ref = ce_grad(x, r, j, target[r], lse, scale, c.o);
      const long double p = std::exp(capped(c.o, x.get(r, j)) - lse);
      if (!near(g.get(r, j), ref, grad_tolerance(c.t, ref, p, scale)) && ++bad <= 5) {
        ADD_FAILURE() << "row " << r << " col " << j << " target " << target[r] << ": got "
                      << g.get(r, j) << ", reference " << static_cast<double>(ref);
      }
    }
    if (target[r] == c.o.ignore_index) {
      for (int64_t j = 0; j < c.n; ++j) EXPECT_EQ(g.bits(r, j), 0u) << "ignored row: +0";
    }
  }
  EXPECT_EQ(bad, 0);
}

std::vector<CeCase> ce_cases() {
  std::vector<CeCase> cases;
  for (const DType t : kDtypes) {
    for (const int64_t n : kCols) {
      for (const CeOptions& o : ce_options()) {
        cases.push_back({t, 7, n, n + 5, n + 3, o});  // rows of their own strides
      }
    }
  }
  return cases;
}

TEST(RowReduceCpu, CrossEntropyMatchesReference) {
  for (const CeCase& c : ce_cases()) {
    for (const bool writes : {true, false}) {
      SCOPED_TRACE(str(c.t, c.m, c.n) + " " + str(c.o) + (writes ? " with" : " without") +
                   " gradient");
      std::mt19937 gen(static_cast<uint32_t>(c.n * 7 + c.o.smoothing + 2 * c.o.softcap));
      Rows x = make_rows(c.t, one_dim(c.m), stride(c.ld_in), c.m, c.n, kInTag);
      fill_random(x, gen, 0.5);
      const std::vector<int64_t> target = targets(c.m, c.n, c.o, gen);
      const double grad_scale = 1.0 / 3;
      const CeForward f = run_ce_forward(c, x, target, writes, grad_scale);
      const DType rt = row_value_type(c.t);
      const double stored_scale =
          rt == DType::kFloat64 ? grad_scale : static_cast<float>(grad_scale);
      for (int64_t r = 0; r < c.m; ++r) {
        const long double lse = ce_lse(x, r, c.o);
        EXPECT_TRUE(near(f.lse.get(r), lse, lse_tolerance(c.t, lse)))
            << "row " << r << " lse " << f.lse.get(r) << " reference " << static_cast<double>(lse);
        const long double loss = ce_loss(x, r, target[r], lse, c.o);
        const double zt = in_range(target[r], c.n) ? std::fabs(x.get(r, target[r])) : 0;
        const double tol =
            lse_tolerance(c.t, loss) + 1e-12 * (std::fabs(static_cast<double>(lse)) + zt + 30);
        EXPECT_TRUE(near(f.loss.get(r), loss, tol))
            << "row " << r << " target " << target[r] << " loss " << f.loss.get(r) << " reference "
            << static_cast<double>(loss);
      }
      EXPECT_EQ(f.loss.get(2), 0.0) << "ignored row";
      EXPECT_TRUE(std::isnan(f.loss.get(4)) && std::isnan(f.loss.get(5))) << "out-of-range rows";
      if (writes) {
        expect_grad_near_reference(
            c, x, target, f.g, [&](int64_t r) { return ce_lse(x, r, c.o); },
            [&](int64_t) { return static_cast<long double>(stored_scale); });
      } else {
        EXPECT_EQ(f.g.touched_outside(), 0);
        for (int64_t r = 0; r < c.m; ++r) {
          for (int64_t j = 0; j < c.n; ++j) ASSERT_EQ(f.g.bits(r, j), f.g.buf.poison);
        }
      }
    }
  }
}

TEST(RowReduceCpu, CrossEntropyBackwardMatchesReference) {
  for (const CeCase& c : ce_cases()) {
    SCOPED_TRACE(str(c.t, c.m, c.n) + " " + str(c.o));
    std::mt19937 gen(static_cast<uint32_t>(c.n * 13 + c.o.smoothing + 2 * c.o.softcap));
    Rows x = make_rows(c.t, one_dim(c.m), stride(c.ld_in), c.m, c.n, kInTag);
    fill_random(x, gen, 0.5);
    const std::vector<int64_t> target = targets(c.m, c.n, c.o, gen);
    CeForward f = run_ce_forward(c, x, target, false, 1.0);
    PerRow dloss(c.t, c.m);
    std::normal_distribution<double> normal;
    for (int64_t r = 0; r < c.m; ++r) dloss.set(r, normal(gen));
    const Rows g = run_ce_backward(c, x, target, f.lse, dloss);
    expect_grad_near_reference(
        c, x, target, g, [&](int64_t r) { return static_cast<long double>(f.lse.get(r)); },
        [&](int64_t r) { return static_cast<long double>(dloss.get(r)); });
  }
}

// The gradient written over the logits (out == in, one stride) has the out-of-place bits: the
// forward's fused gradient and the backward's.
TEST(RowReduceCpu, CrossEntropyInPlaceEqualsOutOfPlace) {
  for (CeCase c : ce_cases()) {
    c.ld_out = c.ld_in;
    SCOPED_TRACE(str(c.t, c.m, c.n) + " " + str(c.o));
    std::mt19937 gen(static_cast<uint32_t>(c.n * 3 + 1));
    Rows x = make_rows(c.t, one_dim(c.m), stride(c.ld_in), c.m, c.n, kInTag);
    fill_random(x, gen, 0.5);
    const std::vector<int64_t> target = targets(c.m, c.n, c.o, gen);
    const CeForward f = run_ce_forward(c, x, target, true, 0.125);
    // Forward, in place.
    Rows xg = x;
    PerRow loss(c.t, c.m), lse(c.t, c.m), scale(c.t, 1);
    scale.set(0, 0.125);
    ReduceArgs a = ce_args(c.o, target);
    a.in = xg.data();
    a.out = xg.data();
    a.loss = loss.data();
    a.lse = lse.data();
    a.grad_scale = scale.data();
    cross_entropy_all(
        ce_problem(ReduceOp::kCrossEntropy, c.t, c.m, c.n, c.ld_in, c.ld_in, true, c.o), a);
    EXPECT_EQ(xg.touched_outside(), 0);
    for (int64_t r = 0; r < c.m; ++r) {
      for (int64_t j = 0; j < c.n; ++j) ASSERT_EQ(xg.bits(r, j), f.g.bits(r, j)) << r << " " << j;
      EXPECT_TRUE(loss.get(r) == f.loss.get(r) ||
                  (std::isnan(loss.get(r)) && std::isnan(f.loss.get(r))))
          << r;
    }
    // Backward, in place.
    PerRow dloss(c.t, c.m), lse2 = f.lse;
    for (int64_t r = 0; r < c.m; ++r) dloss.set(r, 0.5 + r);
    const Rows g = run_ce_backward(c, x, target, lse2, dloss);
    Rows xb = x;
    ReduceArgs b = ce_args(c.o, target);
    b.in = xb.data();
    b.out = xb.data();
    b.lse = lse2.data();
    b.dloss = dloss.data();
    cross_entropy_all(
        ce_problem(ReduceOp::kCrossEntropyBackward, c.t, c.m, c.n, c.ld_in, c.ld_in, true, c.o), b);
    for (int64_t r = 0; r < c.m; ++r) {
      for (int64_t j = 0; j < c.n; ++j) ASSERT_EQ(xb.bits(r, j), g.bits(r, j)) << r << " " << j;
    }
  }
}

// Logits in a buffer of exactly M x V elements (no guards: ASan reports any read past either
// end), targets out of range on the first and last rows and far beyond: loss NaN, the gradient
// row NaN, lse still the row's; the other rows untouched by them.
TEST(RowReduceCpu, CrossEntropyOutOfRangeTargetsNeverReadOutOfBounds) {
  for (const DType t : kDtypes) {
    for (const int64_t n : {1, 8, 1000}) {
      for (const CeOptions& o : ce_options()) {
        SCOPED_TRACE(str(t, 5, n) + " " + str(o));
        const int64_t m = 5;
        std::mt19937 gen(static_cast<uint32_t>(n));
        Rows x = make_rows(t, one_dim(m), stride(n), m, n, kInTag, /*guard=*/0);
        fill_random(x, gen);
        const std::vector<int64_t> target = {-1, std::numeric_limits<int64_t>::max(), 0,
                                             std::numeric_limits<int64_t>::min(), n};
        const CeCase c{t, m, n, n, n, o};
        CeForward f = run_ce_forward(c, x, target, true, 1.0);
        PerRow dloss(t, m);
        for (int64_t r = 0; r < m; ++r) dloss.set(r, 1.0);
        const Rows g = run_ce_backward(c, x, target, f.lse, dloss);
        for (int64_t r = 0; r < m; ++r) {
          const long double lse = ce_lse(x, r, o);
          EXPECT_TRUE(near(f.lse.get(r), lse, lse_tolerance(t, lse))) << r;
          if (r == 2) {
            EXPECT_FALSE(std::isnan(f.loss.get(r)));
            continue;
          }
          EXPECT_TRUE(std::isnan(f.loss.get(r))) << r;
          for (int64_t j = 0; j < n; ++j) {
            EXPECT_TRUE(std::isnan(f.g.get(r, j))) << r << " " << j;
            EXPECT_TRUE(std::isnan(g.get(r, j))) << r << " " << j;
          }
        }
        // In place, over the exact buffer.
        Rows xg = x;
        PerRow loss(t, m), lse(t, m), scale(t, 1);
        scale.set(0, 1.0);
        ReduceArgs a = ce_args(o, target);
        a.in = xg.data();
        a.out = xg.data();
        a.loss = loss.data();
        a.lse = lse.data();
        a.grad_scale = scale.data();
        cross_entropy_all(ce_problem(ReduceOp::kCrossEntropy, t, m, n, n, n, true, o), a);
        EXPECT_TRUE(std::isnan(xg.get(4, n - 1)));
      }
    }
  }
}

// ignore_index inside [0, V): those rows are ignored (loss 0, gradient +0), not scored.
TEST(RowReduceCpu, CrossEntropyIgnoreIndexInRange) {
  for (const DType t : kDtypes) {
    CeOptions o;
    o.ignore_index = 3;
    const CeCase c{t, 4, 10, 10, 12, o};
    std::mt19937 gen(5);
    Rows x = make_rows(t, one_dim(4), stride(10), 4, 10, kInTag);
    fill_random(x, gen);
    const std::vector<int64_t> target = {3, 4, 3, -100};  // -100 is out of range here
    const CeForward f = run_ce_forward(c, x, target, true, 2.0);
    EXPECT_EQ(f.loss.get(0), 0.0);
    EXPECT_EQ(f.loss.get(2), 0.0);
    EXPECT_GT(f.loss.get(1), 0.0);
    EXPECT_TRUE(std::isnan(f.loss.get(3)));
    for (int64_t j = 0; j < 10; ++j) {
      EXPECT_EQ(f.g.bits(0, j), 0u);
      EXPECT_EQ(f.g.bits(2, j), 0u);
      EXPECT_TRUE(std::isnan(f.g.get(3, j)));
    }
  }
}

// -inf logits: their probability is 0, so their gradient is -eps / V * scale; a row of -inf has
// lse -inf (the empty combination), a NaN loss (-inf - -inf) and a NaN gradient.
TEST(RowReduceCpu, CrossEntropyNegInfLogits) {
  for (const DType t : kDtypes) {
    for (const CeOptions& o : {ce_options()[0], ce_options()[1]}) {
      SCOPED_TRACE(str(t, 2, 50) + " " + str(o));
      const CeCase c{t, 2, 50, 50, 50, o};
      std::mt19937 gen(9);
      Rows x = make_rows(t, one_dim(2), stride(50), 2, 50, kInTag);
      fill_random(x, gen);
      for (int64_t j = 1; j < 50; j += 4) x.set(0, j, -kInf);
      const std::vector<int64_t> target = {2, 7};
      const CeForward f = run_ce_forward(c, x, target, true, 1.0);
      for (int64_t r = 0; r < 2; ++r) {
        const long double lse = ce_lse(x, r, o);
        EXPECT_TRUE(near(f.lse.get(r), lse, lse_tolerance(t, lse)));
        // With smoothing the sum of z is -inf: the loss +inf (as torch's).
        const long double loss = ce_loss(x, r, target[r], lse, o);
        EXPECT_EQ(std::isfinite(static_cast<double>(loss)), !(o.smoothing && r == 0));
        EXPECT_TRUE(
            near(f.loss.get(r), loss,
                 lse_tolerance(t, loss) + 1e-12 * (std::fabs(static_cast<double>(lse)) + 30)))
            << r << ": " << f.loss.get(r) << " against " << static_cast<double>(loss);
      }
      expect_grad_near_reference(
          c, x, target, f.g, [&](int64_t r) { return ce_lse(x, r, o); },
          [&](int64_t) { return 1.0L; });
      for (int64_t j = 1; j < 50; j += 4) {
        EXPECT_EQ(f.g.get(0, j), o.smoothing ? host_round(t, -o.eps / 50.0) : 0.0) << j;
      }

      const CeCase one{t, 1, 50, 50, 50, o};
      Rows all = make_rows(t, one_dim(1), stride(50), 1, 50, kInTag);
      for (int64_t j = 0; j < 50; ++j) all.set(0, j, -kInf);
      const CeForward g = run_ce_forward(one, all, {2}, true, 1.0);
      EXPECT_EQ(g.lse.get(0), -kInf);
      EXPECT_TRUE(std::isnan(g.loss.get(0)));
      for (int64_t j = 0; j < 50; ++j) EXPECT_TRUE(std::isnan(g.g.get(0, j))) << j;
    }
  }
}

// One range [2, 5) of rows: exactly those rows are written (the others keep their poison, the
// per-row values their NaN), with the bits of a call over every row.
TEST(RowReduceCpu, RowRangesWriteOnlyTheirRows) {
  for (const DType t : kDtypes) {
    const int64_t m = 7, n = 33;
    SCOPED_TRACE(str(t, m, n));
    std::mt19937 gen(21);
    Rows x = make_rows(t, one_dim(m), stride(n + 1), m, n, kInTag);
    fill_random(x, gen);
    Rows x2 = make_rows(t, one_dim(m), stride(n + 1), m, n, kIn2Tag);
    fill_random(x2, gen);
    for (const ReduceOp op : {ReduceOp::kSoftmax, ReduceOp::kSoftmaxBackward,
                              ReduceOp::kCrossEntropy, ReduceOp::kCrossEntropyBackward}) {
      SCOPED_TRACE(traits_of(op).name);
      const bool ce = traits_of(op).takes_targets;
      const std::vector<int64_t> target = {0, 1, 2, 3, 4, 5, 6};
      PerRow loss_all(t, m), lse_all(t, m), loss_part(t, m), lse_part(t, m), per_row(t, m),
          scale(t, 1);
      scale.set(0, 0.5);
      for (int64_t r = 0; r < m; ++r) {
        per_row.set(r, 0.25 * (r + 1));
        lse_all.set(r, 4.0);
        lse_part.set(r, 4.0);
      }
      Rows all = make_rows(t, one_dim(m), stride(n + 2), m, n, kOutTag);
      Rows part = all;
      ReduceProblem p =
          ce ? ce_problem(op, t, m, n, n + 1, n + 2, true, CeOptions{})
             : softmax_problem(op, t, x, one_dim(m), stride(n + 1), stride(n + 1), stride(n + 2));
      auto args = [&](Rows& out, PerRow& loss, PerRow& lse) {
        ReduceArgs a = ce_args(CeOptions{}, target);
        a.in = x.data();
        a.in2 = x2.data();
        a.out = out.data();
        a.loss = loss.data();
        a.lse = lse.data();
        a.dloss = per_row.data();
        a.grad_scale = scale.data();
        return a;
      };
      const ReduceArgs a_all = args(all, loss_all, lse_all),
                       a_part = args(part, loss_part, lse_part);
      if (ce) {
        cpu::cross_entropy_rows(p, a_all, 0, m);
        cpu::cross_entropy_rows(p, a_part, 2, 5);
      } else {
        cpu::softmax_rows(p, a_all, 0, m);
        cpu::softmax_rows(p, a_part, 2, 5);
      }
      for (int64_t r = 0; r < m; ++r) {
        const bool inside = r >= 2 && r < 5;
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(part.bits(r, j), inside ? all.bits(r, j) : part.buf.poison) << r << " " << j;
        }
        if (op == ReduceOp::kCrossEntropy) {
          EXPECT_EQ(std::isnan(loss_part.get(r)), !inside) << r;
          if (inside) {
            EXPECT_EQ(loss_part.get(r), loss_all.get(r)) << r;
            EXPECT_EQ(lse_part.get(r), lse_all.get(r)) << r;
          } else {
            EXPECT_EQ(lse_part.get(r), 4.0) << r;
          }
        }
      }
      EXPECT_EQ(part.touched_outside(), 0);
    }
  }
}

}  // namespace
}  // namespace oink
