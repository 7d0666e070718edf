// LinearParallelOperation::ExecuteImpl: the product and the collective of each parallel type,
// chunk by chunk (linear_parallel_operation.h).
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "collops/reduce.h"
#include "ops/linear_parallel/chunk_pipeline.h"
#include "ops/linear_parallel/linear_parallel_operation.h"
#include "ops/linear_parallel/two_dim_tp.h"
#include "ops/linear_parallel/weight_antiquant.h"

namespace collops {
namespace {

/// Threads of each product: the calling thread's OpenMP threads, lowered to this rank's share of
/// the CPUs when its peers run on the same CPUs (thread ranks, lccl) and OMP_NUM_THREADS does not
/// say otherwise: R ranks with a thread per CPU each would oversubscribe them R times.
int ProductThreads(const CommParam& param, Communicator& comm) {
  int threads = Matmul::CallerThreads();
  const char* chosen = std::getenv("OMP_NUM_THREADS");
  if (chosen != nullptr && *chosen != '\0') return threads;
  const bool sharedHost = param.commMode == COMM_MULTI_THREAD || comm.BackendName() == "lccl";
  if (!sharedHost || comm.Size() <= 1) return threads;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return threads;
  return std::max(1, std::min(threads, CPU_COUNT(&allowed) / comm.Size()));
}

template <class T>
T* At(void* base, uint64_t offset) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(base) + offset);
}

}  // namespace

void LinearParallelOperation::BindProduct(const VariantPack& pack, uint8_t* workspace,
                                          int threads) {
  const Plan& p = plan_;
  const LinearInputIndex at = LinearInputs(param_);
  const void* weight = pack.inTensors[1].deviceData;
  if (p.form == LinearQuantForm::kW8A8) {
    const Tensor& bias = pack.inTensors[at.bias];
    quantMatmul_->Bind(static_cast<const int8_t*>(weight),
                       bias.dataSize > 0 ? static_cast<const int32_t*>(bias.deviceData) : nullptr,
                       static_cast<const float*>(pack.inTensors[at.scale].deviceData));
    return;
  }
  if (p.form == LinearQuantForm::kW8A16) {
    AntiquantLayout layout;
    layout.k = p.k;
    layout.n = p.n;
    layout.transWeight = param_.transWeight;
    layout.quantType = param_.quantType;
    layout.groupSize = param_.quantGroupSize;
    const Tensor& offset = pack.inTensors[at.bias];
    void* dequantised = workspace + p.antiquantOffset;
    AntiquantWeight(layout, static_cast<const int8_t*>(weight), p.dtype,
                    offset.dataSize > 0 ? offset.deviceData : nullptr,
                    pack.inTensors[at.scale].deviceData, dequantised, threads);
    weight = dequantised;
  }
  matmul_->Bind(weight, workspace + p.matmulOffset, threads);
}

