#pragma once

#include <cstdint>

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// ATB's LinearParallelParam::ParallelType numbering.
enum LinearParallelType : int32_t {
  LINEAR_PARALLEL_UNDEFINED = -1,
  LINEAR_ALL_REDUCE = 0,      ///< y = sum over ranks of x_r . W_r (+ residual)
  LINEAR_REDUCE_SCATTER = 1,  ///< y = rows [rank * M / R, (rank + 1) * M / R) of that sum
  ALL_GATHER_LINEAR = 2,      ///< y = allgather(x) . W (+ residual)
  PURE_LINEAR = 3,            ///< y = x . W (+ residual), no communication
  AG_LINEAR_RS = 4,           ///< ATB's 2-D tensor parallel (twoDimTPInfo): not supported
  ALLTOALLVC_AG_GMM = 5,      ///< ATB's MoE dispatch + grouped matmul: not supported
  GMM_RS_ALLTOALLVC = 6,      ///< ATB's grouped matmul + MoE combine: not supported
};

/// ATB's LinearParallelParam::QuantType numbering (-1 UNQUANT is the only one supported).
enum LinearParallelQuantType : int32_t {
  LINEAR_QUANT_UNQUANT = -1,
  LINEAR_QUANT_PER_TENSOR = 0,
  LINEAR_QUANT_PER_CHANNEL = 1,
  LINEAR_QUANT_PER_GROUP = 2,
  LINEAR_QUANT_PER_TOKEN = 3,
};

/// Params of LinearParallelOperation (ATB's LinearParallelParam): a matrix product fused with the
/// collective of a tensor-parallel linear layer. Inputs x [m, k] or [b, m, k], weight [n, k]
/// (transWeight) or [k, n], residual [n] (hasResidual); float16, bfloat16 or float32, all alike.
struct LinearParallelParam : CommParam {
  /// true: weight is [n, k] and y = x . weight^T (ATB's default); false: weight is [k, n].
  bool transWeight = true;
  /// true: a third input residual [n] is added to every row of y, once.
  bool hasResidual = false;
  /// LinearParallelType: 0 LINEAR_ALL_REDUCE, 1 LINEAR_REDUCE_SCATTER, 2 ALL_GATHER_LINEAR,
  /// 3 PURE_LINEAR. 4, 5 and 6 are refused as not supported.
  int type = LINEAR_ALL_REDUCE;
  /// ALL_GATHER_LINEAR only: a second output holds the gathered x [R * m, k].
  bool keepIntermediate = false;
  /// LinearParallelQuantType; only -1 (UNQUANT) is supported.
  int quantType = LINEAR_QUANT_UNQUANT;
  /// Group size of PER_GROUP quantisation; must stay 0 (quantisation is not supported).
  int quantGroupSize = 0;
  /// aclDataType of y: -1 (undefined) = x's dtype; else 1 float16, 27 bfloat16 or 0 float32 (a
  /// collops extension: ATB sets it for quantised inputs only).
  int outDataType = -1;

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("transWeight", transWeight);
    v("hasResidual", hasResidual);
    v("type", type);
    v("keepIntermediate", keepIntermediate);
    v("quantType", quantType);
    v("quantGroupSize", quantGroupSize);
    v("outDataType", outDataType);
  }
};

Status CreateOperation(const LinearParallelParam& param, Operation** op);

}  // namespace collops
