#include "linear_quant_golden.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "linear_golden.h"
#include "op_harness.h"

namespace collops {
namespace testing {
namespace {

/// Integers in [lo, hi], different per (seed, rank, what).
std::vector<double> Integers(int64_t count, int64_t lo, int64_t hi, uint64_t seed, int rank,
                             int what) {
  std::vector<double> values = LinearUniform(ACL_FLOAT, count, seed, rank, what, 0.0, 1.0);
  for (auto& v : values) v = std::min<double>(hi, lo + std::floor(v * (hi - lo + 1)));
  return values;
}

/// One rank's inputs and its product's contribution to y, in double.
struct RankInputs {
  std::vector<double> x, w, bias, scale, token;
};

}  // namespace

std::string LinearQuantCase::Name() const {
  static const char* kQuant[] = {"PER_TENSOR", "PER_CHANNEL", "PER_GROUP", "PER_TOKEN"};
  return Concat(
      type == 0 ? "LINEAR_ALL_REDUCE" : "PURE_LINEAR", " ", xDtype == ACL_INT8 ? "W8A8" : "W8A16",
      " ", kQuant[quantType], quantType == 2 ? Concat(" G ", groupSize) : "", " x ",
      DataTypeName(xDtype), " ", DimsToString(MakeDims(xShape)), " n ", n, " y ",
      xDtype == ACL_INT8 ? DataTypeName(static_cast<DataType>(outDataType)) : DataTypeName(xDtype),
      transWeight ? " transWeight" : "", hasResidual ? " residual" : "",
      hasBias ? " bias" : " no bias",
      (quantType == 1 || quantType == 3) && scaleWithRow ? " scale [1, n]" : "");
}

nlohmann::json LinearQuantCase::Param() const {
  return {{"type", type},
          {"transWeight", transWeight},
          {"hasResidual", hasResidual},
          {"quantType", quantType},
          {"quantGroupSize", quantType == 2 ? groupSize : 0},
          {"outDataType", xDtype == ACL_INT8 ? outDataType : -1}};
}

void RunLinearQuantCase(const LinearQuantCase& c, const nlohmann::json& commParams, int rank,
                        int rankSize, const std::string& what) {
  const std::string where = Concat(what, ": ", c.Name(), " rank ", rank, " of ", rankSize);
  const bool w8a8 = c.xDtype == ACL_INT8;
  const DataType yDtype = w8a8 ? static_cast<DataType>(c.outDataType) : c.xDtype;
  const DataType factorDtype = w8a8 ? ACL_FLOAT : c.xDtype;
  const int64_t k = c.xShape.back(), n = c.n, rows = Rows(c.xShape);
  const int64_t groups = c.quantType == 2 ? k / c.groupSize : 1;
  // The factors' shape and count.
  std::vector<int64_t> scaleShape;
  switch (c.quantType) {
    case 0:
      scaleShape = {1};
      break;
    case 2:
      scaleShape =
          c.transWeight ? std::vector<int64_t>{n, groups} : std::vector<int64_t>{groups, n};
      break;
    default:
      scaleShape = c.scaleWithRow ? std::vector<int64_t>{1, n} : std::vector<int64_t>{n};
  }
  const int64_t factors = c.quantType == 0 ? 1 : n * groups;
  // Factor of output channel j at position t along k.
  auto factorAt = [&](int64_t j, int64_t t) -> int64_t {
    if (c.quantType == 0) return 0;
    if (c.quantType == 2)
      return c.transWeight ? j * groups + t / c.groupSize : (t / c.groupSize) * n + j;
    return j;
  };
  std::vector<RankInputs> in(rankSize);
  for (int r = 0; r < rankSize; ++r) {
    RankInputs& i = in[r];
    i.x = w8a8 ? Integers(rows * k, -128, 127, c.seed, r, 1)
               : LinearUniform(c.xDtype, rows * k, c.seed, r, 1, -1.0, 1.0);
    i.w = Integers(k * n, -128, 127, c.seed, r, 2);
    if (w8a8) {
      if (c.hasBias) i.bias = Integers(n, -20000, 20000, c.seed, r, 3);
      i.scale = LinearUniform(ACL_FLOAT, factors, c.seed, r, 4, 0.5e-4, 1.5e-4);
      if (c.quantType == 3) i.token = LinearUniform(ACL_FLOAT, rows, c.seed, r, 5, 0.5, 1.5);
    } else {
      if (c.hasBias) i.bias = LinearUniform(c.xDtype, factors, c.seed, r, 3, -4.0, 4.0);
      i.scale = LinearUniform(c.xDtype, factors, c.seed, r, 4, 0.004, 0.02);
    }
  }
  const std::vector<double> residual = LinearUniform(yDtype, n, c.seed, rank, 6, -1.0, 1.0);

  // W as a [k, n] matrix of doubles from the stored layout.
  auto weightAt = [&](const std::vector<double>& w, int64_t t, int64_t j) {
    return c.transWeight ? w[j * k + t] : w[t * n + j];
  };
  auto contribution = [&](const RankInputs& i) {
    std::vector<double> out(rows * n);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t t = 0; t < k; ++t) {
          double wv = weightAt(i.w, t, j);
          if (!w8a8) {
            const int64_t f = factorAt(j, t);
            const double offset = c.hasBias ? i.bias[f] : 0.0;
            wv = RoundTrip(c.xDtype, (wv + offset) * i.scale[f]);
          }
          sum += i.x[row * k + t] * wv;
        }
        if (w8a8) {
          if (c.hasBias) sum += i.bias[j];
          sum *= i.scale[factorAt(j, 0)];
          if (c.quantType == 3) sum *= i.token[row];
        }
        out[row * n + j] = sum;
      }
    }
    return out;
  };
  std::vector<double> golden(rows * n, 0.0);
  for (int r = 0; r < rankSize; ++r) {
    if (c.type == 3 && r != rank) continue;
    const std::vector<double> part = contribution(in[r]);
    for (size_t e = 0; e < golden.size(); ++e) golden[e] += part[e];
  }
  if (c.hasResidual) {
    for (size_t e = 0; e < golden.size(); ++e) golden[e] += residual[e % n];
  }

  nlohmann::json param = c.Param();
  for (const auto& [key, value] : commParams.items()) param[key] = value;
  OperationPtr op = MakeOperation("LinearParallelOperation", param);
  const RankInputs& mine = in[rank];
  const std::vector<int64_t> wShape =
      c.transWeight ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
  std::vector<HostTensor> ins = {
      HostTensor::FromValues(c.xDtype, c.xShape, mine.x),
      HostTensor::FromValues(ACL_INT8, wShape, mine.w),
      c.hasBias ? HostTensor::FromValues(w8a8 ? ACL_INT32 : factorDtype,
                                         w8a8 ? std::vector<int64_t>{n} : scaleShape, mine.bias)
                : HostTensor(w8a8 ? ACL_INT32 : factorDtype, {0}),
      HostTensor::FromValues(factorDtype, scaleShape, mine.scale)};
  if (c.hasResidual) ins.push_back(HostTensor::FromValues(yDtype, {n}, residual));
  if (c.quantType == 3) ins.push_back(HostTensor::FromValues(ACL_FLOAT, {rows}, mine.token));
  std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
  ASSERT_EQ(outs.size(), 1u) << where;
  std::vector<int64_t> yShape = c.xShape;
  yShape.back() = n;
  EXPECT_EQ(outs[0].shape(), yShape) << where;
  EXPECT_EQ(outs[0].dtype(), yDtype) << where;
  const Status status = RunOperation(*op, Tensors(ins), Tensors(outs));
  ASSERT_EQ(status, NO_ERROR) << where << ": " << StatusName(status) << ": " << LastErrorMessage();
  ExpectClose(outs[0], golden, where);
}

