// torch.classes.OperationTorch.OperationTorch: ATB's Python test class, over collops operations.
//
// The Python surface (method names, the JSON strings they return, "set_varaintpack_param" with
// ATB's spelling) is ATB's, so ATB test scripts run unchanged. Where ATB is unsafe we differ:
// every execute* raises RuntimeError carrying the Status name and LastErrorMessage() instead of
// returning garbage, tensors must be CPU (the error names the input), outputs contiguous
// (inputs are made contiguous, as ATB's BuildVariantPack does), bound host counts must match the
// tensor they stand for element for element and value for value, and after a failed set_param
// the object holds no operation, so a script that ignores set_param's result never runs the
// previous one.
//
// The GIL: methods of a torch custom class called from Python run through
// torch::jit::runAndInsertCall, which releases the GIL around the call. So a rank blocked in a
// collective never stops the other Python threads, and threads can be the ranks of a
// commMode 1 job; tests/python/operation_torch/test_operation_torch_threads.py checks exactly that.
#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/collops.h"
#include "collops/operation_base.h"
#include "collops/param_json.h"
#include "dtype_map.h"
#include "intra_op_threads.h"
#include "shared_tensor.h"

namespace collops {
namespace {

/// Guarded, with torch's own errors (a tensor it cannot allocate) reported without the C++
/// backtrace that c10::Error::what() carries.
template <class Body>
Status GuardedTorch(Body&& body) {
  return Guarded([&] {
    try {
      body();
    } catch (const c10::Error& e) {
      Fail(ERROR_INTERNAL_ERROR, "torch: ", e.what_without_backtrace());
    }
  });
}

using Json = nlohmann::json;

// ---- torch <-> collops tensors -------------------------------------------------------------

c10::ScalarType ToScalarType(DataType dtype) {
  const std::optional<c10::ScalarType> type = TorchDtypeOf(dtype);
  if (!type) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, "the operation inferred dtype ", DataTypeName(dtype),
         ", which has no torch equivalent");
  }
  return *type;
}

// "inTensors[2]" / "outTensors[0]": the names ATB's own messages use for variant pack slots.
std::string Slot(const char* role, size_t index) { return Concat(role, "[", index, "]"); }

// The description of `t`; throws Error naming the slot for dtypes or ranks collops cannot hold.
TensorDesc ToDesc(const at::Tensor& t, const std::string& slot) {
  TensorDesc desc;
  desc.dtype = CollopsDtypeOf(t.scalar_type());
  if (desc.dtype == ACL_DT_UNDEFINED) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, slot, " has dtype ", c10::toString(t.scalar_type()),
         ", which collops does not support (", MappedDtypesText(), ")");
  }
  if (static_cast<size_t>(t.dim()) > kMaxDimNum) {
    Fail(ERROR_INVALID_TENSOR_DIM_NUM, slot, " has ", t.dim(), " dims; at most ", kMaxDimNum,
         " are supported");
  }
  desc.format = ACL_FORMAT_ND;
  desc.shape = MakeDims(t.sizes().vec());
  return desc;
}

// A collops view of `t`'s memory. The memory must be host memory laid out densely, because the
// collectives read and write it as one flat buffer.
Tensor ToCollopsTensor(const at::Tensor& t, const std::string& slot) {
  if (!t.defined()) Fail(ERROR_INVALID_TENSOR_ADDR, slot, " is an undefined tensor");
  if (!t.device().is_cpu()) {
    Fail(ERROR_INVALID_TENSOR_ADDR, slot, " is on device ", t.device().str(),
         "; OperationTorch works on CPU tensors (call .cpu() first)");
  }
  if (!t.is_contiguous()) {
    Fail(ERROR_INVALID_TENSOR_ADDR, slot, " is not contiguous (shape ", t.sizes(), ", strides ",
         t.strides(), "); collectives need dense memory, call .contiguous() first");
  }
  Tensor out;
  out.desc = ToDesc(t, slot);
  out.deviceData = t.numel() > 0 ? t.data_ptr() : nullptr;
  out.dataSize = static_cast<uint64_t>(t.numel()) * t.element_size();
  return out;
}

