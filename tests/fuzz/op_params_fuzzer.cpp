// libFuzzer harness: an operation's JSON params and tensors, as a user would pass them.
//
// Input: JSON text
//   {"op": "AllReduceOperation" | <index into ListOperations()>,
//    "param": {...},                                   the op's params, as given
//    "inputs": [{"dtype": 0, "shape": [2, 3], "values": [1, 2], "host": false, "null": false,
//                "dataSize": 24}, ...],
//    "outputs": [...same form...]}                     absent: as InferShape says
// Every op is created from "param" as given (all its validation). When the param names a job of
// one rank, the op is created again on a thread-mode lccl communicator of its own (commMode 1,
// in a fresh Context, no rank table), so InferShape, Setup and Execute run without peers on the
// fuzzed tensors. Any Status is a fine answer; a crash, a sanitizer report, a leak or a hang is
// a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/collops.h"

namespace {

using nlohmann::json;

/// Tensors larger than this are skipped: the harness allocates each one.
constexpr uint64_t kMaxTensorBytes = 1 << 20;

struct OwnedTensor {
  std::vector<uint8_t> bytes;
  collops::Tensor tensor;
};

int64_t IntOr(const json& object, const char* key, int64_t fallback) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

bool FlagOr(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

/// The tensor `spec` describes, or false when it is not one the harness can allocate.
bool MakeTensor(const json& spec, OwnedTensor& out) {
  if (!spec.is_object()) return false;
  collops::TensorDesc& desc = out.tensor.desc;
  desc.dtype = static_cast<collops::DataType>(IntOr(spec, "dtype", collops::ACL_FLOAT));
  desc.format = static_cast<collops::Format>(IntOr(spec, "format", collops::ACL_FORMAT_ND));
  const auto shape = spec.find("shape");
  if (shape != spec.end() && shape->is_array()) {
    for (const json& dim : *shape) {
      if (!dim.is_number_integer() || desc.shape.dimNum == collops::kMaxDimNum) return false;
      desc.shape.dims[desc.shape.dimNum++] = dim.get<int64_t>();
    }
  }
  // The bytes the description implies, when it is a sane one; the op must refuse the rest.
  uint64_t bytes = 0;
  const int64_t checked =
      collops::CheckedBytes(desc.shape.dims, desc.shape.dimNum, collops::DataTypeSize(desc.dtype));
  bool negative = false;
  for (uint64_t i = 0; i < desc.shape.dimNum; ++i) negative = negative || desc.shape.dims[i] < 0;
  if (!negative && checked >= 0) bytes = static_cast<uint64_t>(checked);
  const int64_t dataSize = IntOr(spec, "dataSize", static_cast<int64_t>(bytes));
  out.tensor.dataSize = static_cast<uint64_t>(dataSize);
  // The memory holds what the tensor claims (dataSize) and what its shape implies: an op may
  // trust either only after checking they agree.
  const uint64_t allocated = std::max<uint64_t>(bytes, out.tensor.dataSize);
  if (allocated > kMaxTensorBytes) return false;
  out.bytes.assign(allocated, 0);
  const auto values = spec.find("values");
  if (values != spec.end() && values->is_array() && !values->empty() && allocated != 0) {
    // Repeated over the tensor as elements of its dtype (8 bytes each for int64 counts).
    const size_t width = std::max<size_t>(1, collops::DataTypeSize(desc.dtype));
    size_t i = 0;
    for (size_t at = 0; at + width <= allocated; at += width, ++i) {
      const json& v = (*values)[i % values->size()];
      const int64_t value = v.is_number_integer() ? v.get<int64_t>() : 0;
      std::memcpy(out.bytes.data() + at, &value, std::min(width, sizeof value));
    }
  }
  void* data = FlagOr(spec, "null") ? nullptr : out.bytes.data();
  if (FlagOr(spec, "host")) {
    out.tensor.hostData = data;
  } else {
    out.tensor.deviceData = data;
  }
  return true;
}

bool MakeTensors(const json& specs, std::vector<OwnedTensor>& out) {
  if (!specs.is_array() || specs.size() > 16) return false;
  out.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!MakeTensor(specs[i], out[i])) return false;
  }
  return true;
}

/// InferShape, Setup and Execute of `op` on the fuzzed tensors, in a Context of its own.
void Run(collops::Operation& op, const json& spec) {
  std::vector<OwnedTensor> inputs;
  if (!MakeTensors(spec.value("inputs", json::array()), inputs)) return;
  collops::VariantPack pack;
  std::vector<collops::TensorDesc> inDescs, outDescs;
  for (OwnedTensor& t : inputs) {
    pack.inTensors.push_back(t.tensor);
    inDescs.push_back(t.tensor.desc);
  }
  const collops::Status inferred = op.InferShape(inDescs, outDescs);
  std::vector<OwnedTensor> outputs;
  if (spec.contains("outputs")) {
    if (!MakeTensors(spec["outputs"], outputs)) return;
  } else {
    if (inferred != collops::NO_ERROR) return;
    json shapes = json::array();
    for (const collops::TensorDesc& d : outDescs) {
      shapes.push_back(
          {{"dtype", d.dtype},
           {"shape", std::vector<int64_t>(d.shape.dims, d.shape.dims + d.shape.dimNum)}});
    }
    if (!MakeTensors(shapes, outputs)) return;
  }
  for (OwnedTensor& t : outputs) pack.outTensors.push_back(t.tensor);
  collops::Context* context = nullptr;
  if (collops::CreateContext(&context) != collops::NO_ERROR) return;
  uint64_t workspaceSize = 0;
  if (op.Setup(pack, workspaceSize, context) == collops::NO_ERROR &&
      workspaceSize <= kMaxTensorBytes) {
    std::vector<uint8_t> workspace(workspaceSize);
    op.Execute(pack, workspace.data(), workspaceSize, context);
  }
  collops::DestroyContext(context);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const json spec = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!spec.is_object()) return 0;
  static const std::vector<std::string> names = collops::ListOperations();
  std::string name;
  const auto op = spec.find("op");
  if (op == spec.end()) return 0;
  if (op->is_string()) {
    name = op->get<std::string>();
  } else if (op->is_number_unsigned()) {
    name = names[op->get<uint64_t>() % names.size()];
  } else {
    return 0;
  }
  const json param = spec.value("param", json::object());
  collops::Operation* created = nullptr;
  if (collops::CreateOperation(name, param, &created) != collops::NO_ERROR) return 0;
  collops::DestroyOperation(created);
  // One rank: the same op on a thread-mode communicator of its own, which needs no peers.
  if (!param.is_object() || param.value("rankSize", json()) != json(1)) return 0;
  json alone = param;
  alone["commMode"] = 1;
  alone["backend"] = "lccl";
  alone.erase("rankTableFile");
  collops::Operation* single = nullptr;
  if (collops::CreateOperation(name, alone, &single) != collops::NO_ERROR) return 0;
  std::unique_ptr<collops::Operation, collops::OperationDeleter> owned(single);
  Run(*single, spec);
  return 0;
}
