#include "json_demo_file.h"

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

namespace collops_demo {
namespace {

using collops::DataType;
using nlohmann::json;

const std::map<std::string, DataType>& DtypesByName() {
  static const std::map<std::string, DataType> names = {
      {"float32", collops::ACL_FLOAT}, {"float16", collops::ACL_FLOAT16},
      {"bfloat16", collops::ACL_BF16}, {"int8", collops::ACL_INT8},
      {"int16", collops::ACL_INT16},   {"int32", collops::ACL_INT32},
      {"int64", collops::ACL_INT64},   {"uint8", collops::ACL_UINT8},
      {"float64", collops::ACL_DOUBLE}};
  return names;
}

/// Writes `value` into one element; float16/bfloat16 by truncating a float (the demo's values
/// are small integers, exactly representable).
void Store(DataType dtype, double value, uint8_t* p) {
  switch (dtype) {
    case collops::ACL_FLOAT: {
      float v = value;
      std::memcpy(p, &v, 4);
      break;
    }
    case collops::ACL_DOUBLE:
      std::memcpy(p, &value, 8);
      break;
    case collops::ACL_INT8:
    case collops::ACL_UINT8:
      *p = static_cast<uint8_t>(static_cast<int>(value));
      break;
    case collops::ACL_INT16: {
      int16_t v = value;
      std::memcpy(p, &v, 2);
      break;
    }
    case collops::ACL_INT32: {
      int32_t v = value;
      std::memcpy(p, &v, 4);
      break;
    }
    case collops::ACL_INT64: {
      int64_t v = value;
      std::memcpy(p, &v, 8);
      break;
    }
    case collops::ACL_BF16: {
      float f = value;
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t h = bits >> 16;
      std::memcpy(p, &h, 2);
      break;
    }
    case collops::ACL_FLOAT16: {
      float f = value;
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      const uint32_t sign = (bits >> 16) & 0x8000;
      const int exp = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
      uint16_t h =
          value == 0 ? sign : static_cast<uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ff));
      std::memcpy(p, &h, 2);
      break;
    }
    default:
      throw std::runtime_error("unsupported dtype in demo file");
  }
}

double Load(DataType dtype, const uint8_t* p) {
  switch (dtype) {
    case collops::ACL_FLOAT: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case collops::ACL_DOUBLE: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case collops::ACL_INT8:
      return static_cast<int8_t>(*p);
    case collops::ACL_UINT8:
      return *p;
    case collops::ACL_INT16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case collops::ACL_INT32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case collops::ACL_INT64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case collops::ACL_BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case collops::ACL_FLOAT16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
      const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(mant + 1024, exp - 25);
      return (h & 0x8000) ? -mag : mag;
    }
    default:
      return 0;
  }
}

}  // namespace

OwnedTensor MakeTensor(DataType dtype, const std::vector<int64_t>& shape) {
  for (const int64_t n : shape) {
    if (n < 0) throw std::invalid_argument("an input shape has a negative dim");
  }
  // The demo allocates every tensor: a shape over 1 GiB is a typo, not a test.
  const int64_t bytes =
      collops::CheckedBytes(shape.data(), shape.size(), collops::DataTypeSize(dtype));
  if (bytes < 0 || bytes > (int64_t{1} << 30)) {
    throw std::invalid_argument("an input shape needs more than the demo's 1 GiB per tensor");
  }
  OwnedTensor t;
  t.tensor.desc.dtype = dtype;
  t.tensor.desc.shape = collops::MakeDims(shape);
  t.tensor.dataSize = collops::TensorBytes(t.tensor.desc);
  t.bytes.assign(t.tensor.dataSize + 1, 0);
  t.tensor.deviceData = t.bytes.data();
  return t;
}

