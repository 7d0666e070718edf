#include "host_count_binding.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "collops/param_json.h"
#include "collops/status.h"
#include "variant_pack.h"

namespace collops {
namespace {

using Json = nlohmann::json;

// Reads `value` as a count (an integer >= 0), naming `key` in the error. An integral float (3.0)
// is accepted, as ATB's binder reads it with get<int64_t>(); one with a fraction (1.5), which
// get<int64_t>() would truncate, is refused.
int64_t ReadCount(const std::string& where, const std::string& key, const Json& value) {
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // [-2^63, 2^63): the doubles that convert to int64 exactly.
    if (!std::isfinite(d) || std::trunc(d) != d || d < -9223372036854775808.0 ||
        d >= 9223372036854775808.0) {
      Fail(ERROR_INVALID_PARAM, where, ": ", key, " must hold integers, got ", ShowJson(value));
    }
    const auto n = static_cast<int64_t>(d);
    if (n < 0) Fail(ERROR_INVALID_PARAM, where, ": ", key, " = ", ShowJson(value), " is negative");
    return n;
  }
  if (!value.is_number_integer()) {
    Fail(ERROR_INVALID_PARAM, where, ": ", key, " must hold integers, got ", ShowJson(value));
  }
  const int64_t n = value.get<int64_t>();
  if (value.is_number_unsigned() && n < 0) {  // above INT64_MAX
    Fail(ERROR_INVALID_PARAM, where, ": ", key, " = ", ShowJson(value), " does not fit in int64");
  }
  if (n < 0) Fail(ERROR_INVALID_PARAM, where, ": ", key, " = ", n, " is negative");
  return n;
}

}  // namespace

HostCountBinding HostCountBinding::Parse(const OperationBase& op, const std::string& runParamJson) {
  const std::string where = Concat(op.GetName(), ".set_varaintpack_param");
  Json json;
  try {
    json = Json::parse(runParamJson);
  } catch (const Json::parse_error& e) {
    Fail(ERROR_INVALID_PARAM, where, ": malformed JSON: ", e.what());
  }
  if (!json.is_object()) Fail(ERROR_INVALID_PARAM, where, ": expected a JSON object");
  const std::vector<TensorSpec> specs = op.InputSpecs();
  HostCountBinding binding;
  binding.opName_ = op.GetName();
  binding.inputs_.resize(specs.size());
  for (const auto& [key, value] : json.items()) {
    auto spec = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& s) {
      return s.IsHostCounts() && key == s.name;
    });
    if (spec == specs.end()) {
      std::string keys;
      for (const auto& s : specs) {
        if (s.IsHostCounts()) keys += (keys.empty() ? "" : ", ") + std::string(s.name);
      }
      Fail(ERROR_INVALID_PARAM, where, ": unknown key ", ShowJson(Json(key)),
           keys.empty() ? std::string("; this operation takes no host counts")
                        : "; expected one of " + keys);
    }
    const bool one = spec->countsLength == CountsLength::kOne;
    std::vector<int64_t> counts;
    if (one && !value.is_array()) {
      counts.push_back(ReadCount(where, key, value));
    } else if (value.is_array()) {
      for (size_t i = 0; i < value.size(); ++i) {
        counts.push_back(ReadCount(where, Concat(key, "[", i, "]"), value[i]));
      }
    } else {
      Fail(ERROR_INVALID_PARAM, where, ": ", key, " must be a list of integers, got ",
           ShowJson(value));
    }
    // Checked here, not only by the op, so that the error names the key the user wrote.
    const int64_t expected = one ? 1 : op.commParam().rankSize;
    if (static_cast<int64_t>(counts.size()) != expected) {
      Fail(ERROR_INVALID_PARAM, where, ": ", key, " has ", counts.size(), " entries but must have ",
           expected, one ? std::string(" (one count)") : std::string(" (rankSize)"));
    }
    Bound& bound = binding.inputs_[spec - specs.begin()];
    bound.key = spec->name;
    bound.counts = std::move(counts);
  }
  return binding;
}

void HostCountBinding::Apply(size_t index, const at::Tensor& tensor, Tensor& t) const {
  if (index >= inputs_.size() || inputs_[index].key == nullptr) return;
  const Bound& bound = inputs_[index];
  // ATB's binder points hostData at the bound values without looking at the tensor; the op reads
  // numel() counts from hostData, so the lengths must agree.
  if (static_cast<size_t>(tensor.numel()) != bound.counts.size()) {
    Fail(ERROR_INVALID_TENSOR_SIZE, opName_, ": ", Slot("inTensors", index), " has ",
         tensor.numel(), " elements but set_varaintpack_param bound ", bound.counts.size(),
         " values to it");
  }
  // Other dtypes are left to the op, which refuses them.
  if (tensor.scalar_type() == c10::kLong && tensor.numel() > 0) {
    const int64_t* data = tensor.const_data_ptr<int64_t>();
    if (!std::equal(bound.counts.begin(), bound.counts.end(), data)) {
      Fail(ERROR_INVALID_PARAM, opName_, ": ", Slot("inTensors", index), " (", bound.key,
           ") holds ", Json(std::vector<int64_t>(data, data + tensor.numel())).dump(),
           " but set_varaintpack_param bound ", bound.key, " = ", Json(bound.counts).dump(),
           "; pass the same counts to both (a set_varaintpack_param binding lasts until the next "
           "set_varaintpack_param or set_param)");
    }
  }
  t.hostData = const_cast<int64_t*>(bound.counts.data());
}

}  // namespace collops
