// The one table between torch dtypes and collops dtypes (ACL's aclDataType numbering), for every
// piece of the binding that hands torch memory to collops or back.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "collops/tensor.h"

namespace collops {

/// The collops dtype of `type`; ACL_DT_UNDEFINED where collops has none (complex, float8, ...).
DataType CollopsDtypeOf(c10::ScalarType type);

/// The torch dtype of `dtype`; nullopt where torch has none (ACL_DT_UNDEFINED).
std::optional<c10::ScalarType> TorchDtypeOf(DataType dtype);

/// TorchDtypeOf, or Error(ERROR_INVALID_TENSOR_DTYPE) "<who>dtype <name> has no torch equivalent".
c10::ScalarType RequireTorchDtype(DataType dtype, const char* who);

/// "int8, int16, ..., bool": every dtype of the table, for messages that list them.
const std::string& MappedDtypesText();

}  // namespace collops
