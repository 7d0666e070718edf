#include "collops/operation_base.h"

#include <algorithm>
#include <cstring>

#include "collops/context.h"

namespace collops {
namespace {

bool InSet(DataType dtype, DtypeSet set) {
  switch (set) {
    case DtypeSet::kReducible:
      return dtype == ACL_INT8 || dtype == ACL_INT16 || dtype == ACL_INT32 || dtype == ACL_INT64 ||
             dtype == ACL_FLOAT16 || dtype == ACL_BF16 || dtype == ACL_FLOAT;
    case DtypeSet::kMovable:
      return InSet(dtype, DtypeSet::kReducible) || dtype == ACL_UINT8 || dtype == ACL_DOUBLE ||
             dtype == ACL_BOOL;
    case DtypeSet::kCounts:
      return dtype == ACL_INT64;
    case DtypeSet::kInt8:
      return dtype == ACL_INT8;
    case DtypeSet::kFloat16:
      return dtype == ACL_FLOAT16;
    case DtypeSet::kAny:
    case DtypeSet::kShapeOnly:
      return DataTypeSize(dtype) != 0;
  }
  return false;
}

const char* SetDescription(DtypeSet set) {
  switch (set) {
    case DtypeSet::kReducible:
      return "int8, int16, int32, int64, float16, bfloat16, float32";
    case DtypeSet::kMovable:
      return "int8, int16, int32, int64, float16, bfloat16, float32, uint8, float64, bool";
    case DtypeSet::kCounts:
      return "int64";
    case DtypeSet::kInt8:
      return "int8";
    case DtypeSet::kFloat16:
      return "float16";
    case DtypeSet::kAny:
    case DtypeSet::kShapeOnly:
      return "any dtype";
  }
  return "?";
}

/// Whether [a, a + aBytes) and [b, b + bBytes) share a byte; empty ranges share none.
bool Overlaps(const void* a, uint64_t aBytes, const void* b, uint64_t bBytes) {
  const auto aBegin = reinterpret_cast<uintptr_t>(a);
  const auto bBegin = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && aBegin < bBegin + bBytes && bBegin < aBegin + aBytes;
}

/// "x starts at byte 8 of y", for two overlapping buffers: whichever starts later, in the other.
std::string WhereOneStarts(const std::string& aName, const void* a, const std::string& bName,
                           const void* b) {
  const auto aBegin = reinterpret_cast<uintptr_t>(a);
  const auto bBegin = reinterpret_cast<uintptr_t>(b);
  return aBegin >= bBegin ? Concat(aName, " starts at byte ", aBegin - bBegin, " of ", bName)
                          : Concat(bName, " starts at byte ", bBegin - aBegin, " of ", aName);
}

std::string Names(const std::vector<TensorSpec>& specs) {
  std::string names;
  for (const auto& s : specs) names += (names.empty() ? "" : ", ") + std::string(s.name);
  return names.empty() ? "none" : names;
}

}  // namespace

OperationBase::OperationBase(std::string name, const CommParam& commParam)
    : name_(std::move(name)), commParam_(commParam) {}

uint32_t OperationBase::GetInputNum() const { return CachedSpecs().in.size(); }
uint32_t OperationBase::GetOutputNum() const { return CachedSpecs().out.size(); }

const OperationBase::Specs& OperationBase::CachedSpecs() const {
  std::call_once(specsOnce_, [&] {
    specs_.in = InputSpecs();
    specs_.out = OutputSpecs();
    specs_.outAnyDtype = specs_.out;
    for (auto& spec : specs_.outAnyDtype) spec.dtypes = DtypeSet::kAny;
  });
  return specs_;
}

bool OperationBase::SameDescsAsSetup(const VariantPack& pack) const {
  const size_t ins = pack.inTensors.size();
  if (ins + pack.outTensors.size() != setupDescs_.size()) return false;
  for (size_t i = 0; i < ins; ++i) {
    if (!(pack.inTensors[i].desc == setupDescs_[i])) return false;
  }
  for (size_t i = 0; i < pack.outTensors.size(); ++i) {
    if (!(pack.outTensors[i].desc == setupDescs_[ins + i])) return false;
  }
  return true;
}

std::string OperationBase::Where() const { return Concat(name_, " (rank ", commParam_.rank, ")"); }

void OperationBase::CheckCount(size_t count, const std::vector<TensorSpec>& specs,
                               Status countStatus, const char* role) const {
  if (count != specs.size()) {
    Fail(countStatus, name_, ": expects ", specs.size(), " ", role, " (", Names(specs), "), got ",
         count);
  }
}

void OperationBase::CheckDescs(const std::vector<TensorDesc>& descs,
                               const std::vector<TensorSpec>& specs, Status countStatus,
                               const char* role) const {
  CheckCount(descs.size(), specs, countStatus, role);
  for (size_t i = 0; i < descs.size(); ++i) {
    const TensorDesc& d = descs[i];
    const TensorSpec& spec = specs[i];
    if (!InSet(d.dtype, spec.dtypes)) {
      Fail(ERROR_INVALID_TENSOR_DTYPE, name_, ": ", role, "[", i, "] (", spec.name, ") has dtype ",
           DataTypeName(d.dtype), "; accepted: ", SetDescription(spec.dtypes));
    }
    if (d.format != ACL_FORMAT_ND) {
      Fail(ERROR_INVALID_TENSOR_FORMAT, name_, ": ", role, "[", i, "] (", spec.name,
           ") has format ", static_cast<int>(d.format), "; only ND (2) is supported");
    }
    if (d.shape.dimNum < 1 || d.shape.dimNum > kMaxDimNum) {
      Fail(ERROR_INVALID_TENSOR_DIM_NUM, name_, ": ", role, "[", i, "] (", spec.name, ") has ",
           d.shape.dimNum, " dims; 1 to ", kMaxDimNum, " are supported");
    }
    for (uint64_t k = 0; k < d.shape.dimNum; ++k) {
      if (d.shape.dims[k] < 0) {
        Fail(ERROR_INVALID_TENSOR_DIM, name_, ": ", role, "[", i, "] (", spec.name, ") has shape ",
             DimsToString(d.shape), " with a negative dim");
      }
    }
    // Sizes are int64 everywhere below (counts, displacements, byte offsets), so a shape whose
    // byte size overflows it would wrap into a small dataSize that passes every later check.
    if (CheckedBytes(d.shape.dims, d.shape.dimNum, std::max<size_t>(DataTypeSize(d.dtype), 1)) <
        0) {
      Fail(ERROR_INVALID_TENSOR_SIZE, name_, ": ", role, "[", i, "] (", spec.name, ") has shape ",
           DimsToString(d.shape), " of ", DataTypeName(d.dtype), ", more than 2^63 - 1 bytes");
    }
  }
}

void OperationBase::CheckTensorData(const std::vector<Tensor>& tensors,
                                    const std::vector<TensorSpec>& specs, Status countStatus,
                                    const char* role) const {
  CheckCount(tensors.size(), specs, countStatus, role);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const uint64_t bytes = TensorBytes(t.desc);
    if (t.dataSize != bytes) {
      Fail(ERROR_INVALID_TENSOR_SIZE, name_, ": ", role, "[", i, "] (", specs[i].name,
           ") has dataSize ", t.dataSize, " but shape ", DimsToString(t.desc.shape), " of ",
           DataTypeName(t.desc.dtype), " needs ", bytes, " bytes");
    }
    const bool dataNotNeeded = specs[i].dtypes == DtypeSet::kShapeOnly ||
                               (specs[i].IsHostCounts() && t.hostData != nullptr);
    if (bytes > 0 && t.deviceData == nullptr && !dataNotNeeded) {
      Fail(ERROR_INVALID_TENSOR_ADDR, name_, ": ", role, "[", i, "] (", specs[i].name,
           ") has no data (deviceData is null)");
    }
  }
}

