// One OperationTorch call's torch tensors as collops tensors: descriptions for InferShape, the
// VariantPack for Setup and Execute, and torch outputs for inferred descriptions. This is the
// argument-conversion part of every call.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collops/tensor.h"
#include "host_count_binding.h"

namespace collops {

/// "inTensors[2]" / "outTensors[0]": the names ATB's own messages use for variant pack slots.
std::string Slot(const char* role, size_t index);

/// Where a tensor came from, for messages: a variant pack slot (role and index) or a name
/// ("workspace"). Its text is built only for a message: every call names every tensor.
struct SlotName {
  SlotName(const char* role, size_t index) : role(role), index(index), indexed(true) {}
  SlotName(const char* name) : role(name), index(0), indexed(false) {}  // NOLINT: implicit
  std::string Text() const { return indexed ? Slot(role, index) : std::string(role); }

  const char* role;
  size_t index;
  bool indexed;
};

/// The description of `t`; throws Error naming `slot` for dtypes or ranks collops cannot hold.
TensorDesc ToDesc(const at::Tensor& t, const SlotName& slot);

/// A collops view of `t`'s memory. The memory must be host memory laid out densely, because the
/// collectives read and write it as one flat buffer; throws Error naming `slot` otherwise.
Tensor ToCollopsTensor(const at::Tensor& t, const SlotName& slot);

/// The descriptions of the inputs (any device or layout: only shapes and dtypes are read).
std::vector<TensorDesc> InputDescs(const std::vector<at::Tensor>& ins);

std::vector<int64_t> ShapeOf(const TensorDesc& desc);

/// `ins` with every non-contiguous CPU tensor replaced by a contiguous copy, as ATB's
/// BuildVariantPack does (Utils::ContiguousAtTensor): the collectives read inputs as one flat
/// buffer. Outputs are never copied: the results must land in the caller's tensors.
std::vector<at::Tensor> DenseInputs(const std::vector<at::Tensor>& ins);

/// The VariantPack over (ins, outs), with bound host counts applied to the inputs.
VariantPack BuildVariantPack(const std::vector<at::Tensor>& ins,
                             const std::vector<at::Tensor>& outs, const HostCountBinding& binding);

}  // namespace collops
