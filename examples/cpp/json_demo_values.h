// The collops_json_demo's element values: a JSON number written into one element of a dtype, and
// an element read back as text, exactly (integers never pass through a double).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "collops/collops.h"

namespace collops_demo {

/// The dtype called `name` ("float32", "int64", ...); false for a name the demo does not know.
bool DtypeByName(const std::string& name, collops::DataType* dtype);
/// "float32, float16, ...": the names DtypeByName knows, for a message.
std::string DtypeNames();

/// Writes `value` into the element at `p` of `dtype`. Integer dtypes take integers in their range
/// (a number written with a fraction or an exponent counts when it is a whole number that a double
/// holds exactly); float dtypes take any number, rounded to nearest even, a value past the largest
/// finite one becoming an infinity and one below the smallest normal a subnormal or zero. Throws
/// std::invalid_argument saying why `value` does not fit, for the caller to name the field.
void StoreValue(collops::DataType dtype, const nlohmann::json& value, uint8_t* p);

/// The element at `p` of `dtype` as text: integers exactly, floats as a double prints.
std::string ElementText(collops::DataType dtype, const uint8_t* p);

}  // namespace collops_demo