void OperationBase::CheckTensorsOf(const VariantPack& pack, bool descsToo) const {
  const std::vector<TensorSpec>& inSpecs = CachedSpecs().in;
  // Output dtypes are checked against inference.
  const std::vector<TensorSpec>& outSpecs = CachedSpecs().outAnyDtype;
  if (descsToo) {
    std::vector<TensorDesc> in, out;
    for (const auto& t : pack.inTensors) in.push_back(t.desc);
    for (const auto& t : pack.outTensors) out.push_back(t.desc);
    CheckDescs(in, inSpecs, ERROR_INVALID_IN_TENSOR_NUM, "inTensors");
    CheckDescs(out, outSpecs, ERROR_INVALID_TENSOR_NUM, "outTensors");
  }
  CheckTensorData(pack.inTensors, inSpecs, ERROR_INVALID_IN_TENSOR_NUM, "inTensors");
  CheckTensorData(pack.outTensors, outSpecs, ERROR_INVALID_TENSOR_NUM, "outTensors");
}

void OperationBase::CheckAliasing(const VariantPack& pack) const {
  if (pack.inTensors.empty() || pack.outTensors.empty()) return;
  const Tensor& x = pack.inTensors[0];
  const Tensor& y = pack.outTensors[0];
  if (!Overlaps(x.deviceData, x.dataSize, y.deviceData, y.dataSize)) return;
  const DtypeSet xData = CachedSpecs().in[0].dtypes;
  if (xData != DtypeSet::kMovable && xData != DtypeSet::kReducible) return;  // Recv's template
  const InPlaceForm form = InPlaceFormImpl(pack);
  if (form.inputAt != nullptr && x.deviceData == form.inputAt) {
    const std::string refusal = InPlaceRefusalImpl(pack);
    if (refusal.empty()) return;
    Fail(ERROR_INVALID_PARAM, Where(), ": ", refusal);
  }
  const char* xName = CachedSpecs().in[0].name;
  const char* yName = CachedSpecs().out[0].name;
  const std::string allowed =
      form.description == nullptr
          ? Concat("peers may still read ", xName, " while ", yName, " is written")
          : Concat("the one in-place form supported is ", form.description);
  Fail(ERROR_INVALID_PARAM, Where(), ": ", yName, " overlaps ", xName, " (",
       WhereOneStarts(xName, x.deviceData, yName, y.deviceData), "); ", allowed, ", so give ",
       yName, " its own buffer");
}

