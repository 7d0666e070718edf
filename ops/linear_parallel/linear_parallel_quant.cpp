// The rules of LinearParallelOperation's quantised forms (linear_parallel_quant.h).
#include "ops/linear_parallel/linear_parallel_quant.h"

#include <algorithm>

namespace collops {
namespace {

const char* kTypeNames[] = {"LINEAR_ALL_REDUCE", "LINEAR_REDUCE_SCATTER", "ALL_GATHER_LINEAR",
                            "PURE_LINEAR", "AG_LINEAR_RS"};

/// "inTensors[3] (scale)".
std::string InputName(int index, const char* name) {
  return Concat("inTensors[", index, "] (", name, ")");
}

/// Fails unless `d` has one of `shapes`: ERROR_INVALID_TENSOR_DIM_NUM when no shape has its dim
/// count, else ERROR_INVALID_TENSOR_DIM. `expected` spells the shapes for the message.
void ExpectShape(const std::string& where, const std::string& input, const TensorDesc& d,
                 const std::vector<std::vector<int64_t>>& shapes, const std::string& expected) {
  bool sameDimNum = false;
  for (const std::vector<int64_t>& shape : shapes) {
    if (shape.size() != d.shape.dimNum) continue;
    sameDimNum = true;
    if (std::equal(shape.begin(), shape.end(), d.shape.dims)) return;
  }
  Fail(sameDimNum ? ERROR_INVALID_TENSOR_DIM : ERROR_INVALID_TENSOR_DIM_NUM, where, ": ", input,
       " has shape ", DimsToString(d.shape), "; it must be ", expected);
}

void ExpectDtype(const std::string& where, const std::string& input, const TensorDesc& d,
                 DataType dtype, const char* why) {
  if (d.dtype != dtype) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, where, ": ", input, " has dtype ", DataTypeName(d.dtype),
         "; it must be ", DataTypeName(dtype), " (", why, ")");
  }
}

}  // namespace

LinearInputIndex LinearInputs(const LinearParallelParam& param) {
  LinearInputIndex index;
  int next = 2;
  if (param.quantType != LINEAR_QUANT_UNQUANT) {
    index.bias = next++;
    index.scale = next++;
  }
  if (param.hasResidual) index.residual = next++;
  if (param.quantType == LINEAR_QUANT_PER_TOKEN) index.perTokenScale = next++;
  return index;
}

const char* LinearQuantTypeName(int quantType) {
  switch (quantType) {
    case LINEAR_QUANT_UNQUANT:
      return "UNQUANT";
    case LINEAR_QUANT_PER_TENSOR:
      return "PER_TENSOR";
    case LINEAR_QUANT_PER_CHANNEL:
      return "PER_CHANNEL";
    case LINEAR_QUANT_PER_GROUP:
      return "PER_GROUP";
    case LINEAR_QUANT_PER_TOKEN:
      return "PER_TOKEN";
  }
  return "?";
}

void ValidateLinearQuantParam(const char* op, const LinearParallelParam& param) {
  const int quant = param.quantType;
  if (quant < LINEAR_QUANT_UNQUANT || quant > LINEAR_QUANT_PER_TOKEN) {
    Fail(ERROR_INVALID_PARAM, op, ": quantType = ", quant,
         " is not one of -1 (UNQUANT), 0 (PER_TENSOR), 1 (PER_CHANNEL), 2 (PER_GROUP), "
         "3 (PER_TOKEN)");
  }
  if (quant == LINEAR_QUANT_PER_GROUP && param.quantGroupSize <= 0) {
    Fail(ERROR_INVALID_PARAM, op, ": quantType = 2 (PER_GROUP) needs quantGroupSize > 0 (the ",
         "group's length along k), got ", param.quantGroupSize);
  }
  if (quant != LINEAR_QUANT_PER_GROUP && param.quantGroupSize != 0) {
    Fail(ERROR_INVALID_PARAM, op, ": quantGroupSize = ", param.quantGroupSize,
         " is read only with quantType = 2 (PER_GROUP), got quantType = ", quant, " (",
         LinearQuantTypeName(quant), "); leave it 0");
  }
  if (quant == LINEAR_QUANT_UNQUANT) return;
  if (param.type != LINEAR_ALL_REDUCE && param.type != PURE_LINEAR) {
    Fail(ERROR_INVALID_PARAM, op, ": quantType = ", quant, " (", LinearQuantTypeName(quant),
         ") is supported with type = 0 (LINEAR_ALL_REDUCE) and 3 (PURE_LINEAR) only, got type = ",
         param.type, " (", param.type >= 0 && param.type < 5 ? kTypeNames[param.type] : "?",
         "); use quantType = -1 (UNQUANT)");
  }
  if (param.outDataType != ACL_DT_UNDEFINED && param.outDataType != ACL_FLOAT16 &&
      param.outDataType != ACL_BF16) {
    Fail(ERROR_INVALID_PARAM, op, ": outDataType = ", param.outDataType,
         " with quantType = ", quant, " (", LinearQuantTypeName(quant),
         "): a quantised y is 1 (float16) or 27 (bfloat16) (-1: x's dtype, for a float16 or "
         "bfloat16 x)");
  }
}

