#include "json_demo_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "json_demo_values.h"

namespace collops_demo {
namespace {

using collops::DataType;
using nlohmann::json;

/// The demo reads a file whole: a larger one is not a demo.
constexpr int64_t kMaxFileBytes = int64_t{1} << 30;
/// Every rank is a thread of the demo.
constexpr size_t kMaxDemoRanks = 64;

[[noreturn]] void Refuse(const std::string& where, const std::string& what) {
  throw DemoFileError(where.empty() ? what : collops::Concat(where, ": ", what));
}

/// A short form of `value` for a message.
std::string Shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

/// The member `key` of the object `object` (at `where`), or null when it is absent.
const json* Member(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

/// The optional object `key` of `object`: its members, or none when absent.
json OptionalObject(const json& object, const char* key, const std::string& where) {
  const json* value = Member(object, key);
  if (value == nullptr) return json::object();
  if (!value->is_object()) Refuse(where, collops::Concat(Shown(*value), " is not an object"));
  return *value;
}

std::vector<int64_t> ReadShape(const json& input, const std::string& where) {
  const json* shape = Member(input, "shape");
  if (shape == nullptr) Refuse(where, "is missing (an array of dims)");
  if (!shape->is_array()) Refuse(where, collops::Concat(Shown(*shape), " is not an array of dims"));
  if (shape->size() > collops::kMaxDimNum) {
    Refuse(where, collops::Concat("has ", shape->size(), " dims; a tensor has at most ",
                                  collops::kMaxDimNum));
  }
  std::vector<int64_t> dims;
  for (size_t d = 0; d < shape->size(); ++d) {
    const json& dim = (*shape)[d];
    const std::string at = collops::Concat(where, "[", d, "]");
    if (!dim.is_number_integer() || (dim.is_number_unsigned() && dim.get<uint64_t>() > INT64_MAX)) {
      Refuse(at, collops::Concat(Shown(dim), " is not an integer dim"));
    }
    if (dim.get<int64_t>() < 0) Refuse(at, collops::Concat(dim.get<int64_t>(), " is negative"));
    dims.push_back(dim.get<int64_t>());
  }
  return dims;
}

OwnedTensor ReadInput(const json& input, const std::string& where) {
  if (!input.is_object()) {
    Refuse(where, collops::Concat(Shown(input), " is not an object with dtype, shape and data"));
  }
  const json* dtypeName = Member(input, "dtype");
  DataType dtype{};
  if (dtypeName == nullptr) Refuse(where + ".dtype", "is missing");
  if (!dtypeName->is_string() || !DtypeByName(dtypeName->get<std::string>(), &dtype)) {
    Refuse(where + ".dtype", collops::Concat(Shown(*dtypeName), " is not one of ", DtypeNames()));
  }
  const std::vector<int64_t> shape = ReadShape(input, where + ".shape");
  OwnedTensor t;
  try {
    t = MakeTensor(dtype, shape);
  } catch (const std::invalid_argument& e) {
    Refuse(where + ".shape", e.what());
  }
  const json* data = Member(input, "data");
  if (data == nullptr) return t;
  if (!data->is_array()) Refuse(where + ".data", collops::Concat(Shown(*data), " is not an array"));
  const size_t width = collops::DataTypeSize(dtype);
  const size_t holds = t.tensor.dataSize / width;
  if (data->size() > holds) {
    Refuse(where + ".data",
           collops::Concat(data->size(), " values, but the shape ",
                           collops::DimsToString(t.tensor.desc.shape), " holds ", holds));
  }
  for (size_t i = 0; i < data->size(); ++i) {
    const json& value = (*data)[i];
    try {
      StoreValue(dtype, value, t.bytes.data() + i * width);
    } catch (const std::invalid_argument& e) {
      Refuse(collops::Concat(where, ".data[", i, "]"), Shown(value) + " " + e.what());
    }
  }
  return t;
}

/// The whole of the regular file at `path`, or DemoFileError.
std::string ReadFileText(const std::string& path) {
  struct stat info{};
  if (stat(path.c_str(), &info) != 0) Refuse("", "cannot be read");
  // A FIFO or a device would block or never end.
  if (!S_ISREG(info.st_mode)) Refuse("", "is not a regular file");
  if (info.st_size > kMaxFileBytes) Refuse("", "is larger than the demo's 1 GiB");
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  if (!file || !(text << file.rdbuf())) Refuse("", "cannot be read");
  return text.str();
}

}  // namespace

OwnedTensor MakeTensor(DataType dtype, const std::vector<int64_t>& shape) {
  if (shape.size() > collops::kMaxDimNum) {
    throw std::invalid_argument(
        collops::Concat("has ", shape.size(), " dims; a tensor has at most ", collops::kMaxDimNum));
  }
  for (const int64_t n : shape) {
    if (n < 0) throw std::invalid_argument("has a negative dim");
  }
  // The demo allocates every tensor: a shape over 1 GiB is a typo, not a test.
  const int64_t bytes =
      collops::CheckedBytes(shape.data(), shape.size(), collops::DataTypeSize(dtype));
  if (bytes < 0 || bytes > (int64_t{1} << 30)) {
    throw std::invalid_argument("needs more than the demo's 1 GiB per tensor");
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
  std::string out = "[";
  for (int64_t i = 0; i < n; ++i) {
    out += i % inner != 0 ? ", " : i != 0 ? "], [" : "[";
    out += ElementText(t.tensor.desc.dtype, t.bytes.data() + i * width);
  }
  out += n != 0 ? "]]" : "]";
  return out;
}

json ParseDemoText(const std::string& text) {
  // Refused while parsing (the parser itself keeps its nesting on the heap): a value nested a
  // million deep would overflow the stack of anything that later recurses over it (a copy, a
  // dump, an op's param parser).
  const json::parser_callback_t depthLimit = [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxDemoDepth) {
      Refuse("", collops::Concat("arrays and objects nest deeper than ", kMaxDemoDepth, " levels"));
    }
    return true;
  };
  json spec;
  try {
    spec = json::parse(text, depthLimit);
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ...": the part after "] ".
    const std::string what = e.what();
    const size_t from = what.find("] ");
    Refuse("", collops::Concat("is not JSON: ",
                               from == std::string::npos ? what : what.substr(from + 2)));
  }
  CheckDemoFile(spec);
  return spec;
}

void CheckDemoFile(const json& spec) {
  if (!spec.is_object() || !spec.contains("ranks") || !spec["ranks"].is_array() ||
      spec["ranks"].empty()) {
    Refuse("", "expects an object with a non-empty \"ranks\" array");
  }
  if (spec["ranks"].size() > kMaxDemoRanks) {
    Refuse("ranks", collops::Concat(spec["ranks"].size(), " entries; the demo runs at most ",
                                    kMaxDemoRanks, " ranks (threads)"));
  }
}

DemoRank ReadDemoRank(const json& spec, int rank, int rankSize) {
  CheckDemoFile(spec);
  DemoRank out;
  const json* op = Member(spec, "op");
  if (op == nullptr) Refuse("op", "is missing (the operation's name, e.g. \"AllReduceOperation\")");
  if (!op->is_string()) Refuse("op", collops::Concat(Shown(*op), " is not a string"));
  out.opName = op->get<std::string>();
  const std::vector<std::string> known = collops::ListOperations();
  if (std::find(known.begin(), known.end(), out.opName) == known.end()) {
    Refuse("op", collops::Concat(Shown(*op), " is not an operation collops knows"));
  }
  const std::string where = collops::Concat("ranks[", rank, "]");
  const json& rankSpec = spec["ranks"].at(rank);
  if (!rankSpec.is_object()) {
    Refuse(where, collops::Concat(Shown(rankSpec), " is not an object with param and inputs"));
  }
  out.param = OptionalObject(spec, "param", "param");
  const json rankParam = OptionalObject(rankSpec, "param", where + ".param");
  for (const auto& item : rankParam.items()) {
    out.param[item.key()] = item.value();
  }
  out.param["rank"] = rank;
  out.param["rankSize"] = rankSize;
  out.param["commMode"] = 1;
  const json* inputs = Member(rankSpec, "inputs");
  if (inputs == nullptr) Refuse(where + ".inputs", "is missing (an array, empty for none)");
  if (!inputs->is_array()) {
    Refuse(where + ".inputs", collops::Concat(Shown(*inputs), " is not an array"));
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    out.inputs.push_back(ReadInput((*inputs)[i], collops::Concat(where, ".inputs[", i, "]")));
  }
  return out;
}

std::string RunDemoRank(DemoRank mine, int rank, collops::Context* context) {
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

std::string RunDemoRank(const json& spec, int rank, int rankSize, collops::Context* context) {
  return RunDemoRank(ReadDemoRank(spec, rank, rankSize), rank, context);
}

int RunDemoFile(const std::string& path, std::ostream& out, std::ostream& err) {
  std::vector<DemoRank> ranks;
  try {
    const json spec = ParseDemoText(ReadFileText(path));
    const int rankSize = static_cast<int>(spec["ranks"].size());
    for (int rank = 0; rank < rankSize; ++rank) ranks.push_back(ReadDemoRank(spec, rank, rankSize));
  } catch (const std::exception& e) {
    err << path << ": " << e.what() << "\n";
    return 2;
  }
  const int rankSize = static_cast<int>(ranks.size());
  std::vector<std::string> reports(rankSize);
  std::vector<std::thread> threads;
  int failures = 0;
  std::mutex mutex;
  for (int rank = 0; rank < rankSize; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        reports[rank] = RunDemoRank(std::move(ranks[rank]), rank);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        reports[rank] = "rank " + std::to_string(rank) + " FAILED: " + e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : reports) out << r << "\n";
  return failures == 0 ? 0 : 1;
}

}  // namespace collops_demo
