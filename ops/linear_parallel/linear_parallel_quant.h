// The quantised forms of LinearParallelOperation (quantType 0 PER_TENSOR, 1 PER_CHANNEL,
// 2 PER_GROUP, 3 PER_TOKEN; types 0 LINEAR_ALL_REDUCE and 3 PURE_LINEAR), following ATB's golden:
//
//   W8A8 ("quant after"): x int8, weight int8, bias int32 [n] (or empty: none), scale float32
//     ([1] PER_TENSOR; [n] or [1, n] PER_CHANNEL and PER_TOKEN), perTokenScale float32 [M]
//     (PER_TOKEN):  y = (x . W + bias) * scale[col] (* perTokenScale[row]), y in outDataType
//     (1 float16 or 27 bfloat16, required).
//   W8A16 ("pseudo quant"): x float16 / bfloat16, weight int8, bias = the antiquant offset and
//     scale the antiquant scale, both in x's dtype ([1] PER_TENSOR; [n] or [1, n] PER_CHANNEL;
//     PER_GROUP of quantGroupSize G along k: [n, k / G] for a weight [n, k] (transWeight), [k / G,
//     n] for [k, n]), bias may be empty (no offset):  Wd = (W + offset) * scale, rounded to x's
//     dtype, then y = x . Wd in x's dtype.
// Inputs in order: x, weight, bias, scale [, residual (y's dtype)] [, perTokenScale].
#pragma once

#include <string>
#include <vector>

#include "collops/operation_base.h"
#include "ops/linear_parallel/linear_parallel_param.h"

namespace collops {

enum class LinearQuantForm { kNone, kW8A8, kW8A16 };

/// Where the quantised inputs sit in inTensors (-1: absent).
struct LinearInputIndex {
  int bias = -1;
  int scale = -1;
  int residual = -1;
  int perTokenScale = -1;
};
LinearInputIndex LinearInputs(const LinearParallelParam& param);

/// "PER_CHANNEL" for 1, etc.; "?" for a number that is not a QuantType.
const char* LinearQuantTypeName(int quantType);

/// The param rules of quantisation (quantType, quantGroupSize, outDataType against type); throws
/// ERROR_INVALID_PARAM naming `op` and the field.
void ValidateLinearQuantParam(const char* op, const LinearParallelParam& param);

/// The form of a call with x of `xDtype` (kNone when quantType is -1). Throws
/// ERROR_INVALID_TENSOR_DTYPE for an x no quantised form takes.
LinearQuantForm QuantFormOf(const std::string& where, const LinearParallelParam& param,
                            DataType xDtype);

/// Checks the bias, scale and perTokenScale of a quantised call (x [.., k] of `rows` rows, n
/// columns) and returns y's dtype. Errors name the input as "inTensors[i] (name)".
DataType CheckLinearQuantInputs(const std::string& where, const LinearParallelParam& param,
                                const std::vector<TensorDesc>& in, int64_t rows, int64_t k,
                                int64_t n);

}  // namespace collops
