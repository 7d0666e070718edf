// ATB's set_varaintpack_param: int64 host counts bound by name to an operation's host-count
// inputs, which the operation then reads from hostData (ATB's host-tensor binders). Which inputs
// take counts, under which names and how many each holds, the operation says itself
// (OperationBase::InputSpecs), so no operation is named here.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collops/operation_base.h"
#include "collops/tensor.h"

namespace collops {

class HostCountBinding {
 public:
  HostCountBinding() = default;

  /// Parses set_varaintpack_param's JSON object for `op`: every key names one of op's host-count
  /// inputs and holds its counts (integers >= 0; integral floats such as 3.0 too, as ATB reads
  /// them; one count may be given bare), as many as the input holds. Throws Error
  /// (ERROR_INVALID_PARAM) naming the key.
  static HostCountBinding Parse(const OperationBase& op, const std::string& runParamJson);

  /// Points `t.hostData` (input `index`, whose tensor is `tensor`) at the counts bound to it, if
  /// any, after checking that the tensor holds as many and, for int64 tensors, the same values:
  /// silently preferring either one would turn a stale binding (or stale tensors) into a wrong
  /// result. Throws Error naming the input and its key.
  void Apply(size_t index, const at::Tensor& tensor, Tensor& t) const;

 private:
  struct Bound {
    const char* key = nullptr;  ///< null: input not bound
    std::vector<int64_t> counts;
  };

  std::string opName_;
  std::vector<Bound> inputs_;  // by input index
};

}  // namespace collops
