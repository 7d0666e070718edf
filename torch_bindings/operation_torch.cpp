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
// torch::jit::runAndInsertCall, which releases the GIL around the call, and so do the builtin
// execute and execute_out that `import collops` gives these objects (operation_torch_methods.cpp).
// So a rank blocked in a collective never stops the other Python threads, and threads can be the
// ranks of a commMode 1 job; tests/python/operation_torch/test_operation_torch_threads.py checks
// exactly that.
//
// One execute call, in order: the builtin method's conversion of the list of tensors (or torch's
// custom-class call with IValue lists in and out, where the builtin does not take the call);
// AllocateOutputs (the op's InferShape when the inputs' shapes or dtypes changed, output tensors
// over reused or new memory); Prepare (contiguous
// inputs, the VariantPack with bound host counts: variant_pack.h, host_count_binding.h); then
// RunWithOwnWorkspace: the op's Setup (tensor and count checks, communicator lookup) and Execute
// (the same checks again, the cross-rank agreement, the engine).
#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/collops.h"
#include "collops/operation_base.h"
#include "dtype_map.h"
#include "host_count_binding.h"
#include "intra_op_threads.h"
#include "operation_torch.h"
#include "reused_outputs.h"
#include "shared_tensor.h"
#include "variant_pack.h"

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

/// A result object as the text Python parses. Messages are valid UTF-8 (ValidUtf8), but a report
/// must never fail for its text: any byte that still is not becomes U+FFFD instead of a type_error
/// that would replace the real error.
std::string Dump(const Json& result) {
  return result.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string ResultJson(Status status, const std::string& message) {
  // Success, the answer of nearly every call, is made once.
  static const std::string kSucceeded = Dump(Json{{"result", 0}, {"message", ""}});
  if (status == NO_ERROR && message.empty()) return kSucceeded;
  return Dump(Json{{"result", static_cast<int>(status)}, {"message", message}});
}

}  // namespace

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
    // What the previous operation inferred, allocated and found is not this one's.
    inferred_ = InferredOutputs();
    outputs_ = ReusedOutputs(op_ != nullptr ? op_->GetOutputNum() : 0);
    heapComm_ = nullptr;
    binding_ = HostCountBinding();
    cpusShared_ = false;  // the new params may name another communicator
    setParamStatus_ = status;
    setParamError_ = message;
    return ResultJson(status, message);
  }

  /// ATB's UpdateParam: the same as SetParam (the new params replace the old ones entirely).
  std::string UpdateParam(const std::string& paramJson) { return SetParam(paramJson); }

  /// Binds host counts to the op's host-count inputs by their names (host_count_binding.h).
  /// Each call replaces every earlier binding; an input with no binding is read from its
  /// tensor's own data. A failed call leaves no binding at all (never the previous one, which
  /// would stand for other counts); so does a call without an operation to bind to.
  std::string SetVaraintPackParam(const std::string& runParamJson) {
    HostCountBinding binding;
    const Status status = GuardedTorch([&] {
      RequireOperation();
      binding = HostCountBinding::Parse(Base(), runParamJson);
    });
    binding_ = std::move(binding);  // empty on failure
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

  // The outputs of a call on `ins`: InferShape's shapes and dtypes, kept while the inputs' stay
  // those of the last call that inferred them (the descriptions, and so InferShape's checks and
  // answer, are the same); the memory an earlier output's when its caller has dropped it
  // (reused_outputs.h), else from the communicator's shared heap once the communicator exists
  // (outputs there let peers write them directly, AllToAllV; creating the communicator is
  // collective and belongs to Setup), else ordinary.
  std::vector<at::Tensor> AllocateOutputs(const std::vector<at::Tensor>& ins) {
    if (!inferred_.Matches(ins)) {
      inferred_ = InferredOutputs();
      std::vector<TensorDesc> outDescs;
      Check(op_->InferShape(InputDescs(ins), outDescs));
      InferredOutputs inferred;
      for (const auto& t : ins) inferred.inputs.emplace_back(t.scalar_type(), t.sizes().vec());
      for (const auto& d : outDescs) {
        inferred.outputs.emplace_back(RequireTorchDtype(d.dtype, "inferred output "), ShapeOf(d));
      }
      inferred_ = std::move(inferred);
    }
    if (heapComm_ == nullptr || heapComm_->Broken()) {
      heapComm_ = Communicators().Find(CommParamOf());
    }
    std::vector<at::Tensor> outs;
    for (const auto& [dtype, shape] : inferred_.outputs) {
      outs.push_back(
          outputs_.Take(shape, dtype, [&] { return SharedOrEmpty(shape, dtype, heapComm_); }));
    }
    return outs;
  }

  // InferShape's outputs for inputs of these dtypes and shapes.
  struct InferredOutputs {
    std::vector<std::pair<c10::ScalarType, std::vector<int64_t>>> inputs;
    std::vector<std::pair<c10::ScalarType, std::vector<int64_t>>> outputs;

    bool Matches(const std::vector<at::Tensor>& ins) const {
      if (outputs.empty() || ins.size() != inputs.size()) return false;
      for (size_t i = 0; i < ins.size(); ++i) {
        if (!ins[i].defined() || ins[i].scalar_type() != inputs[i].first ||
            ins[i].sizes() != c10::IntArrayRef(inputs[i].second)) {
          return false;
        }
      }
      return true;
    }
  };

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
    call.pack = SharingFailure([&] { return BuildVariantPack(call.inputs, outs, binding_); });
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
  HostCountBinding binding_;          // set_varaintpack_param's, for the held operation
  Status setParamStatus_ = NO_ERROR;  // of the last set_param
  std::string setParamError_;         // its message when it failed
  std::vector<uint8_t> workspace_;
  bool cpusShared_ = false;                 // SetupOp's CPU sharing is done for the held operation
  InferredOutputs inferred_;                // execute's, for the held operation
  ReusedOutputs outputs_{0};                // the memory of execute's dropped outputs
  std::shared_ptr<Communicator> heapComm_;  // the held operation's, once it exists
};

OperationTorch* HeldOperationTorch(const c10::ivalue::Object& object) {
  static const c10::ClassTypePtr kType =
      c10::getCustomClassType<c10::intrusive_ptr<OperationTorch>>();
  if (object.type() != kType) return nullptr;
  return static_cast<OperationTorch*>(object.getSlot(0).toCapsule().get());
}

std::vector<at::Tensor> ExecuteOperationTorch(OperationTorch& op,
                                              const std::vector<at::Tensor>& ins) {
  return op.Execute(ins);
}

void ExecuteOutOperationTorch(OperationTorch& op, const std::vector<at::Tensor>& ins,
                              const std::vector<at::Tensor>& outs) {
  op.ExecuteOut(ins, outs);
}

std::string SetVaraintPackParamOfOperationTorch(OperationTorch& op, const std::string& json) {
  return op.SetVaraintPackParam(json);
}

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