std::vector<TensorDesc> InputDescs(const std::vector<at::Tensor>& ins) {
  std::vector<TensorDesc> descs;
  for (size_t i = 0; i < ins.size(); ++i) descs.push_back(ToDesc(ins[i], Slot("inTensors", i)));
  return descs;
}

std::vector<int64_t> ShapeOf(const TensorDesc& desc) {
  return std::vector<int64_t>(desc.shape.dims, desc.shape.dims + desc.shape.dimNum);
}

/// A result object as the text Python parses. Messages are valid UTF-8 (ValidUtf8), but a report
/// must never fail for its text: any byte that still is not becomes U+FFFD instead of a type_error
/// that would replace the real error.
std::string Dump(const Json& result) {
  return result.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string ResultJson(Status status, const std::string& message) {
  return Dump(Json{{"result", static_cast<int>(status)}, {"message", message}});
}

// ---- host-count binding (ATB's set_varaintpack_param) ---------------------------------------

// One run-param key of set_varaintpack_param: the input slot whose hostData it becomes.
struct HostCountSlot {
  const char* key;
  size_t input;
  bool scalar;  // one count (sendCount, recvCount) rather than one per rank
};

// The input layouts of the ops whose counts live in host tensors (docs/operations.md).
const std::vector<HostCountSlot>& HostCountSlots(const std::string& opName) {
  static const std::map<std::string, std::vector<HostCountSlot>> kSlots = {
      {"AllToAllVV2Operation",
       {{"sendCounts", 1, false},
        {"sdispls", 2, false},
        {"recvCounts", 3, false},
        {"rdispls", 4, false}}},
      {"AllGatherVOperation",
       {{"sendCount", 1, true}, {"recvCounts", 2, false}, {"rdispls", 3, false}}},
      {"ReduceScatterVOperation",
       {{"sendCounts", 1, false}, {"sdispls", 2, false}, {"recvCount", 3, true}}},
  };
  static const std::vector<HostCountSlot> kNone;
  auto it = kSlots.find(opName);
  return it == kSlots.end() ? kNone : it->second;
}

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

// ---- the class -----------------------------------------------------------------------------

class OperationTorch : public torch::CustomClassHolder {
 public:
  explicit OperationTorch(std::string opName) : opName_(std::move(opName)) {
    const std::vector<std::string> known = ListOperations();
    if (std::find(known.begin(), known.end(), opName_) == known.end()) {
      std::string names;
      for (const auto& n : known) names += (names.empty() ? "" : ", ") + n;
      TORCH_CHECK(false, "ERROR_INVALID_PARAM: OperationTorch: unknown operation \"", opName_,
                  "\"; registered operations are: ", names);
    }
  }

  /// Creates the operation from JSON params, dropping the host-count binding (ATB makes a new
  /// binder on every SetParam). On failure the object holds no operation: ATB scripts ignore
  /// set_param's result, and running the previous operation instead would give a silently wrong
  /// result; every later method raises with this call's error until a set_param succeeds.
  std::string SetParam(const std::string& paramJson) {
    Operation* created = nullptr;
    const Status status = CreateOperation(opName_, paramJson, &created);
    const std::string message = status == NO_ERROR ? std::string() : LastErrorMessage();
    op_.reset(status == NO_ERROR ? created : nullptr);
    bound_.clear();
    cpusShared_ = false;  // the new params may name another communicator
    // CreateOperation accepted it, so it parses.
    param_ = status == NO_ERROR ? Json::parse(paramJson) : Json();
    setParamStatus_ = status;
    setParamError_ = message;
    return ResultJson(status, message);
  }

  /// ATB's UpdateParam: the same as SetParam (the new params replace the old ones entirely).
  std::string UpdateParam(const std::string& paramJson) { return SetParam(paramJson); }

  /// Binds host counts by key (see HostCountSlots). Each call replaces every earlier binding;
  /// a slot with no binding is read from its tensor's own data. A failed call leaves no binding
  /// at all (never the previous one, which would stand for other counts).
  std::string SetVaraintPackParam(const std::string& runParamJson) {
    std::map<size_t, std::vector<int64_t>> bound;
    const Status status = GuardedTorch([&] { bound = ParseRunParam(runParamJson); });
    bound_ = std::move(bound);  // empty on failure
    if (status != NO_ERROR) return ResultJson(status, LastErrorMessage());
    return ResultJson(NO_ERROR, "");
  }

  /// {"result", "message", "num", "dtype" (ACL codes), "format", "shape"} of the outputs. Needs
  /// only the inputs' shapes and dtypes, so any device or layout is accepted here.
  std::string InferShape(const std::vector<at::Tensor>& ins) {
    std::vector<TensorDesc> outDescs;
    const Status status = GuardedTorch([&] {
      RequireOperation();
      Check(op_->InferShape(InputDescs(ins), outDescs));
    });
    Json result{{"result", static_cast<int>(status)}, {"message", LastErrorMessage()}};
    Json dtypes = Json::array(), formats = Json::array(), shapes = Json::array();
    if (status == NO_ERROR) {
      for (const auto& d : outDescs) {
        dtypes.push_back(static_cast<int>(d.dtype));
        formats.push_back(static_cast<int>(d.format));
        shapes.push_back(ShapeOf(d));
      }
    }
    result["num"] = status == NO_ERROR ? outDescs.size() : 0;
    result["dtype"] = dtypes;
    result["format"] = formats;
    result["shape"] = shapes;
    return Dump(result);
  }

  /// {"result", "message", "workspace_size"}: runs the op's Setup (tensor checks, host counts,
  /// communicator rendezvous) without moving data.
  std::string Setup(const std::vector<at::Tensor>& ins, const std::vector<at::Tensor>& outs) {
    uint64_t workspaceSize = 0;
    const Status status = GuardedTorch([&] {
      RequireOperation();
      SetupOp(Prepare(ins, outs).pack, workspaceSize);
    });
    Json result{{"result", static_cast<int>(status)}, {"message", LastErrorMessage()}};
    result["workspace_size"] = workspaceSize;
    return Dump(result);
  }

  /// Allocates the outputs from InferShape, runs the collective and returns them.
  std::vector<at::Tensor> Execute(const std::vector<at::Tensor>& ins) {
    std::vector<at::Tensor> outs;
    RaiseOnError("execute", GuardedTorch([&] {
                   RequireOperation();
                   outs = SharingFailure([&] { return AllocateOutputs(ins); });
                   RunWithOwnWorkspace(Prepare(ins, outs).pack);
                 }));
    return outs;
  }

  /// An uninitialised tensor in memory this operation's peers reach directly
  /// (Communicator::AllocateShared: the lccl heap between processes), so the collectives move it
  /// with one copy instead of two; an ordinary tensor where the backend has no such memory or its
  /// heap is full. The first call creates the operation's communicator, as the first execute
  /// does, so every rank must make it. A collops extension: ATB has no such method.
  at::Tensor EmptyShared(const std::vector<int64_t>& sizes, c10::ScalarType dtype) {
    at::Tensor t;
    RaiseOnError("empty_shared", GuardedTorch([&] {
                   RequireOperation();
                   if (CollopsDtypeOf(dtype) == ACL_DT_UNDEFINED) {
                     Fail(ERROR_INVALID_TENSOR_DTYPE, "empty_shared: dtype ", c10::toString(dtype),
                          " is not one collops supports");
                   }
                   t = SharedOrEmpty(sizes, dtype, Communicators().Get(CommParamOf()));
                 }));
    return t;
  }

  /// Runs the collective into caller-provided outputs (shapes and dtypes as InferShape gives).
  void ExecuteOut(const std::vector<at::Tensor>& ins, const std::vector<at::Tensor>& outs) {
    RaiseOnError("execute_out", GuardedTorch([&] {
                   RequireOperation();
                   RunWithOwnWorkspace(Prepare(ins, outs).pack);
                 }));
  }

  /// Setup + Execute with a workspace of at least the size `setup` reported: either a
  /// caller-provided tensor (any dtype; its bytes count) or, as ATB's
  /// ExecuteSync(ins, outs, int64_t workspaceSize) takes it, a byte count, for which this object
  /// provides the memory. Returns {"result": 0, "message", "workspace_size"}.
  std::string ExecuteSync(const std::vector<at::Tensor>& ins, const std::vector<at::Tensor>& outs,
                          const c10::IValue& workspace) {
    uint64_t workspaceSize = 0;
    RaiseOnError("execute_sync", GuardedTorch([&] {
                   RequireOperation();
                   const PreparedCall call = Prepare(ins, outs);
                   const VariantPack& pack = call.pack;
                   SetupOp(pack, workspaceSize);
                   uint8_t* ws = nullptr;
                   uint64_t wsBytes = 0;
                   if (workspace.isInt()) {
                     const int64_t size = workspace.toInt();
                     if (size < 0) {
                       Fail(ERROR_INVALID_WORKSPACE_SIZE, "workspace size ", size, " is negative");
                     }
                     wsBytes = static_cast<uint64_t>(size);
                     if (workspace_.size() < wsBytes) workspace_.resize(wsBytes);
                     ws = wsBytes > 0 ? workspace_.data() : nullptr;
                   } else if (workspace.isTensor()) {
                     const at::Tensor& t = workspace.toTensor();
                     if (t.defined() && t.numel() > 0) {
                       const Tensor w = ToCollopsTensor(t, "workspace");
                       ws = static_cast<uint8_t*>(w.deviceData);
                       wsBytes = w.dataSize;
                     }
                   } else if (!workspace.isNone()) {
                     Fail(ERROR_INVALID_PARAM,
                          "the workspace must be a tensor or a byte count "
                          "(int), got ",
                          workspace.tagKind());
                   }
                   Check(op_->Execute(pack, ws, wsBytes, nullptr));
                 }));
    Json result{{"result", 0}, {"message", ""}, {"workspace_size", workspaceSize}};
    return Dump(result);
  }

 private:
  static void Check(Status status) {
    // The op already recorded its message; rethrow so Guarded reports this status and message.
    if (status != NO_ERROR) throw Error(status, LastErrorMessage());
  }

  void RaiseOnError(const char* method, Status status) const {
    TORCH_CHECK(status == NO_ERROR, StatusName(status), " (", static_cast<int>(status),
                "): OperationTorch(", opName_, ").", method, ": ", LastErrorMessage());
  }

  // Throws unless an operation is held. The message carries no "OperationTorch(op).method"
  // prefix: RaiseOnError adds it.
  void RequireOperation() const {
    if (op_ != nullptr) return;
    if (setParamStatus_ != NO_ERROR) {
      Fail(setParamStatus_, "no operation to run: the last set_param failed (",
           StatusName(setParamStatus_), " (", static_cast<int>(setParamStatus_),
           "): ", setParamError_, "); the object holds no operation until a set_param succeeds");
    }
    Fail(ERROR_INVALID_PARAM, "called before a successful set_param");
  }

  // The run-param key bound to input slot `input` ("sdispls").
  const char* HostCountKey(size_t input) const {
    for (const auto& s : HostCountSlots(opName_)) {
      if (s.input == input) return s.key;
    }
    return "?";
  }

  // `ins` with every non-contiguous CPU tensor replaced by a contiguous copy, as ATB's
  // BuildVariantPack does (Utils::ContiguousAtTensor): the collectives read inputs as one flat
  // buffer. Outputs are never copied: the results must land in the caller's tensors.
  static std::vector<at::Tensor> DenseInputs(const std::vector<at::Tensor>& ins) {
    std::vector<at::Tensor> dense = ins;
    for (auto& t : dense) {
      if (t.defined() && t.device().is_cpu() && !t.is_contiguous()) t = t.contiguous();
    }
    return dense;
  }

  std::map<size_t, std::vector<int64_t>> ParseRunParam(const std::string& text) const {
    const std::string where = Concat(opName_, ".set_varaintpack_param");
    Json json;
    try {
      json = Json::parse(text);
    } catch (const Json::parse_error& e) {
      Fail(ERROR_INVALID_PARAM, where, ": malformed JSON: ", e.what());
    }
    if (!json.is_object()) Fail(ERROR_INVALID_PARAM, where, ": expected a JSON object");
    const std::vector<HostCountSlot>& slots = HostCountSlots(opName_);
    // rankSize is known once set_param succeeded; the vectors are checked against it here so
    // the error names the key the user wrote rather than an input slot.
    const int64_t rankSize =
        param_.is_object() && param_.contains("rankSize") && param_["rankSize"].is_number_integer()
            ? param_["rankSize"].get<int64_t>()
            : -1;
    std::map<size_t, std::vector<int64_t>> bound;
    for (const auto& [key, value] : json.items()) {
      auto slot = std::find_if(slots.begin(), slots.end(),
                               [&](const HostCountSlot& s) { return key == s.key; });
      if (slot == slots.end()) {
        std::string keys;
        for (const auto& s : slots) keys += (keys.empty() ? "" : ", ") + std::string(s.key);
        Fail(ERROR_INVALID_PARAM, where, ": unknown key ", ShowJson(Json(key)),
             keys.empty() ? std::string("; this operation takes no host counts")
                          : "; expected one of " + keys);
      }
      std::vector<int64_t> counts;
      if (slot->scalar && !value.is_array()) {
        counts.push_back(ReadCount(where, key, value));
      } else if (value.is_array()) {
        for (size_t i = 0; i < value.size(); ++i) {
          counts.push_back(ReadCount(where, Concat(key, "[", i, "]"), value[i]));
        }
      } else {
        Fail(ERROR_INVALID_PARAM, where, ": ", key, " must be a list of integers, got ",
             ShowJson(value));
      }
      const int64_t expected = slot->scalar ? 1 : rankSize;
      if (expected >= 0 && static_cast<int64_t>(counts.size()) != expected) {
        Fail(ERROR_INVALID_PARAM, where, ": ", key, " has ", counts.size(),
             " entries but must have ", expected,
             slot->scalar ? std::string(" (one count)") : std::string(" (rankSize)"));
      }
      bound[slot->input] = std::move(counts);
    }
    return bound;
  }

  VariantPack BuildVariantPack(const std::vector<at::Tensor>& ins,
                               const std::vector<at::Tensor>& outs) {
    VariantPack pack;
    for (size_t i = 0; i < ins.size(); ++i) {
      const std::string slot = Slot("inTensors", i);
      Tensor t = ToCollopsTensor(ins[i], slot);
      auto it = bound_.find(i);
      if (it != bound_.end()) {
        // ATB's binder points hostData at the bound values without looking at the tensor; we
        // insist they agree in length, since the op reads numel() counts from hostData, and in
        // value: the tensor is host memory here, and silently preferring either one would turn
        // a stale binding (or stale tensors) into a wrong result.
        if (static_cast<size_t>(ins[i].numel()) != it->second.size()) {
          Fail(ERROR_INVALID_TENSOR_SIZE, opName_, ": ", slot, " has ", ins[i].numel(),
               " elements but set_varaintpack_param bound ", it->second.size(), " values to it");
        }
        CheckBindingMatches(ins[i], i, it->second);
        t.hostData = it->second.data();
      }
      pack.inTensors.push_back(t);
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      pack.outTensors.push_back(ToCollopsTensor(outs[i], Slot("outTensors", i)));
    }
    return pack;
  }

  // Fails unless int64 count tensor `t` holds exactly `bound` (other dtypes are left to the op,
  // which refuses them).
  void CheckBindingMatches(const at::Tensor& t, size_t input,
                           const std::vector<int64_t>& bound) const {
    if (t.scalar_type() != c10::kLong || t.numel() == 0) return;
    const int64_t* data = t.const_data_ptr<int64_t>();
    if (std::equal(bound.begin(), bound.end(), data)) return;
    const char* key = HostCountKey(input);
    Fail(ERROR_INVALID_PARAM, opName_, ": ", Slot("inTensors", input), " (", key, ") holds ",
         Json(std::vector<int64_t>(data, data + t.numel())).dump(),
         " but set_varaintpack_param bound ", key, " = ", Json(bound).dump(),
         "; pass the same counts to both (a set_varaintpack_param binding lasts until the next "
         "set_varaintpack_param or set_param)");
  }

  std::vector<at::Tensor> AllocateOutputs(const std::vector<at::Tensor>& ins) const {
    std::vector<TensorDesc> outDescs;
    Check(op_->InferShape(InputDescs(ins), outDescs));
    // Outputs in shared memory let peers write them directly (AllToAllV); only once the
    // communicator exists, since creating it is collective and belongs to Setup.
    const std::shared_ptr<Communicator> comm = Communicators().Find(CommParamOf());
    std::vector<at::Tensor> outs;
    for (const auto& d : outDescs)
      outs.push_back(SharedOrEmpty(ShapeOf(d), ToScalarType(d.dtype), comm));
    return outs;
  }

  static CommunicatorPool& Communicators() { return DefaultContext().Communicators(); }

  OperationBase& Base() const {
    auto* base = dynamic_cast<OperationBase*>(op_.get());
    if (base == nullptr) Fail(ERROR_INTERNAL_ERROR, opName_, " is not an OperationBase");
    return *base;
  }

  const CommParam& CommParamOf() const { return Base().commParam(); }

  // One call's variant pack, with the contiguous copies of its inputs that the pack points into.
  struct PreparedCall {
    std::vector<at::Tensor> inputs;
    VariantPack pack;
  };

  // The variant pack of (ins, outs); a failure building it is told to the peers (SharingFailure).
  PreparedCall Prepare(const std::vector<at::Tensor>& ins, const std::vector<at::Tensor>& outs) {
    PreparedCall call;
    call.inputs = DenseInputs(ins);
    call.pack = SharingFailure([&] { return BuildVariantPack(call.inputs, outs); });
    return call;
  }

  // Runs this rank's own steps before the op's Setup (InferShape for the outputs, the variant
  // pack): a failure there is told to the peers as Setup tells its own, so they fail at once
  // instead of waiting for COLLOPS_TIMEOUT in a call this rank will not make.
  template <class Body>
  auto SharingFailure(Body&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const Error& e) {
      Base().ShareFailure(e.status(), nullptr);
      throw;
    }
  }

  // The op's Setup, which creates its communicator on first use. Ranks that are processes of one
  // host (plain lccl) then share the CPUs (intra_op_threads.h); across hosts the ranks per host
  // are not known here.
  void SetupOp(const VariantPack& pack, uint64_t& workspaceSize) {
    Check(op_->Setup(pack, workspaceSize, nullptr));
    if (cpusShared_) return;  // once: every later call of the hot path stops here
    cpusShared_ = true;
    const CommParam& param = CommParamOf();
    if (param.commMode != COMM_MULTI_PROCESS) return;
    const std::shared_ptr<Communicator> comm = Communicators().Find(param);
    if (comm != nullptr && comm->BackendName() == "lccl") ShareCpusWithLocalRanks(comm->Size());
  }

  // Setup then Execute with a workspace owned by this object (not the shared default context's,
  // which threads acting as ranks would race on).
  void RunWithOwnWorkspace(const VariantPack& pack) {
    uint64_t workspaceSize = 0;
    SetupOp(pack, workspaceSize);
    if (workspace_.size() < workspaceSize) workspace_.resize(workspaceSize);
    Check(op_->Execute(pack, workspaceSize > 0 ? workspace_.data() : nullptr, workspaceSize,
                       nullptr));
  }

  std::string opName_;
  OperationPtr op_;
  Json param_;                                    // the params of the held operation
  std::map<size_t, std::vector<int64_t>> bound_;  // input slot -> host counts
  Status setParamStatus_ = NO_ERROR;              // of the last set_param
  std::string setParamError_;                     // its message when it failed
  std::vector<uint8_t> workspace_;
  bool cpusShared_ = false;  // SetupOp's CPU sharing is done for the held operation
};

}  // namespace
}  // namespace collops

TORCH_LIBRARY(OperationTorch, m) {
  using collops::OperationTorch;
  m.class_<OperationTorch>("OperationTorch")
      .def(torch::init<std::string>())
      .def("set_param", &OperationTorch::SetParam)
      .def("update_param", &OperationTorch::UpdateParam)
      .def("set_varaintpack_param", &OperationTorch::SetVaraintPackParam)
      .def("infer_shape", &OperationTorch::InferShape)
      .def("setup", &OperationTorch::Setup)
      .def("execute", &OperationTorch::Execute)
      .def("execute_out", &OperationTorch::ExecuteOut)
      .def("empty_shared", &OperationTorch::EmptyShared)
      .def("execute_sync", &OperationTorch::ExecuteSync);
}
