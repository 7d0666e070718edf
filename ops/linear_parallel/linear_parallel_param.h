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
  AG_LINEAR_RS = 4,           ///< 2-D tensor parallel: y = RS_rsGroup(AG_agGroup(x) . W), see below
  ALLTOALLVC_AG_GMM = 5,      ///< ATB's MoE dispatch + grouped matmul: not supported
  GMM_RS_ALLTOALLVC = 6,      ///< ATB's grouped matmul + MoE combine: not supported
};

/// ATB's LinearParallelParam::QuantType numbering (linear_parallel_quant.h has the forms).
enum LinearParallelQuantType : int32_t {
  LINEAR_QUANT_UNQUANT = -1,
  LINEAR_QUANT_PER_TENSOR = 0,
  LINEAR_QUANT_PER_CHANNEL = 1,
  LINEAR_QUANT_PER_GROUP = 2,
  LINEAR_QUANT_PER_TOKEN = 3,
};

/// ATB's LinearParallelParam::TwoDimTPInfo: the grid of AG_LINEAR_RS. The rankSize ranks form an
/// agDim x rsDim grid (agDim * rsDim = rankSize). With innerDimIsAg = 1 the AllGather index is
/// the inner (fastest-varying) one: rank r = rsIdx * agDim + agIdx, so consecutive ranks
/// {s * agDim .. s * agDim + agDim - 1} form an AllGather group and ranks {agIdx, agIdx + agDim,
/// ..} a ReduceScatter group. With innerDimIsAg = 0 it is the other way round: r = agIdx * rsDim +
/// rsIdx, consecutive ranks form a ReduceScatter group. Rank r's x [m, k] (M rows) is gathered
/// in agIdx order within its AllGather group to [agDim * M, k], multiplied by W, and the product
/// rows are cut in rsDim blocks of agDim * M / rsDim rows; block s of the sum over the
/// ReduceScatter group goes to the member with rsIdx = s, and the residual is added once.
/// Read by type 4 only; the other types ignore it, as ATB does.
struct LinearParallelTwoDimTPInfo {
  int agDim = 0;         ///< ranks of an AllGather group (ATB: uint16, 0 = unset)
  int rsDim = 0;         ///< ranks of a ReduceScatter group
  int innerDimIsAg = 1;  ///< 1: consecutive ranks form the AllGather groups; 0: RS groups

  template <class Visitor>
  void VisitFields(Visitor& v) {
    v("agDim", agDim);
    v("rsDim", rsDim);
    v("innerDimIsAg", innerDimIsAg);
  }
};

/// ATB's LinearParallelParam::MoeInfo, for its MoE types 5 and 6, which collops does not run
/// (their inputs are not defined well enough to match: docs/operations.md). Parsed so ATB's
/// params load; the other types ignore it, as ATB does.
struct LinearParallelMoeInfo {
  int localExpertNums = 1;  ///< experts on each rank
  int epSize = 1;           ///< ranks of an expert-parallel group
  int tpSize = 1;           ///< ranks of a tensor-parallel group

  template <class Visitor>
  void VisitFields(Visitor& v) {
    v("localExpertNums", localExpertNums);
    v("epSize", epSize);
    v("tpSize", tpSize);
  }
};

/// Params of LinearParallelOperation (ATB's LinearParallelParam): a matrix product fused with the
/// collective of a tensor-parallel linear layer. Inputs x [m, k] or [b, m, k], weight [n, k]
/// (transWeight) or [k, n], residual [n] (hasResidual); float16, bfloat16 or float32, all alike.
/// quantType other than -1 takes an int8 weight and a bias and scale after it
/// (linear_parallel_quant.h).
struct LinearParallelParam : CommParam {
  /// true: weight is [n, k] and y = x . weight^T (ATB's default); false: weight is [k, n].
  bool transWeight = true;
  /// true: a third input residual [n] is added to every row of y, once.
  bool hasResidual = false;
  /// LinearParallelType: 0 LINEAR_ALL_REDUCE, 1 LINEAR_REDUCE_SCATTER, 2 ALL_GATHER_LINEAR,
  /// 3 PURE_LINEAR, 4 AG_LINEAR_RS (twoDimTPInfo). 5 and 6 are refused as not supported.
  int type = LINEAR_ALL_REDUCE;
  /// ALL_GATHER_LINEAR only: a second output holds the gathered x [R * m, k].
  bool keepIntermediate = false;
  /// LinearParallelQuantType: -1 UNQUANT, 0 PER_TENSOR, 1 PER_CHANNEL, 2 PER_GROUP, 3 PER_TOKEN;
  /// quantised only with type 0 (LINEAR_ALL_REDUCE) or 3 (PURE_LINEAR).
  int quantType = LINEAR_QUANT_UNQUANT;
  /// PER_GROUP only (> 0, dividing k): the length along k of a group sharing a scale; else 0.
  int quantGroupSize = 0;
  /// aclDataType of y: -1 (undefined) = x's dtype; else 1 float16, 27 bfloat16 or 0 float32 (a
  /// collops extension for unquantised x). Required (1 or 27) for an int8 x (W8A8).
  int outDataType = -1;
  /// AG_LINEAR_RS's grid (read by type 4 only).
  LinearParallelTwoDimTPInfo twoDimTPInfo;
  /// ATB's MoE sizes (types 5 and 6, not supported; ignored by the others).
  LinearParallelMoeInfo moeInfo;

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
    v("twoDimTPInfo", twoDimTPInfo);
    v("moeInfo", moeInfo);
  }
};

Status CreateOperation(const LinearParallelParam& param, Operation** op);

}  // namespace collops
