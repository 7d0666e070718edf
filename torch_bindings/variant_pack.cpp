#include "variant_pack.h"

#include <algorithm>

#include "collops/status.h"
#include "dtype_map.h"
#include "tensor_layout.h"

namespace collops {

std::string Slot(const char* role, size_t index) { return Concat(role, "[", index, "]"); }

TensorDesc ToDesc(const at::Tensor& t, const SlotName& slot) {
  TensorDesc desc;
  desc.dtype = CollopsDtypeOf(t.scalar_type());
  if (desc.dtype == ACL_DT_UNDEFINED) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, slot.Text(), " has dtype ", c10::toString(t.scalar_type()),
         ", which collops does not support (", MappedDtypesText(), ")");
  }
  if (static_cast<size_t>(t.dim()) > kMaxDimNum) {
    Fail(ERROR_INVALID_TENSOR_DIM_NUM, slot.Text(), " has ", t.dim(), " dims; at most ", kMaxDimNum,
         " are supported");
  }
  desc.format = ACL_FORMAT_ND;
  const c10::IntArrayRef sizes = t.sizes();
  desc.shape.dimNum = sizes.size();
  std::copy(sizes.begin(), sizes.end(), desc.shape.dims);
  return desc;
}

Tensor ToCollopsTensor(const at::Tensor& t, const SlotName& slot) {
  if (!t.defined()) Fail(ERROR_INVALID_TENSOR_ADDR, slot.Text(), " is an undefined tensor");
  if (!t.device().is_cpu()) {
    Fail(ERROR_INVALID_TENSOR_ADDR, slot.Text(), " is on device ", t.device().str(),
         "; OperationTorch works on CPU tensors (call .cpu() first)");
  }
  if (t.layout() != at::kStrided) Fail(ERROR_INVALID_TENSOR_FORMAT, slot.Text(), NotDenseText(t));
  if (!t.is_contiguous()) {
    Fail(ERROR_INVALID_TENSOR_ADDR, slot.Text(), " is not contiguous (shape ", t.sizes(),
         ", strides ", t.strides(), "); collectives need dense memory, call .contiguous() first");
  }
  Tensor out;
  out.desc = ToDesc(t, slot);
  out.deviceData = t.numel() > 0 ? t.data_ptr() : nullptr;
  out.dataSize = static_cast<uint64_t>(t.numel()) * t.element_size();
  return out;
}

std::vector<TensorDesc> InputDescs(const std::vector<at::Tensor>& ins) {
  std::vector<TensorDesc> descs;
  for (size_t i = 0; i < ins.size(); ++i) descs.push_back(ToDesc(ins[i], {"inTensors", i}));
  return descs;
}

std::vector<int64_t> ShapeOf(const TensorDesc& desc) {
  return std::vector<int64_t>(desc.shape.dims, desc.shape.dims + desc.shape.dimNum);
}

std::vector<at::Tensor> DenseInputs(const std::vector<at::Tensor>& ins) {
  std::vector<at::Tensor> dense = ins;
  for (auto& t : dense) {
    // A tensor that is not strided has no contiguous form: BuildVariantPack refuses it by name.
    if (t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && !t.is_contiguous()) {
      t = t.contiguous();
    }
  }
  return dense;
}

VariantPack BuildVariantPack(const std::vector<at::Tensor>& ins,
                             const std::vector<at::Tensor>& outs, const HostCountBinding& binding) {
  VariantPack pack;
  for (size_t i = 0; i < ins.size(); ++i) {
    Tensor t = ToCollopsTensor(ins[i], {"inTensors", i});
    binding.Apply(i, ins[i], t);
    pack.inTensors.push_back(t);
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    pack.outTensors.push_back(ToCollopsTensor(outs[i], {"outTensors", i}));
  }
  return pack;
}

}  // namespace collops