LinearQuantForm QuantFormOf(const std::string& where, const LinearParallelParam& param,
                            DataType xDtype) {
  const int quant = param.quantType;
  if (quant == LINEAR_QUANT_UNQUANT) return LinearQuantForm::kNone;
  if (xDtype == ACL_INT8) {
    if (quant == LINEAR_QUANT_PER_GROUP) {
      Fail(ERROR_INVALID_TENSOR_DTYPE, where, ": ", InputName(0, "x"),
           " is int8 (W8A8), which quantType = 2 (PER_GROUP) does not take: PER_GROUP ",
           "dequantises an int8 weight for a float16 or bfloat16 x (W8A16)");
    }
    if (param.outDataType == ACL_DT_UNDEFINED) {
      Fail(ERROR_INVALID_PARAM, where, ": ", InputName(0, "x"),
           " is int8 (W8A8), so outDataType must say y's dtype: 1 (float16) or 27 (bfloat16), "
           "got -1");
    }
    return LinearQuantForm::kW8A8;
  }
  if (xDtype == ACL_FLOAT16 || xDtype == ACL_BF16) {
    if (quant == LINEAR_QUANT_PER_TOKEN) {
      Fail(ERROR_INVALID_TENSOR_DTYPE, where, ": ", InputName(0, "x"), " has dtype ",
           DataTypeName(xDtype), "; quantType = 3 (PER_TOKEN) needs an int8 x (W8A8)");
    }
    if (param.outDataType != ACL_DT_UNDEFINED && param.outDataType != xDtype) {
      Fail(ERROR_INVALID_PARAM, where, ": outDataType = ", param.outDataType, " but ",
           InputName(0, "x"), " is ", DataTypeName(xDtype),
           " (W8A16): y has x's dtype, so outDataType must be -1 or ", static_cast<int>(xDtype));
    }
    return LinearQuantForm::kW8A16;
  }
  Fail(ERROR_INVALID_TENSOR_DTYPE, where, ": ", InputName(0, "x"), " has dtype ",
       DataTypeName(xDtype), "; quantType = ", quant, " (", LinearQuantTypeName(quant),
       ") takes int8 (W8A8) or float16 / bfloat16 (W8A16)");
}

DataType CheckLinearQuantInputs(const std::string& where, const LinearParallelParam& param,
                                const std::vector<TensorDesc>& in, int64_t rows, int64_t k,
                                int64_t n) {
  const LinearQuantForm form = QuantFormOf(where, param, in[0].dtype);
  const LinearInputIndex at = LinearInputs(param);
  const int quant = param.quantType;
  const bool w8a8 = form == LinearQuantForm::kW8A8;
  const DataType factorDtype = w8a8 ? ACL_FLOAT : in[0].dtype;
  const char* why = w8a8 ? "W8A8" : "W8A16: x's dtype";

  // The shape of the scale (and of the W8A16 offset).
  std::vector<std::vector<int64_t>> shapes;
  std::string expected;
  switch (quant) {
    case LINEAR_QUANT_PER_TENSOR:
      shapes = {{1}};
      expected = "[1] (PER_TENSOR)";
      break;
    case LINEAR_QUANT_PER_GROUP: {
      const int64_t group = param.quantGroupSize;
      if (k % group != 0) {
        Fail(ERROR_INVALID_TENSOR_DIM, where, ": ", InputName(0, "x"), " has k = ", k,
             ", not a multiple of quantGroupSize = ", group, " (PER_GROUP)");
      }
      const int64_t groups = k / group;
      shapes = {param.transWeight ? std::vector<int64_t>{n, groups}
                                  : std::vector<int64_t>{groups, n}};
      expected = param.transWeight ? Concat("[n, k / quantGroupSize] = [", n, ", ", groups,
                                            "] (PER_GROUP, ", "transWeight = true)")
                                   : Concat("[k / quantGroupSize, n] = [", groups, ", ", n,
                                            "] (PER_GROUP, ", "transWeight = false)");
      break;
    }
    default:  // PER_CHANNEL, PER_TOKEN: a scale per output channel
      shapes = {{n}, {1, n}};
      expected =
          Concat("[n] or [1, n] = [", n, "] or [1, ", n, "] (", LinearQuantTypeName(quant), ")");
  }
  const TensorDesc& scale = in[at.scale];
  ExpectDtype(where, InputName(at.scale, "scale"), scale, factorDtype, why);
  ExpectShape(where, InputName(at.scale, "scale"), scale, shapes, expected);

  const TensorDesc& bias = in[at.bias];
  if (w8a8) {
    ExpectDtype(where, InputName(at.bias, "bias"), bias, ACL_INT32, "W8A8: added to the int32 sum");
    ExpectShape(where, InputName(at.bias, "bias"), bias, {{n}, {0}},
                Concat("[n] = [", n, "], or [0] for none"));
  } else {
    ExpectDtype(where, InputName(at.bias, "bias"), bias, factorDtype,
                "W8A16: the antiquant offset, in x's dtype");
    shapes.push_back({0});
    ExpectShape(where, InputName(at.bias, "bias"), bias, shapes,
                Concat(expected, " like the scale, or [0] for no offset"));
  }
  if (at.perTokenScale >= 0) {
    const TensorDesc& token = in[at.perTokenScale];
    ExpectDtype(where, InputName(at.perTokenScale, "perTokenScale"), token, ACL_FLOAT, why);
    ExpectShape(where, InputName(at.perTokenScale, "perTokenScale"), token, {{rows}},
                Concat("[rows of x] = [", rows, "]"));
  }
  if (w8a8) return static_cast<DataType>(param.outDataType);
  return in[0].dtype;
}

}  // namespace collops
