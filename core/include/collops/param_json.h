// JSON <-> param struct, written once for every op: a param struct lists its fields in
// VisitFields(v), and these visitors parse (strictly) or print them.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/comm_params.h"

namespace collops {

/// A short rendering of `value` for an error message, safe for any value: at most ~60 characters,
/// containers summarised one level deep (dump() recurses once per nesting level, so showing a
/// deeply nested value from a user's file or params would overflow the stack), bytes that are
/// not UTF-8 replaced.
std::string ShowJson(const nlohmann::json& value);

/// True for a struct that lists its own fields (a param's nested struct, as ATB's
/// LinearParallelParam::twoDimTPInfo): it is read from and written to a JSON object.
template <class T, class Visitor, class = void>
struct HasVisitFields : std::false_type {};
template <class T, class Visitor>
struct HasVisitFields<
    T, Visitor, std::void_t<decltype(std::declval<T&>().VisitFields(std::declval<Visitor&>()))>>
    : std::true_type {};

/// Reads fields out of a JSON object. Absent keys keep their defaults; a present key of the wrong
/// JSON type, or a key no field claims (reported by Finish), throws Error(ERROR_INVALID_PARAM)
/// naming the op, the key and the offending value. A nested struct's keys are named with its
/// key in front ("twoDimTPInfo.agDim").
class JsonParamReader {
 public:
  JsonParamReader(const nlohmann::json& json, std::string opName, std::string keyPrefix = "");

  void operator()(const char* key, int& field);
  void operator()(const char* key, int64_t& field);
  void operator()(const char* key, bool& field);
  void operator()(const char* key, std::string& field);
  void operator()(const char* key, std::vector<int64_t>& field);
  void operator()(const char* key, CommMode& field);
  void operator()(const char* key, std::array<uint8_t, kRsvSize>& field);
  template <class Struct, std::enable_if_t<HasVisitFields<Struct, JsonParamReader>::value, int> = 0>
  void operator()(const char* key, Struct& field) {
    if (const auto* v = Find(key)) {
      if (!v->is_object()) WrongType(key, *v, "an object");
      JsonParamReader nested(*v, opName_, keyPrefix_ + key + ".");
      field.VisitFields(nested);
      nested.Finish();
    }
  }

  /// Throws for the first key that no field claimed.
  void Finish() const;

 private:
  const nlohmann::json* Find(const char* key);
  [[noreturn]] void WrongType(const char* key, const nlohmann::json& value,
                              const char* expected) const;
  int64_t ReadInteger(const char* key, const nlohmann::json& value, int64_t lo, int64_t hi) const;

  const nlohmann::json& json_;
  std::string opName_;
  std::string keyPrefix_;  ///< "" or a nested struct's "key."
  std::set<std::string> claimed_;
};

/// Writes fields into a JSON object (the inverse of JsonParamReader).
class JsonParamWriter {
 public:
  template <class T>
  void operator()(const char* key, const T& field) {
    if constexpr (HasVisitFields<T, JsonParamWriter>::value) {
      JsonParamWriter nested;
      T copy = field;  // VisitFields takes its fields by non-const reference
      copy.VisitFields(nested);
      json[key] = std::move(nested.json);
    } else {
      json[key] = field;
    }
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
