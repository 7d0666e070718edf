#include "linear_golden.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <random>

#include "op_harness.h"
#include "process_ranks.h"

namespace collops {
namespace testing {
namespace {

std::vector<double> Uniform(DataType dtype, int64_t count, uint64_t seed, int rank, int what) {
  return LinearUniform(dtype, count, seed, rank, what, -1.0, 1.0);
}

/// rows x n product of x (rows x k) and the weight as stored ([n, k] or [k, n]), in double.
std::vector<double> Product(const std::vector<double>& x, const std::vector<double>& w,
                            int64_t rows, int64_t k, int64_t n, bool transWeight) {
  std::vector<double> out(rows * n, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0;
      for (int64_t t = 0; t < k; ++t) {
        sum += x[i * k + t] * (transWeight ? w[c * k + t] : w[t * n + c]);
      }
      out[i * n + c] = sum;
    }
  }
  return out;
}

/// AG_LINEAR_RS's golden for `rank`: the grid written out independently of the library. With
/// innerDimIsAg the ranks {s * agDim + a : a} gather (in a order) and {s * agDim + a : s}
/// reduce-scatter; else {a * rsDim + s : a} gather and {a * rsDim + s : s} reduce-scatter. Every
/// member j of rank's ReduceScatter group contributes its gathered x times its own weight; rank
/// keeps the rows of block rsIdx(rank) of that sum.
/// `partialsMagnitude` gets the sum over the members of |their product| in the same rows.
std::vector<double> TwoDimGolden(const LinearCase& c, const std::vector<std::vector<double>>& xs,
                                 const std::vector<std::vector<double>>& ws, int rank, int64_t rows,
                                 int64_t k, std::vector<double>* partialsMagnitude) {
  const int ag = c.agDim, rs = c.rsDim;
  auto rankAt = [&](int a, int s) { return c.innerDimIsAg ? s * ag + a : a * rs + s; };
  const int myA = c.innerDimIsAg ? rank % ag : rank / rs;
  const int myS = c.innerDimIsAg ? rank / ag : rank % rs;
  const int64_t gatheredRows = rows * ag;
  std::vector<double> sum(gatheredRows * c.n, 0.0), magnitude(sum.size(), 0.0);
  for (int s = 0; s < rs; ++s) {
    const int member = rankAt(myA, s);
    std::vector<double> gathered;
    for (int a = 0; a < ag; ++a) {
      const auto& x = xs[rankAt(a, s)];
      gathered.insert(gathered.end(), x.begin(), x.end());
    }
    const auto p = Product(gathered, ws[member], gatheredRows, k, c.n, c.transWeight);
    for (size_t i = 0; i < sum.size(); ++i) {
      sum[i] += p[i];
      magnitude[i] += std::fabs(p[i]);
    }
  }
  const int64_t block = gatheredRows / rs * c.n;
  partialsMagnitude->assign(magnitude.begin() + myS * block, magnitude.begin() + (myS + 1) * block);
  return std::vector<double>(sum.begin() + myS * block, sum.begin() + (myS + 1) * block);
}

}  // namespace

std::vector<double> LinearUniform(DataType dtype, int64_t count, uint64_t seed, int rank, int what,
                                  double lo, double hi) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(rank) * 7919u + what * 104729u);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(count);
  for (auto& v : values) v = RoundTrip(dtype, dist(rng));
  return values;
}

std::vector<double> LinearBoundMagnitude(DataType yDtype,
                                         const std::vector<double>& partialsMagnitude,
                                         const std::vector<double>& golden) {
  std::vector<double> magnitude(golden.size());
  const bool roundedPartials =
      !partialsMagnitude.empty() && (yDtype == ACL_FLOAT16 || yDtype == ACL_BF16);
  for (size_t i = 0; i < golden.size(); ++i) {
    magnitude[i] = std::fabs(golden[i]) + (roundedPartials ? partialsMagnitude[i] : 0.0);
  }
  return magnitude;
}

int64_t Rows(const std::vector<int64_t>& xShape) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < xShape.size(); ++i) rows *= xShape[i];
  return rows;
}

