#include "ops/all_to_allvv2/all_to_allvv2_operation.h"

#include "collops/registry.h"

namespace collops {
namespace {

// Input positions.
constexpr size_t kX = 0;
constexpr size_t kSendCounts = 1;
constexpr size_t kSdispls = 2;
constexpr size_t kRecvCounts = 3;
constexpr size_t kRdispls = 4;
constexpr size_t kTensorForInferShape = 5;

}  // namespace

void AllToAllVV2Operation::ValidateParam(const AllToAllVV2Param& param) {
  ValidateCommParam(kName, param);
}

AllToAllVV2Operation::AllToAllVV2Operation(const AllToAllVV2Param& param)
    : OperationBase(kName, param) {}

std::vector<TensorSpec> AllToAllVV2Operation::InputSpecs() const {
  return {{"x", DtypeSet::kMovable},      {"sendCounts", DtypeSet::kCounts},
          {"sdispls", DtypeSet::kCounts}, {"recvCounts", DtypeSet::kCounts},
          {"rdispls", DtypeSet::kCounts}, {"tensorForInferShape", DtypeSet::kShapeOnly}};
}

std::vector<TensorSpec> AllToAllVV2Operation::OutputSpecs() const {
  return {{"y", DtypeSet::kMovable}};
}

void AllToAllVV2Operation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                          std::vector<TensorDesc>& out) const {
  TensorDesc y = in[kX];
  y.shape = MakeDims({1, NumElements(in[kTensorForInferShape].shape)});
  out = {y};
}

void AllToAllVV2Operation::PrepareImpl(const VariantPack& pack) {
  const std::vector<Tensor>& in = pack.inTensors;
  AllToAllVPlan plan{ReadCounts(in[kSendCounts], "sendCounts"), ReadCounts(in[kSdispls], "sdispls"),
                     ReadCounts(in[kRecvCounts], "recvCounts"),
                     ReadCounts(in[kRdispls], "rdispls")};
  plan.Validate(Where(), commParam().rankSize);
  const int64_t outElements = NumElements(in[kTensorForInferShape].desc.shape);
  if (plan.RecvTotal() != outElements) {
    Fail(ERROR_INVALID_PARAM, Where(), ": recvCounts sum to ", plan.RecvTotal(),
         " but tensorForInferShape has ", outElements,
         " elements; they must be equal, as y has tensorForInferShape.numel() elements");
  }
  CheckRanges(plan.sendCounts, "sendCounts", plan.sdispls, "sdispls",
              NumElements(in[kX].desc.shape), "x.numel()");
  plan_ = std::move(plan);
}

CallSignature AllToAllVV2Operation::SignatureImpl(const VariantPack& pack) const {
  return plan_.Signature(kName, pack.inTensors[kX].desc.dtype);
}

void AllToAllVV2Operation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                       Communicator& comm) {
  const Tensor& x = pack.inTensors[kX];
  plan_.Run(comm, x.deviceData, pack.outTensors[0].deviceData, x.desc.dtype);
}

COLLOPS_REGISTER_OPERATION(AllToAllVV2Operation, AllToAllVV2Param);

}  // namespace collops