void OperationBase::CheckWorkspaceAliasing(const VariantPack& pack,
                                           const uint8_t* workspace) const {
  if (setupWorkspaceSize_ == 0) return;  // most ops: nothing to compare on every call
  auto check = [&](const std::vector<Tensor>& tensors, const std::vector<TensorSpec>& specs,
                   const char* role) {
    for (size_t i = 0; i < tensors.size() && i < specs.size(); ++i) {
      if (specs[i].dtypes == DtypeSet::kShapeOnly) continue;  // its data is never touched
      const Tensor& t = tensors[i];
      const void* data =
          specs[i].IsHostCounts() && t.hostData != nullptr ? t.hostData : t.deviceData;
      if (!Overlaps(workspace, setupWorkspaceSize_, data, t.dataSize)) continue;
      Fail(ERROR_INVALID_PARAM, Where(), ": the workspace (", setupWorkspaceSize_,
           " bytes in use) overlaps ", role, "[", i, "] (", specs[i].name,
           "): ", WhereOneStarts("the workspace", workspace, specs[i].name, data),
           "; the op writes the workspace while its inputs are still read and before its ",
           "outputs are final, so give the workspace its own memory");
    }
  };
  check(pack.inTensors, CachedSpecs().in, "inTensors");
  check(pack.outTensors, CachedSpecs().out, "outTensors");
}

void OperationBase::CheckOutputsMatchInferred(const VariantPack& pack) const {
  std::vector<TensorDesc> in;
  for (const auto& t : pack.inTensors) in.push_back(t.desc);
  std::vector<TensorDesc> inferred;
  InferShapeImpl(in, inferred);
  const std::vector<TensorSpec>& specs = CachedSpecs().out;
  for (size_t i = 0; i < inferred.size() && i < pack.outTensors.size(); ++i) {
    const TensorDesc& got = pack.outTensors[i].desc;
    if (got.dtype != inferred[i].dtype) {
      Fail(ERROR_INVALID_TENSOR_DTYPE, name_, ": outTensors[", i, "] (", specs[i].name,
           ") has dtype ", DataTypeName(got.dtype), " but the inputs give ",
           DataTypeName(inferred[i].dtype));
    }
    if (got.shape != inferred[i].shape) {
      Fail(ERROR_INVALID_TENSOR_DIM, name_, ": outTensors[", i, "] (", specs[i].name,
           ") has shape ", DimsToString(got.shape), " but the inputs give ",
           DimsToString(inferred[i].shape));
    }
  }
}

