// Output memory handed out again once nobody can see it any more, for the entry points that
// return new tensors on every call (OperationTorch.execute, torch.ops.collops.*).
//
// A returned output is a new tensor every time (its own TensorImpl: sizes, version counter,
// autograd state, Python object); only its memory may be that of an earlier output, and only
// when nothing but this cache still holds that memory: no tensor, view, storage object, weak
// reference or Python object of it is left, and its data pointer is still the one allocated
// (share_memory_, resize_ or a copy-on-write clone would have replaced it). What the memory held
// is not observable: an output is uninitialised until the collective writes all of it. This
// saves the allocation and, for large outputs, the page faults of fresh memory.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace collops {

class ReusedOutputs {
 public:
  /// Keeps the memory of at most `slots` outputs.
  explicit ReusedOutputs(size_t slots) : kept_(slots) {}

  /// A contiguous CPU tensor of `sizes` and `dtype`: over kept memory of exactly its byte count
  /// that nothing else holds, else `allocate()`'s (an uninitialised contiguous CPU tensor of
  /// `sizes` and `dtype`), whose memory is then kept in place of the oldest.
  template <class Allocate>
  at::Tensor Take(c10::IntArrayRef sizes, c10::ScalarType dtype, Allocate&& allocate) {
    const size_t bytes = Bytes(sizes, dtype);
    if (bytes > 0) {
      for (Kept& k : kept_) {
        if (Free(k, bytes)) return Over(k.storage, sizes, dtype);
      }
    }
    at::Tensor fresh = allocate();
    if (bytes > 0 && !kept_.empty() && fresh.storage_offset() == 0 && fresh.is_contiguous() &&
        fresh.storage().nbytes() == bytes) {
      Kept& k = kept_[next_];
      next_ = (next_ + 1) % kept_.size();
      k.storage = fresh.storage();
      k.data = k.storage.data_ptr().get();
      k.deleter = k.storage.data_ptr().get_deleter();
      k.bytes = bytes;
    }
    return fresh;
  }

  /// Lets go of every kept memory (the outputs handed out keep theirs).
  void Clear() {
    for (Kept& k : kept_) k = Kept();
  }

 private:
  struct Kept {
    c10::Storage storage;
    const void* data = nullptr;
    c10::DeleterFnPtr deleter = nullptr;
    size_t bytes = 0;
  };

  static size_t Bytes(c10::IntArrayRef sizes, c10::ScalarType dtype) {
    size_t n = c10::elementSize(dtype);
    for (const int64_t s : sizes) n *= static_cast<size_t>(s);
    return n;
  }

  // Whether `k` holds memory of `bytes` bytes that only this cache references.
  static bool Free(const Kept& k, size_t bytes) {
    if (!k.storage || k.bytes != bytes || k.storage.use_count() != 1) return false;
    const c10::StorageImpl& s = *k.storage.unsafeGetStorageImpl();
    // 2: the weak reference made here, and the one every strongly held target counts.
    return k.storage.getWeakStorageImpl().weak_use_count() == 2 &&
           s.pyobj_slot()->load_pyobj() == nullptr && s.nbytes() == bytes &&
           s.data_ptr().get() == k.data && s.data_ptr().get_deleter() == k.deleter;
  }

  static at::Tensor Over(const c10::Storage& storage, c10::IntArrayRef sizes,
                         c10::ScalarType dtype) {
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
        c10::scalarTypeToTypeMeta(dtype));
    t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
    return t;
  }

  std::vector<Kept> kept_;
  size_t next_ = 0;
};

}  // namespace collops
