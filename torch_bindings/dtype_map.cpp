#include "dtype_map.h"

#include <utility>

#include "collops/status.h"

namespace collops {
namespace {

// One row per dtype collops moves, in the order messages list them.
constexpr std::pair<c10::ScalarType, DataType> kTable[] = {
    {c10::kChar, ACL_INT8},   {c10::kShort, ACL_INT16},  {c10::kInt, ACL_INT32},
    {c10::kLong, ACL_INT64},  {c10::kHalf, ACL_FLOAT16}, {c10::kBFloat16, ACL_BF16},
    {c10::kFloat, ACL_FLOAT}, {c10::kByte, ACL_UINT8},   {c10::kDouble, ACL_DOUBLE},
    {c10::kBool, ACL_BOOL},
};

}  // namespace

DataType CollopsDtypeOf(c10::ScalarType type) {
  for (const auto& [torchType, collopsType] : kTable) {
    if (torchType == type) return collopsType;
  }
  return ACL_DT_UNDEFINED;
}

std::optional<c10::ScalarType> TorchDtypeOf(DataType dtype) {
  for (const auto& [torchType, collopsType] : kTable) {
    if (collopsType == dtype) return torchType;
  }
  return std::nullopt;
}

c10::ScalarType RequireTorchDtype(DataType dtype, const char* who) {
  const std::optional<c10::ScalarType> type = TorchDtypeOf(dtype);
  if (!type) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, who, "dtype ", DataTypeName(dtype),
         " has no torch equivalent");
  }
  return *type;
}

const std::string& MappedDtypesText() {
  static const std::string kText = [] {
    std::string text;
    for (const auto& row : kTable) text += (text.empty() ? "" : ", ") + DataTypeName(row.second);
    return text;
  }();
  return kText;
}

}  // namespace collops