std::string LinearCase::Name() const {
  static const char* kTypes[] = {"LINEAR_ALL_REDUCE", "LINEAR_REDUCE_SCATTER", "ALL_GATHER_LINEAR",
                                 "PURE_LINEAR", "AG_LINEAR_RS"};
  std::string shape = DimsToString(MakeDims(xShape));
  return Concat(
      type >= 0 && type < 5 ? kTypes[type] : "?",
      type == 4 ? Concat(" ", agDim, "x", rsDim, innerDimIsAg ? " innerDimIsAg" : "") : "", " ",
      DataTypeName(dtype), " x ", shape, " n ", n, transWeight ? " transWeight" : "",
      hasResidual ? " residual" : "", keepIntermediate ? " keepIntermediate" : "",
      outDataType >= 0 ? Concat(" out ", DataTypeName(static_cast<DataType>(outDataType))) : "");
}

nlohmann::json LinearCase::Param() const {
  return {{"type", type},
          {"transWeight", transWeight},
          {"hasResidual", hasResidual},
          {"keepIntermediate", keepIntermediate},
          {"outDataType", outDataType},
          {"twoDimTPInfo", {{"agDim", agDim}, {"rsDim", rsDim}, {"innerDimIsAg", innerDimIsAg}}}};
}

void RunLinearCase(const LinearCase& c, const nlohmann::json& commParams, int rank, int rankSize,
                   Communicator* comm, const std::string& what) {
  const std::string where = Concat(what, ": ", c.Name(), " rank ", rank, " of ", rankSize);
  const int64_t k = c.xShape.back();
  const int64_t rows = Rows(c.xShape);
  const std::vector<int64_t> wShape =
      c.transWeight ? std::vector<int64_t>{c.n, k} : std::vector<int64_t>{k, c.n};
  std::vector<std::vector<double>> xs, ws;
  for (int r = 0; r < rankSize; ++r) {
    xs.push_back(Uniform(c.dtype, rows * k, c.seed, r, 1));
    ws.push_back(Uniform(c.dtype, k * c.n, c.seed, r, 2));
  }
  const std::vector<double> residual = Uniform(c.dtype, c.n, c.seed, rank, 3);

  // The golden of this rank, and the shape of y.
  std::vector<double> golden;
  std::vector<int64_t> yShape = c.xShape;
  yShape.back() = c.n;
  std::vector<double> gathered;
  std::vector<double> partialsMagnitude;  // types 0, 1, 4: sum over ranks of |P_r|
  switch (c.type) {
    case 0:
    case 1: {
      std::vector<double> sum(rows * c.n, 0.0), magnitude(sum.size(), 0.0);
      for (int r = 0; r < rankSize; ++r) {
        const auto p = Product(xs[r], ws[r], rows, k, c.n, c.transWeight);
        for (size_t i = 0; i < sum.size(); ++i) {
          sum[i] += p[i];
          magnitude[i] += std::fabs(p[i]);
        }
      }
      if (c.type == 0) {
        golden = sum;
        partialsMagnitude = magnitude;
      } else {
        const int64_t block = rows / rankSize * c.n;
        golden.assign(sum.begin() + rank * block, sum.begin() + (rank + 1) * block);
        partialsMagnitude.assign(magnitude.begin() + rank * block,
                                 magnitude.begin() + (rank + 1) * block);
        yShape[0] /= rankSize;
      }
      break;
    }
    case 2:
      for (int r = 0; r < rankSize; ++r)
        gathered.insert(gathered.end(), xs[r].begin(), xs[r].end());
      golden = Product(gathered, ws[rank], rows * rankSize, k, c.n, c.transWeight);
      yShape[0] *= rankSize;
      break;
    case 4:
      golden = TwoDimGolden(c, xs, ws, rank, rows, k, &partialsMagnitude);
      yShape[0] = yShape[0] * c.agDim / c.rsDim;
      break;
    default:
      golden = Product(xs[rank], ws[rank], rows, k, c.n, c.transWeight);
  }
  if (c.hasResidual) {
    for (size_t i = 0; i < golden.size(); ++i) golden[i] += residual[i % c.n];
  }

  nlohmann::json param = c.Param();
  for (const auto& [key, value] : commParams.items()) param[key] = value;
  OperationPtr op = MakeOperation("LinearParallelOperation", param, comm);
  std::vector<HostTensor> ins = {HostTensor::FromValues(c.dtype, c.xShape, xs[rank]),
                                 HostTensor::FromValues(c.dtype, wShape, ws[rank])};
  if (c.hasResidual) ins.push_back(HostTensor::FromValues(c.dtype, {c.n}, residual));
  std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
  ASSERT_EQ(outs.size(), c.keepIntermediate ? 2u : 1u) << where;
  EXPECT_EQ(outs[0].shape(), yShape) << where;
  EXPECT_EQ(outs[0].dtype(), c.outDataType >= 0 ? static_cast<DataType>(c.outDataType) : c.dtype)
      << where;
  const Status status = RunOperation(*op, Tensors(ins), Tensors(outs));
  ASSERT_EQ(status, NO_ERROR) << where << ": " << StatusName(status) << ": " << LastErrorMessage();
  const DataType yDtype = c.outDataType >= 0 ? static_cast<DataType>(c.outDataType) : c.dtype;
  ExpectCloseScaled(outs[0], golden, LinearBoundMagnitude(yDtype, partialsMagnitude, golden),
                    where);
  if (c.keepIntermediate) ExpectExactly(outs[1], gathered, where + " (intermediate)");
}

