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

/// The description of `t`; throws Error naming `slot` for dtypes or ranks collops cannot hold.
TensorDesc ToDesc(const at::Tensor& t, const std::string& slot);

/// A collops view of `t`'s memory. The memory must be host memory laid out densely, because the
/// collectives read and write it as one flat buffer; throws Error naming `slot` otherwise.
Tensor ToCollopsTensor(const at::Tensor& t, const std::string& slot);

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
