#include "collops_backend_tensors.h"

#include "dtype_map.h"
#include "tensor_layout.h"

namespace collops {
namespace {

// `t` as a flat uint8 tensor (a copy when strided). contiguous() alone is not enough: torch calls
// a tensor contiguous whatever the strides of its size-1 dims, and a dtype view needs stride 1.
at::Tensor AsBytes(const at::Tensor& t) {
  at::Tensor flat = t.reshape(-1);
  if (flat.numel() > 0 && flat.stride(0) != 1)
    flat = at::empty({flat.numel()}, t.options()).copy_(flat);
  return flat.view(at::kByte);
}

}  // namespace

std::optional<DataType> BackendDtype(at::ScalarType type) {
  if (type == at::kBool) return ACL_UINT8;
  const DataType dtype = CollopsDtypeOf(type);
  if (dtype == ACL_DT_UNDEFINED) return std::nullopt;
  return dtype;
}

std::pair<DataType, int64_t> MovedAs(const at::Tensor& t) {
  const std::optional<DataType> dtype = BackendDtype(t.scalar_type());
  if (!dtype) return {ACL_INT8, 1};
  return {*dtype, static_cast<int64_t>(t.element_size())};
}

void CheckCpu(const at::Tensor& t, const char* what, const char* arg) {
  TORCH_CHECK(t.device().is_cpu(), "collops backend: ", what, " takes CPU tensors, got ",
              t.device(), "; use init_process_group(\"cpu:collops,cuda:nccl\") for GPU tensors");
  TORCH_CHECK(t.layout() == at::kStrided, "collops backend: ", what, ": ", arg, NotDenseText(t));
  TORCH_CHECK(!IsQuantizedOrNested(t), "collops backend: ", what, ": ", arg, NotPlainText(t));
}

void CheckCpu(const std::vector<at::Tensor>& ts, const char* what, const char* arg) {
  for (const auto& t : ts) CheckCpu(t, what, arg);
}

void CheckCpu(const std::vector<std::vector<at::Tensor>>& lists, const char* what,
              const char* arg) {
  for (const auto& ts : lists) CheckCpu(ts, what, arg);
}

at::Tensor Pack(const std::vector<at::Tensor>& ts, std::vector<int64_t>* counts,
                std::vector<int64_t>* displs) {
  int64_t total = 0;
  for (const auto& t : ts) {
    displs->push_back(total);
    counts->push_back(NumBytes(t));
    total += NumBytes(t);
  }
  at::Tensor buf = at::empty({total}, at::kByte);
  for (size_t i = 0; i < ts.size(); ++i) {
    buf.narrow(0, (*displs)[i], (*counts)[i]).copy_(AsBytes(ts[i]));
  }
  return buf;
}

void Unpack(const at::Tensor& buf, std::vector<at::Tensor>& ts,
            const std::vector<int64_t>& displs) {
  for (size_t i = 0; i < ts.size(); ++i) {
    at::Tensor src = buf.narrow(0, displs[i], NumBytes(ts[i])).view(ts[i].scalar_type());
    ts[i].copy_(src.view(ts[i].sizes()));
  }
}

}  // namespace collops