std::vector<LinearCase> LinearSuiteCases(DataType dtype, int rankSize) {
  std::vector<LinearCase> cases;
  uint64_t seed = 40;
  for (int type = 0; type < 4; ++type) {
    for (bool trans : {true, false}) {
      LinearCase c;
      c.type = type;
      c.dtype = dtype;
      c.transWeight = trans;
      c.hasResidual = !trans;
      c.keepIntermediate = type == 2 && trans;
      c.xShape =
          trans ? std::vector<int64_t>{2 * rankSize, 37} : std::vector<int64_t>{rankSize, 3, 24};
      c.n = trans ? 21 : 16;
      c.seed = ++seed;
      cases.push_back(c);
    }
  }
  struct Grid {
    int ag, rs, inner;
  };
  std::vector<Grid> grids = {{rankSize, 1, 1}, {1, rankSize, 0}};
  if (rankSize > 2 && rankSize % 2 == 0) grids.push_back({rankSize / 2, 2, 0});
  for (size_t g = 0; g < grids.size(); ++g) {
    LinearCase c;
    c.type = 4;
    c.dtype = dtype;
    c.agDim = grids[g].ag;
    c.rsDim = grids[g].rs;
    c.innerDimIsAg = grids[g].inner;
    c.transWeight = g != 1;
    c.hasResidual = g != 0;
    // dim0 * agDim divisible by rsDim on every grid.
    c.xShape =
        g == 1 ? std::vector<int64_t>{rankSize, 3, 24} : std::vector<int64_t>{2 * rankSize, 37};
    c.n = 19;
    c.seed = ++seed;
    cases.push_back(c);
  }
  return cases;
}

ScopedLinearAlgorithm::ScopedLinearAlgorithm(const char* algo) {
  setenv("COLLOPS_ALGO_LINEARPARALLEL", algo, 1);
}

ScopedLinearAlgorithm::~ScopedLinearAlgorithm() { unsetenv("COLLOPS_ALGO_LINEARPARALLEL"); }

void RunLinearProcessRanks(int rankSize, const std::string& backend, const std::string& domain,
                           const std::function<void(int rank, const nlohmann::json& job)>& body) {
  ProcessRanksOptions options;
  options.env["COLLOPS_ALGO_LINEARPARALLEL"] = "overlap";
  options.env["COLLOPS_TIMEOUT"] = "30";
  options.deadlineSeconds = 90;
  RunProcessRanks(
      rankSize,
      [&](int rank) {
        const nlohmann::json job = {
            {"rank", rank}, {"rankSize", rankSize}, {"backend", backend}, {"commDomain", domain}};
        body(rank, job);
      },
      options);
}

Status CreateLinearParallel(const nlohmann::json& extra) {
  nlohmann::json param = {{"rank", 0}, {"rankSize", 2}};
  for (const auto& [key, value] : extra.items()) param[key] = value;
  Operation* op = nullptr;
  const Status status = CreateOperation("LinearParallelOperation", param, &op);
  if (op != nullptr) DestroyOperation(op);
  return status;
}

Status InferLinearParallel(const nlohmann::json& extra, const std::vector<TensorDesc>& ins) {
  nlohmann::json param = {{"rank", 1}, {"rankSize", 2}};
  for (const auto& [key, value] : extra.items()) param[key] = value;
  OperationPtr op = MakeOperation("LinearParallelOperation", param);
  std::vector<TensorDesc> out;
  return op->InferShape(ins, out);
}

TensorDesc LinearDesc(DataType dtype, const std::vector<int64_t>& shape) {
  TensorDesc d;
  d.dtype = dtype;
  d.shape = MakeDims(shape);
  return d;
}

}  // namespace testing
}  // namespace collops