std::vector<LinearQuantCase> LinearQuantCases(int type) {
  std::vector<LinearQuantCase> cases;
  uint64_t seed = 500 + 100 * type;
  int variant = 0;
  auto add = [&](DataType xDtype, int out, int quant) {
    for (bool trans : {true, false}) {
      LinearQuantCase c;
      c.type = type;
      c.quantType = quant;
      c.xDtype = xDtype;
      c.outDataType = out;
      c.transWeight = trans;
      // Vary the rest across the cases: bias or not, residual or not, 2-D or 3-D x, [n] or [1, n].
      ++variant;
      c.hasBias = variant % 3 != 0;
      c.hasResidual = variant % 2 == 0;
      c.scaleWithRow = variant % 4 == 1;
      c.groupSize = quant == 2 ? (trans ? 8 : 16) : 0;
      c.xShape = variant % 2 == 0 ? std::vector<int64_t>{6, 48} : std::vector<int64_t>{2, 3, 32};
      c.n = trans ? 24 : 17;
      c.seed = ++seed;
      cases.push_back(c);
    }
  };
  for (int out : {ACL_FLOAT16, ACL_BF16}) {
    for (int quant : {0, 1, 3}) add(ACL_INT8, out, quant);
  }
  for (DataType x : {ACL_FLOAT16, ACL_BF16}) {
    for (int quant : {0, 1, 2}) add(x, -1, quant);
  }
  return cases;
}

}  // namespace testing
}  // namespace collops
