// JSON <-> param struct, written once for every op: a param struct lists its fields in
// VisitFields(v), and these visitors parse (strictly) or print them.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/comm_params.h"

namespace collops {

/// A short rendering of `value` for an error message, safe for any value: at most ~60 characters,
/// containers summarised one level deep (dump() recurses once per nesting level, so showing a
/// deeply nested value from a user's file or params would overflow the stack), bytes that are
/// not UTF-8 replaced.
std::string ShowJson(const nlohmann::json& value);

/// Reads fields out of a JSON object. Absent keys keep their defaults; a present key of the wrong
/// JSON type, or a key no field claims (reported by Finish), throws Error(ERROR_INVALID_PARAM)
/// naming the op, the key and the offending value.
class JsonParamReader {
 public:
  JsonParamReader(const nlohmann::json& json, std::string opName);

  void operator()(const char* key, int& field);
  void operator()(const char* key, int64_t& field);
  void operator()(const char* key, bool& field);
  void operator()(const char* key, std::string& field);
  void operator()(const char* key, std::vector<int64_t>& field);
  void operator()(const char* key, CommMode& field);
  void operator()(const char* key, std::array<uint8_t, kRsvSize>& field);

  /// Throws for the first key that no field claimed.
  void Finish() const;

 private:
  const nlohmann::json* Find(const char* key);
  [[noreturn]] void WrongType(const char* key, const nlohmann::json& value,
                              const char* expected) const;
  int64_t ReadInteger(const char* key, const nlohmann::json& value, int64_t lo, int64_t hi) const;

  const nlohmann::json& json_;
  std::string opName_;
  std::set<std::string> claimed_;
};

/// Writes fields into a JSON object (the inverse of JsonParamReader).
class JsonParamWriter {
 public:
  template <class T>
  void operator()(const char* key, const T& field) {
    json[key] = field;
  }
  void operator()(const char* key, const CommMode& field) { json[key] = static_cast<int>(field); }
  void operator()(const char* key, const std::array<uint8_t, kRsvSize>& field);

  nlohmann::json json = nlohmann::json::object();
};

/// Parses `json` into a default-constructed P. Throws Error(ERROR_INVALID_PARAM).
template <class P>
P ParamFromJson(const nlohmann::json& json, const std::string& opName) {
  P param;
  JsonParamReader reader(json, opName);
  param.VisitFields(reader);
  reader.Finish();
  return param;
}

template <class P>
nlohmann::json ParamToJson(P param) {
  JsonParamWriter writer;
  param.VisitFields(writer);
  return writer.json;
}

}  // namespace collops