Status OperationBase::InferShape(const std::vector<TensorDesc>& inTensorDescs,
                                 std::vector<TensorDesc>& outTensorDescs) const {
  return Guarded([&] {
    CheckDescs(inTensorDescs, CachedSpecs().in, ERROR_INVALID_IN_TENSOR_NUM, "inTensors");
    std::vector<TensorDesc> out;
    InferShapeImpl(inTensorDescs, out);
    std::vector<TensorSpec> outSpecs = OutputSpecs();
    if (out.size() != outSpecs.size()) {
      Fail(ERROR_INTERNAL_ERROR, name_, ": inferred ", out.size(), " outputs, declares ",
           outSpecs.size());
    }
    // An output sized by a shape carrier (y_shape) can be too large even from valid inputs.
    for (auto& spec : outSpecs) spec.dtypes = DtypeSet::kAny;
    CheckDescs(out, outSpecs, ERROR_INTERNAL_ERROR, "outTensors");
    outTensorDescs = std::move(out);
  });
}

void OperationBase::AcquireCommunicator(Context* context) {
  if (comm_ != nullptr && !comm_->Broken()) return;
  Context& ctx = context != nullptr ? *context : DefaultContext();
  comm_ = ctx.Communicators().Get(commParam_);
}

void OperationBase::ShareFailure(Status status, Context* context) {
  ShareFailure(status, context, /*joinCreation=*/true);
}

void OperationBase::ShareFailure(Status status, Context* context, bool joinCreation) {
  try {
    Context& ctx = context != nullptr ? *context : DefaultContext();
    // The caller's communicator is there to tell even when it is the failure (its rank or size
    // disagree with the params): its peers would otherwise pair with our next call.
    std::shared_ptr<Communicator> held = (comm_ != nullptr && !comm_->Broken()) ? comm_ : nullptr;
    if (held == nullptr && commParam_.comm == nullptr) held = ctx.Communicators().Find(commParam_);
    // Before this op's first communicator exists its peers are in the creation's rendezvous (or
    // about to enter it): this rank joins it first, bounded by COLLOPS_TIMEOUT like any call,
    // else they would wait there for the timeout. Not once this op held one that broke (its
    // peers are gone or aborted), nor when creating it is the failure (a second attempt would
    // only wait again).
    if (held == nullptr && commParam_.comm == nullptr && comm_ == nullptr && joinCreation) {
      held = ctx.Communicators().Get(commParam_);
    }
    Communicator* comm = held != nullptr ? held.get() : commParam_.comm;
    if (comm == nullptr) return;
    ExclusiveUse use(*comm, name_);
    const std::vector<PointToPoint> refusals =
        RefusalsImpl(status == NO_ERROR ? ERROR_INTERNAL_ERROR : status);
    if (refusals.empty()) {
      ShareLocalFailure(*comm, name_, status);
    } else {
      // Each peer's matching op throws ERROR_RANK_MISMATCH naming this rank and `status`, and so
      // does this group (or nothing, where the peer refused too).
      comm->Exchange(refusals);
    }
  } catch (const std::exception&) {
    // Nobody to tell (the peers never came to the creation, or are gone), or the refusals met the
    // peers' ops; the caller's own error stands.
  }
}

template <class Body>
void OperationBase::RunSharingFailure(Context* context, bool joinCreation, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    ShareFailure(e.status(), context, joinCreation);
    throw;
  }
}

Status OperationBase::Setup(const VariantPack& variantPack, uint64_t& workspaceSize,
                            Context* context) {
  return Guarded([&] {
    // The descs of the last successful Setup passed the checks that read nothing else; the data,
    // the host counts (PrepareImpl), the aliasing and the workspace size are checked every time.
    const bool sameDescs = setUp_ && SameDescsAsSetup(variantPack);
    setUp_ = false;
    uint64_t size = 0;
    RunSharingFailure(context, /*joinCreation=*/true, [&] {
      CheckTensorsOf(variantPack, /*descsToo=*/!sameDescs);
      if (!sameDescs) CheckOutputsMatchInferred(variantPack);
      PrepareImpl(variantPack);
      CheckAliasing(variantPack);
    });
    // A failure to create the communicator is no failure to join its creation with.
    RunSharingFailure(context, /*joinCreation=*/false, [&] {
      AcquireCommunicator(context);
      size = WorkspaceSizeImpl(variantPack);
    });
    if (!sameDescs) {
      setupDescs_.clear();
      for (const auto& t : variantPack.inTensors) setupDescs_.push_back(t.desc);
      for (const auto& t : variantPack.outTensors) setupDescs_.push_back(t.desc);
    }
    setupWorkspaceSize_ = size;
    workspaceSize = size;
    setUp_ = true;
  });
}

