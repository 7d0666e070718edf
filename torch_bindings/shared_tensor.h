// Tensors in memory a communicator's peers reach directly (Communicator::AllocateShared), for the
// two torch entry points that hand them out: OperationTorch and the "collops" c10d backend.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "collops/communicator.h"
#include "collops/status.h"
#include "collops/tensor.h"

namespace collops {

/// An uninitialised tensor from `comm`'s AllocateShared when it gives memory, else at::empty (no
/// communicator, a backend without such memory, a full heap); AllocateShared's error when it
/// refuses (lccl in a child of fork(): the heap is the parent's). The tensor keeps the
/// communicator, and so its heap, alive until it is freed.
inline at::Tensor SharedOrEmpty(const std::vector<int64_t>& sizes, c10::ScalarType dtype,
                                std::shared_ptr<Communicator> comm) {
  const auto options = at::TensorOptions().dtype(dtype);
  for (const int64_t n : sizes) {
    if (n < 0)
      Fail(ERROR_INVALID_TENSOR_DIM, "shape ", c10::IntArrayRef(sizes), " has a negative dim");
  }
  const int64_t bytes = CheckedBytes(sizes.data(), sizes.size(), c10::elementSize(dtype));
  if (bytes < 0) {
    Fail(ERROR_INVALID_TENSOR_SIZE, "shape ", c10::IntArrayRef(sizes), " of ", c10::toString(dtype),
         " needs more than 2^63 - 1 bytes");
  }
  void* memory = comm != nullptr ? comm->AllocateShared(static_cast<size_t>(bytes)) : nullptr;
  if (memory == nullptr) return at::empty(sizes, options);
  return at::from_blob(
      memory, sizes, [comm = std::move(comm)](void* p) { comm->FreeShared(p); }, options);
}

}  // namespace collops