void LinearParallelOperation::ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t,
                                          Communicator& comm) {
  const Plan& p = plan_;
  const int rankSize = comm.Size();
  const Tensor& x = pack.inTensors[0];
  const Tensor& y = pack.outTensors[0];
  const size_t xRow = static_cast<size_t>(p.k) * DataTypeSize(p.dtype);
  const size_t yRow = static_cast<size_t>(p.n) * DataTypeSize(p.outDtype);
  const int64_t n = p.n;
  // The product: productDtype rows, in the workspace or in y itself (Plan::accBytes).
  void* product = p.accBytes > 0 ? workspace + p.accOffset : y.deviceData;
  float* acc = static_cast<float*>(product);  // where productDtype is float32
  const float* residual = nullptr;
  const LinearInputIndex at = LinearInputs(param_);
  const float* tokenScale =
      at.perTokenScale >= 0 ? static_cast<const float*>(pack.inTensors[at.perTokenScale].deviceData)
                            : nullptr;
  // A failure of this rank's own work after the signature check leaves its peers in collectives
  // it will not join: break the communicator for them, as a lost peer would.
  auto abandon = [&](const Error& e) { comm.Abort(e.status(), Concat(Where(), ": ", e.what())); };
  int threads = 1;
  try {
    threads = ProductThreads(commParam(), comm);
    if (param_.hasResidual) {
      const Tensor& r = pack.inTensors[at.residual];
      if (p.residualDtype == ACL_FLOAT) {
        residual = static_cast<const float*>(r.deviceData);
      } else if (p.residualBytes > 0) {  // else added as given (addResidual)
        float* wide = At<float>(workspace, p.residualOffset);
        ConvertToFloat32(p.residualDtype, r.deviceData, wide, static_cast<size_t>(n));
        residual = wide;
      }
    }
    BindProduct(pack, workspace, threads);
  } catch (const Error& e) {
    abandon(e);
    throw;
  }
  // y rows = float32 product rows + residual, rounded once to y's dtype.
  auto finish = [&](float* rows, int64_t count, void* out) {
    if (residual != nullptr) {
      for (int64_t i = 0; i < count; ++i) {
        const void* srcs[2] = {rows + i * n, residual};
        ReduceArrays(ACL_FLOAT, ReduceOp::kSum, srcs, 2, rows + i * n, static_cast<size_t>(n));
      }
    }
    ConvertFromFloat32(rows, p.outDtype, out, static_cast<size_t>(count * n));
  };
  // y rows that already hold the sum over ranks (in y's dtype) += residual, rounded once: ATB's
  // Add after its AllReduce.
  const void* rawResidual = param_.hasResidual ? pack.inTensors[at.residual].deviceData : nullptr;
  auto addResidual = [&](void* rows, int64_t count) {
    if (rawResidual == nullptr) return;
    const size_t width = DataTypeSize(p.outDtype);
    for (int64_t i = 0; i < count; ++i) {
      void* row = static_cast<uint8_t*>(rows) + i * n * width;
      if (p.outDtype == ACL_FLOAT || p.residualDtype == p.outDtype) {
        // Float16/bfloat16 sum in float32 and round once.
        const void* srcs[2] = {row, p.outDtype == ACL_FLOAT ? residual : rawResidual};
        ReduceArrays(p.outDtype, ReduceOp::kSum, srcs, 2, row, static_cast<size_t>(n));
        continue;
      }
      float* wide = At<float>(workspace, p.residualRowOffset);
      ConvertToFloat32(p.outDtype, row, wide, static_cast<size_t>(n));
      const void* srcs[2] = {wide, residual};
      ReduceArrays(ACL_FLOAT, ReduceOp::kSum, srcs, 2, wide, static_cast<size_t>(n));
      ConvertFromFloat32(wide, p.outDtype, row, static_cast<size_t>(n));
    }
  };
  auto begin = [&](int c) { return p.blockRows * c / p.chunks; };
  auto rowsOf = [&](int c) { return begin(c + 1) - begin(c); };
  const auto* xData = static_cast<const uint8_t*>(x.deviceData);
  const size_t productRow = static_cast<size_t>(n) * DataTypeSize(p.productDtype);
  // `run`: the float product of rows from anywhere (the gathered x of ALL_GATHER_LINEAR).
  // `runRows`: rows [row, row + rows) of x through this call's product, quantised or not (types
  // 0 and 3 may be quantised; PER_TOKEN's scales follow the rows).
  // `runPartial`: the product of rows from anywhere in productDtype: written so by oneDNN where
  // it can, else computed in float32 and rounded once, roundRows at a time.
  auto run = [&](const void* xRows, int64_t rows, float* out) {
    matmul_->Run(xRows, rows, out, threads);
  };
  auto runRows = [&](int64_t row, int64_t rows, float* out) {
    if (quantMatmul_ != nullptr) {
      quantMatmul_->Run(reinterpret_cast<const int8_t*>(xData + row * xRow), rows,
                        tokenScale != nullptr ? tokenScale + row : nullptr, out, threads);
    } else {
      run(xData + row * xRow, rows, out);
    }
  };
  auto runPartial = [&](const void* xRows, int64_t rows, void* out) {
    if (p.roundBytes == 0) {
      matmul_->RunInto(xRows, rows, out, p.productDtype, threads);
      return;
    }
    float* wide = At<float>(workspace, p.roundOffset);
    for (int64_t done = 0; done < rows; done += p.roundRows) {
      const int64_t count = std::min(p.roundRows, rows - done);
      run(static_cast<const uint8_t*>(xRows) + done * xRow, count, wide);
      ConvertFromFloat32(wide, p.productDtype, static_cast<uint8_t*>(out) + done * productRow,
                         static_cast<size_t>(count * n));
    }
  };
  auto* yData = static_cast<uint8_t*>(y.deviceData);
  std::vector<int64_t> counts(rankSize), displs(rankSize);

  switch (param_.type) {
    case LINEAR_ALL_REDUCE:
      if (p.form == LinearQuantForm::kNone) {
        // Unquantised: each chunk's partial lands in y's rows and is summed there in y's dtype.
        RunChunkPipeline(
            p.chunks, /*communicateFirst=*/false,
            [&](int c) { runPartial(xData + begin(c) * xRow, rowsOf(c), yData + begin(c) * yRow); },
            [&](int c) {
              void* rows = yData + begin(c) * yRow;
              comm.AllReduce(rows, rows, static_cast<size_t>(rowsOf(c) * n), p.outDtype,
                             ReduceOp::kSum);
              addResidual(rows, rowsOf(c));
            },
            abandon);
        return;
      }
      // Quantised: float32 partials, summed, then rounded into y with the residual.
      RunChunkPipeline(
          p.chunks, /*communicateFirst=*/false,
          [&](int c) { runRows(begin(c), rowsOf(c), acc + begin(c) * n); },
          [&](int c) {
            float* rows = acc + begin(c) * n;
            comm.AllReduce(rows, rows, static_cast<size_t>(rowsOf(c) * n), ACL_FLOAT,
                           ReduceOp::kSum);
            finish(rows, rowsOf(c), yData + begin(c) * yRow);
          },
          abandon);
      return;
    case LINEAR_REDUCE_SCATTER: {
      // Chunk c is rows [begin(c), begin(c + 1)) of every rank's block of the product, whose sum
      // lands in y's rows.
      auto* partials = static_cast<uint8_t*>(product);
      RunChunkPipeline(
          p.chunks, /*communicateFirst=*/false,
          [&](int c) {
            for (int j = 0; j < rankSize; ++j) {
              const int64_t row = j * p.blockRows + begin(c);
              runPartial(xData + row * xRow, rowsOf(c), partials + row * productRow);
            }
          },
          [&](int c) {
            for (int j = 0; j < rankSize; ++j) {
              counts[j] = rowsOf(c) * n;
              displs[j] = (j * p.blockRows + begin(c)) * n;
            }
            void* mine = yData + begin(c) * yRow;
            comm.ReduceScatterV(partials, counts.data(), displs.data(), mine,
                                static_cast<size_t>(rowsOf(c) * n), p.outDtype, ReduceOp::kSum);
            addResidual(mine, rowsOf(c));
          },
          abandon);
      return;
    }
    case ALL_GATHER_LINEAR: {
      // Chunk c is rows [begin(c), begin(c + 1)) of every rank's x, gathered, then multiplied.
      auto* gathered = param_.keepIntermediate
                           ? static_cast<uint8_t*>(pack.outTensors[1].deviceData)
                           : workspace + p.gatheredOffset;
      RunChunkPipeline(
          p.chunks, /*communicateFirst=*/true,
          [&](int c) {
            for (int j = 0; j < rankSize; ++j) {
              const int64_t row = j * p.blockRows + begin(c);
              run(gathered + row * xRow, rowsOf(c), acc + row * n);
              finish(acc + row * n, rowsOf(c), yData + row * yRow);
            }
          },
          [&](int c) {
            for (int j = 0; j < rankSize; ++j) {
              counts[j] = rowsOf(c) * p.k;
              displs[j] = (j * p.blockRows + begin(c)) * p.k;
            }
            comm.AllGatherV(xData + begin(c) * xRow, static_cast<size_t>(rowsOf(c) * p.k), gathered,
                            counts.data(), displs.data(), p.dtype);
          },
          abandon);
      return;
    }
    case AG_LINEAR_RS: {
      AgLinearRsCall call;
      call.x = xData;
      call.rows = p.rows;
      call.k = p.k;
      call.n = n;
      call.dtype = p.dtype;
      call.productDtype = p.productDtype;
      call.gathered = workspace + p.gatheredOffset;
      call.product = product;
      call.received = workspace + p.scatteredOffset;
      call.y = yData;
      RunAgLinearRs(
          TwoDimGrid(param_.twoDimTPInfo), comm, call,
          [&](const void* rows, int64_t count, void* out) { runPartial(rows, count, out); },
          [&](int64_t count) { addResidual(yData, count); }, abandon);
      return;
    }
    default:  // PURE_LINEAR: no collective
      RunChunkPipeline(
          1, /*communicateFirst=*/false,
          [&](int) {
            if (p.direct) {
              matmul_->RunInto(xData, p.rows, yData, p.outDtype, threads);
              return;
            }
            runRows(0, p.rows, acc);
            finish(acc, p.rows, yData);
          },
          [](int) {}, [](const Error&) {});
      return;
  }
}

}  // namespace collops
