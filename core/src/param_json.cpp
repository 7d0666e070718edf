#include "collops/param_json.h"

#include <limits>

#include "collops/status.h"

namespace collops {
namespace {

/// dump() that never throws: bytes that are not UTF-8 (C++ callers can pass such strings; text
/// input cannot hold them) are replaced.
std::string SafeDump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Cut(std::string text) { return text.size() > 60 ? text.substr(0, 57) + "..." : text; }

}  // namespace

std::string ShowJson(const nlohmann::json& value) {
  if (!value.is_structured()) return Cut(SafeDump(value));
  std::string text = value.is_array() ? "[" : "{";
  for (auto it = value.begin(); it != value.end() && text.size() <= 60; ++it) {
    if (it != value.begin()) text += ",";
    if (value.is_object()) text += SafeDump(nlohmann::json(it.key())) + ":";
    text += it->is_structured() ? (it->is_array() ? "[...]" : "{...}") : SafeDump(*it);
  }
  text += value.is_array() ? "]" : "}";
  return Cut(text);
}

JsonParamReader::JsonParamReader(const nlohmann::json& json, std::string opName,
                                 std::string keyPrefix)
    : json_(json), opName_(std::move(opName)), keyPrefix_(std::move(keyPrefix)) {
  if (!json_.is_object()) {
    Fail(ERROR_INVALID_PARAM, opName_, ": params must be a JSON object, got ", json_.type_name(),
         " ", ShowJson(json_));
  }
}

const nlohmann::json* JsonParamReader::Find(const char* key) {
  claimed_.insert(key);
  const auto it = json_.find(key);
  return it == json_.end() ? nullptr : &*it;
}

void JsonParamReader::WrongType(const char* key, const nlohmann::json& value,
                                const char* expected) const {
  Fail(ERROR_INVALID_PARAM, opName_, ": param \"", keyPrefix_, key, "\" must be ", expected,
       ", got ", value.type_name(), " ", ShowJson(value));
}

int64_t JsonParamReader::ReadInteger(const char* key, const nlohmann::json& value, int64_t lo,
                                     int64_t hi) const {
  if (!value.is_number_integer()) WrongType(key, value, "an integer");
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    Fail(ERROR_INVALID_PARAM, opName_, ": param \"", keyPrefix_, key, "\" = ", ShowJson(value),
         " is out of range");
  }
  const int64_t v = value.get<int64_t>();
  if (v < lo || v > hi) {
    Fail(ERROR_INVALID_PARAM, opName_, ": param \"", keyPrefix_, key, "\" = ", v,
         " is out of range [", lo, ", ", hi, "]");
  }
  return v;
}

void JsonParamReader::operator()(const char* key, int& field) {
  if (const auto* v = Find(key)) {
    field = static_cast<int>(
        ReadInteger(key, *v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  }
}

void JsonParamReader::operator()(const char* key, int64_t& field) {
  if (const auto* v = Find(key)) {
    field = ReadInteger(key, *v, std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max());
  }
}

void JsonParamReader::operator()(const char* key, bool& field) {
  if (const auto* v = Find(key)) {
    if (!v->is_boolean()) WrongType(key, *v, "true or false");
    field = v->get<bool>();
  }
}

void JsonParamReader::operator()(const char* key, std::string& field) {
  if (const auto* v = Find(key)) {
    if (!v->is_string()) WrongType(key, *v, "a string");
    field = v->get<std::string>();
  }
}

void JsonParamReader::operator()(const char* key, std::vector<int64_t>& field) {
  if (const auto* v = Find(key)) {
    if (!v->is_array()) WrongType(key, *v, "an array of integers");
    std::vector<int64_t> values;
    values.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string element = Concat(key, "[", i, "]");
      values.push_back(ReadInteger(element.c_str(), (*v)[i], std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max()));
    }
    field = std::move(values);
  }
}

void JsonParamReader::operator()(const char* key, CommMode& field) {
  if (const auto* v = Find(key)) {
    field = static_cast<CommMode>(ReadInteger(key, *v, std::numeric_limits<int32_t>::min(),
                                              std::numeric_limits<int32_t>::max()));
  }
}

void JsonParamReader::operator()(const char* key, std::array<uint8_t, kRsvSize>& field) {
  if (const auto* v = Find(key)) {
    if (!v->is_array()) WrongType(key, *v, "an array of integers");
    if (v->size() > kRsvSize) {
      Fail(ERROR_INVALID_PARAM, opName_, ": param \"", key, "\" has ", v->size(),
           " entries; at most ", kRsvSize, " are allowed");
    }
    field.fill(0);
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string element = Concat(key, "[", i, "]");
      field[i] = static_cast<uint8_t>(ReadInteger(element.c_str(), (*v)[i], 0, 255));
    }
  }
}

void JsonParamReader::Finish() const {
  for (const auto& item : json_.items()) {
    if (claimed_.count(item.key()) == 0) {
      std::string known;
      for (const auto& k : claimed_) known += (known.empty() ? "" : ", ") + k;
      Fail(ERROR_INVALID_PARAM, opName_, ": unknown param \"", keyPrefix_, item.key(),
           "\" (known: ", known, ")");
    }
  }
}

void JsonParamWriter::operator()(const char* key, const std::array<uint8_t, kRsvSize>& field) {
  json[key] = std::vector<int>(field.begin(), field.end());
}

}  // namespace collops
