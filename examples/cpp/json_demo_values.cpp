#include "json_demo_values.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace collops_demo {
namespace {

using collops::DataType;
using nlohmann::json;

const std::pair<const char*, DataType> kDtypes[] = {
    {"float32", collops::ACL_FLOAT}, {"float16", collops::ACL_FLOAT16},
    {"bfloat16", collops::ACL_BF16}, {"float64", collops::ACL_DOUBLE},
    {"int8", collops::ACL_INT8},     {"int16", collops::ACL_INT16},
    {"int32", collops::ACL_INT32},   {"int64", collops::ACL_INT64},
    {"uint8", collops::ACL_UINT8}};

const char* NameOf(DataType dtype) {
  for (const auto& [name, type] : kDtypes) {
    if (type == dtype) return name;
  }
  return "?";
}

/// The range of an integer dtype.
void IntegerRange(DataType dtype, int64_t* lowest, int64_t* highest) {
  switch (dtype) {
    case collops::ACL_INT8:
      *lowest = INT8_MIN, *highest = INT8_MAX;
      return;
    case collops::ACL_UINT8:
      *lowest = 0, *highest = UINT8_MAX;
      return;
    case collops::ACL_INT16:
      *lowest = INT16_MIN, *highest = INT16_MAX;
      return;
    case collops::ACL_INT32:
      *lowest = INT32_MIN, *highest = INT32_MAX;
      return;
    default:
      *lowest = INT64_MIN, *highest = INT64_MAX;
      return;
  }
}

bool IsFloat(DataType dtype) {
  return dtype == collops::ACL_FLOAT || dtype == collops::ACL_FLOAT16 ||
         dtype == collops::ACL_BF16 || dtype == collops::ACL_DOUBLE;
}

/// `value` as the integer an integer dtype stores, or std::invalid_argument.
int64_t WholeNumber(DataType dtype, const json& value) {
  int64_t lowest = 0, highest = 0;
  IntegerRange(dtype, &lowest, &highest);
  const std::string range =
      collops::Concat("is outside ", NameOf(dtype), "'s range [", lowest, ", ", highest, "]");
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(highest)) throw std::invalid_argument(range);
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < lowest || v > highest) throw std::invalid_argument(range);
    return v;
  }
  const double v = value.get<double>();
  if (std::trunc(v) != v) {
    throw std::invalid_argument(collops::Concat("is not a whole number (", NameOf(dtype), ")"));
  }
  // Compared as doubles, which hold both ends of every range but int64's top exactly (2^63).
  if (v < static_cast<double>(lowest) || v >= static_cast<double>(highest) + 1.0) {
    throw std::invalid_argument(range);
  }
  constexpr double kExactUpTo = 9007199254740992.0;  // 2^53: every whole double up to it is exact
  if (std::fabs(v) > kExactUpTo) {
    throw std::invalid_argument(
        "has more digits than a number with a fraction or an exponent keeps; write it as an "
        "integer");
  }
  return static_cast<int64_t>(v);
}

/// `v` rounded to nearest even in float32: an infinity past the largest finite float (where a
/// plain conversion is undefined behaviour).
float ToFloat32(double v) {
  // Halfway between FLT_MAX and 2^128: from there on, the nearest (even) float is infinity.
  const double overflowFrom = static_cast<double>(FLT_MAX) + std::ldexp(1.0, 103);
  if (std::isfinite(v) && std::fabs(v) >= overflowFrom) {
    return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
  if (std::isfinite(v) && std::fabs(v) > FLT_MAX) return v > 0 ? FLT_MAX : -FLT_MAX;
  return static_cast<float>(v);
}

}  // namespace

bool DtypeByName(const std::string& name, DataType* dtype) {
  for (const auto& [known, type] : kDtypes) {
    if (name == known) {
      *dtype = type;
      return true;
    }
  }
  return false;
}

std::string DtypeNames() {
  std::string names;
  for (const auto& entry : kDtypes)
    names += collops::Concat(names.empty() ? "" : ", ", entry.first);
  return names;
}

void StoreValue(DataType dtype, const json& value, uint8_t* p) {
  if (!value.is_number()) throw std::invalid_argument("is not a number");
  if (!IsFloat(dtype)) {
    const int64_t v = WholeNumber(dtype, value);
    const size_t width = collops::DataTypeSize(dtype);
    // Little-endian two's complement: the low `width` bytes of the int64 are the element.
    std::memcpy(p, &v, width);
    return;
  }
  const double v = value.get<double>();
  if (dtype == collops::ACL_DOUBLE) {
    std::memcpy(p, &v, sizeof v);
    return;
  }
  const float f = ToFloat32(v);
  // float16 and bfloat16 round the float32 to nearest even as the library's reductions store
  // them: past the largest finite value to an infinity, below the smallest normal to a subnormal.
  collops::ConvertFromFloat32(&f, dtype, p, 1);
}

std::string ElementText(DataType dtype, const uint8_t* p) {
  if (!IsFloat(dtype)) {
    int64_t v = 0;
    switch (dtype) {
      case collops::ACL_INT8:
        v = static_cast<int8_t>(*p);
        break;
      case collops::ACL_UINT8:
        v = *p;
        break;
      case collops::ACL_INT16: {
        int16_t x;
        std::memcpy(&x, p, sizeof x);
        v = x;
        break;
      }
      case collops::ACL_INT32: {
        int32_t x;
        std::memcpy(&x, p, sizeof x);
        v = x;
        break;
      }
      default:
        std::memcpy(&v, p, sizeof v);
        break;
    }
    return std::to_string(v);
  }
  double v = 0;
  if (dtype == collops::ACL_DOUBLE) {
    std::memcpy(&v, p, sizeof v);
  } else {
    float f = 0;
    collops::ConvertToFloat32(dtype, p, &f, 1);
    v = f;
  }
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace collops_demo