std::string Render(const OwnedTensor& t) {
  const auto& shape = t.tensor.desc.shape;
  const size_t width = collops::DataTypeSize(t.tensor.desc.dtype);
  const int64_t inner = shape.dimNum ? shape.dims[shape.dimNum - 1] : 1;
  const int64_t n = collops::NumElements(shape);
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i % inner == 0)
      out << (i ? "], [" : "[");
    else
      out << ", ";
    out << Load(t.tensor.desc.dtype, t.bytes.data() + i * width);
  }
  out << (n ? "]]" : "]");
  return out.str();
}

void CheckDemoFile(const json& spec) {
  if (!spec.is_object() || !spec.contains("ranks") || !spec["ranks"].is_array() ||
      spec["ranks"].empty()) {
    throw std::invalid_argument("expects an object with a non-empty \"ranks\" array");
  }
}

DemoRank ReadDemoRank(const json& spec, int rank, int rankSize) {
  const json& rankSpec = spec.at("ranks").at(rank);
  DemoRank out;
  out.param = spec.value("param", json::object());
  const json rankParam = rankSpec.value("param", json::object());
  for (const auto& item : rankParam.items()) {
    out.param[item.key()] = item.value();
  }
  out.param["rank"] = rank;
  out.param["rankSize"] = rankSize;
  out.param["commMode"] = 1;
  out.opName = spec.at("op").get<std::string>();
  for (const auto& in : rankSpec.at("inputs")) {
    const DataType dtype = DtypesByName().at(in.at("dtype").get<std::string>());
    OwnedTensor t = MakeTensor(dtype, in.at("shape").get<std::vector<int64_t>>());
    const auto data = in.value("data", std::vector<double>());
    if (data.size() * collops::DataTypeSize(dtype) > t.tensor.dataSize) {
      throw std::invalid_argument(collops::Concat(
          "inputs[", out.inputs.size(), "] has ", data.size(), " data values but its shape holds ",
          t.tensor.dataSize / collops::DataTypeSize(dtype)));
    }
    for (size_t i = 0; i < data.size(); ++i)
      Store(dtype, data[i], t.bytes.data() + i * collops::DataTypeSize(dtype));
    out.inputs.push_back(std::move(t));
  }
  return out;
}

std::string RunDemoRank(const json& spec, int rank, int rankSize, collops::Context* context) {
  DemoRank mine = ReadDemoRank(spec, rank, rankSize);
  const std::string& opName = mine.opName;
  std::ostringstream report;
  collops::OperationPtr op = collops::MakeOperation(opName, mine.param);
  std::vector<OwnedTensor>& inputs = mine.inputs;
  collops::VariantPack pack;
  std::vector<collops::TensorDesc> inDescs, outDescs;
  for (auto& t : inputs) {
    pack.inTensors.push_back(t.tensor);
    inDescs.push_back(t.tensor.desc);
  }
  auto check = [&](collops::Status s, const char* step) {
    if (s != collops::NO_ERROR) {
      throw std::runtime_error(std::string(step) + " failed: " + collops::StatusName(s) + ": " +
                               collops::LastErrorMessage());
    }
  };
  check(op->InferShape(inDescs, outDescs), "InferShape");
  std::vector<OwnedTensor> outputs;
  for (const auto& d : outDescs) {
    outputs.push_back(
        MakeTensor(d.dtype, std::vector<int64_t>(d.shape.dims, d.shape.dims + d.shape.dimNum)));
    pack.outTensors.push_back(outputs.back().tensor);
  }
  uint64_t workspaceSize = 0;
  check(op->Setup(pack, workspaceSize, context), "Setup");
  std::vector<uint8_t> workspace(workspaceSize);
  check(op->Execute(pack, workspace.data(), workspaceSize, context), "Execute");
  report << "rank " << rank << " " << opName << ":";
  for (size_t i = 0; i < outputs.size(); ++i) {
    report << " output[" << i << "] " << collops::DimsToString(outputs[i].tensor.desc.shape) << " "
           << Render(outputs[i]);
  }
  if (outputs.empty()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      report << " input[" << i << "] after " << Render(inputs[i]);
    }
  }
  return report.str();
}

}  // namespace collops_demo
