#pragma once

#include <string>

#include "collops/comm_params.h"
#include "collops/status.h"
#include "collops/tensor.h"

namespace collops {

class Operation;

/// Params of AllReduceOperation (ATB's AllReduceParam).
struct AllReduceParam : CommParam {
  /// ATB's AllReduceParam::QuantType numbering.
  enum QuantType : int {
    QUANT_TYPE_UNQUANT = 0,      ///< x of any reducible dtype, y of x's dtype
    QUANT_TYPE_UNDEFINED = 0,    ///< ATB's second name for 0
    QUANT_TYPE_PER_TENSOR = 1,   ///< x int8, one float16 scale
    QUANT_TYPE_PER_CHANNEL = 2,  ///< x int8 [..., n], n float16 scales
    QUANT_TYPE_MAX = 3,          ///< first value out of range
  };

  std::string allReduceType = "sum";  ///< "sum" | "prod" | "max" | "min"; "sum" when quantised
  /// QuantType: 0 plain; 1 or 2: x int8 with scale and offset inputs, y = (Σ_r x_r +
  /// R·offset)·scale.
  int quantType = QUANT_TYPE_UNQUANT;
  /// y's dtype (aclDataType) when quantised: 1 float16 (ATB's only one), 27 bfloat16, 0 float32.
  /// Without quantisation y has x's dtype, and this stays -1 (ACL_DT_UNDEFINED).
  int outDataType = ACL_DT_UNDEFINED;

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("allReduceType", allReduceType);
    v("quantType", quantType);
    v("outDataType", outDataType);
  }
};

Status CreateOperation(const AllReduceParam& param, Operation** op);

}  // namespace collops
