// The contentId (collops/tensor.h) of each input of one OperationTorch's calls: the id of the
// input's last call while it is provably the same tensor with the same bytes, a new one
// otherwise, so an operation may reuse what it derived from it (LinearParallelOperation: its
// repacked int8 weight).
//
// "The same bytes" is what torch can tell: the same storage (held weakly, so a storage freed
// and another allocated at its address is a new one), data pointer, sizes, strides and dtype,
// and the same version counter value, which every in-place write through the tensor or a view
// of it bumps. Writes torch does not count get no new id: through `.data` (a tensor with its own
// version counter), numpy or raw pointers, or another tensor over the same storage that is not a
// view. Inference tensors (torch.inference_mode) count no versions at all, so they get id 0
// (nothing reused).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "collops/tensor.h"

namespace collops {

class ContentIds {
 public:
  /// Sets pack.inTensors[i].contentId for each ins[i]: the caller's tensors, before any
  /// contiguous copy (whose bytes follow from them).
  void Apply(const std::vector<at::Tensor>& ins, VariantPack& pack);

 private:
  struct Seen {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
    const void* data = nullptr;
    std::vector<int64_t> sizes, strides;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    uint32_t version = 0;
    uint64_t id = 0;
  };
  /// The id of `t`, last seen as `seen` (updated).
  static uint64_t IdOf(const at::Tensor& t, Seen& seen);

  std::vector<Seen> seen_;  // by input index
};

}  // namespace collops