Status OperationBase::Execute(const VariantPack& variantPack, uint8_t* workspace,
                              uint64_t workspaceSize, Context* context) {
  return Guarded([&] {
    // Not shared: a Setup that failed told the peers already (they failed this call), so telling
    // them again would fail their next call instead; an op never set up names no call either.
    if (!setUp_) {
      Fail(ERROR_INVALID_TENSOR_INI_MATCH, name_, ": Execute needs a successful Setup first");
    }
    CallSignature signature;
    RunSharingFailure(context, /*joinCreation=*/true, [&] {
      if (!SameDescsAsSetup(variantPack)) {
        Fail(ERROR_INVALID_TENSOR_INI_MATCH, name_,
             ": Execute was given tensors of other counts, shapes or dtypes than the last Setup");
      }
      // The descs equal Setup's, which checked them; the data pointers and sizes are new.
      CheckTensorsOf(variantPack, /*descsToo=*/false);
      if (workspaceSize < setupWorkspaceSize_) {
        Fail(ERROR_INVALID_WORKSPACE_SIZE, name_, ": workspace of ", workspaceSize,
             " bytes is smaller than the ", setupWorkspaceSize_, " Setup asked for");
      }
      if (setupWorkspaceSize_ > 0 && workspace == nullptr) {
        Fail(ERROR_INVALID_WORKSPACE_ADDR, name_, ": workspace is null but Setup asked for ",
             setupWorkspaceSize_, " bytes");
      }
      PrepareImpl(variantPack);
      CheckAliasing(variantPack);
      CheckWorkspaceAliasing(variantPack, workspace);
      signature = SignatureImpl(variantPack);
    });
    AcquireCommunicator(context);
    ExclusiveUse use(*comm_, name_);
    if (!signature.opName.empty()) comm_->Agree(signature);
    ExecuteImpl(variantPack, workspace, workspaceSize, *comm_);
    use.Finish();
  });
}

std::vector<int64_t> OperationBase::ReadCounts(const Tensor& tensor, const char* name) const {
  const int64_t n = NumElements(tensor.desc.shape);
  const void* data = tensor.hostData != nullptr ? tensor.hostData : tensor.deviceData;
  if (n > 0 && data == nullptr) {
    Fail(ERROR_INVALID_TENSOR_ADDR, Where(), ": ", name,
         " holds no counts (hostData and deviceData are null)");
  }
  std::vector<int64_t> counts(n);
  if (n > 0) std::memcpy(counts.data(), data, n * sizeof(int64_t));
  return counts;
}

void OperationBase::CheckCountVector(const std::vector<int64_t>& counts, const char* name,
                                     size_t expected) const {
  if (counts.size() != expected) {
    Fail(ERROR_INVALID_PARAM, Where(), ": ", name, " has ", counts.size(),
         " entries; rankSize = ", commParam_.rankSize, " needs ", expected);
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      Fail(ERROR_INVALID_PARAM, Where(), ": ", name, "[", i, "] = ", counts[i], " must be >= 0");
    }
  }
}

void OperationBase::CheckRanges(const std::vector<int64_t>& counts, const char* countsName,
                                const std::vector<int64_t>& displs, const char* displsName,
                                int64_t limit, const char* bufferName) const {
  CheckCountVector(counts, countsName, commParam_.rankSize);
  CheckCountVector(displs, displsName, commParam_.rankSize);
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t end = 0;
    if (__builtin_add_overflow(counts[i], displs[i], &end) || end > limit) {
      Fail(ERROR_INVALID_PARAM, Where(), ": ", countsName, "[", i, "] + ", displsName, "[", i,
           "] = ", counts[i], " + ", displs[i], " exceeds ", bufferName, " = ", limit);
    }
  }
}

void CheckRangesDisjoint(const std::string& where, const std::vector<int64_t>& counts,
                         const char* countsName, const std::vector<int64_t>& displs,
                         const char* displsName, const char* bufferName, const char* why) {
  std::vector<size_t> order;
  for (size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] > 0) order.push_back(j);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return displs[a] != displs[b] ? displs[a] < displs[b] : a < b;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t a = order[k - 1];
    const size_t b = order[k];
    if (displs[a] + counts[a] > displs[b]) {
      Fail(ERROR_INVALID_PARAM, where, ": the blocks of rank ", a, " (", displsName, "[", a,
           "] = ", displs[a], ", ", countsName, "[", a, "] = ", counts[a], ") and rank ", b, " (",
           displsName, "[", b, "] = ", displs[b], ", ", countsName, "[", b, "] = ", counts[b],
           ") overlap in ", bufferName, "; ", why);
    }
  }
}

}  // namespace collops
