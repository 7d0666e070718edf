// The "c10d" engine's views of raw pointers as tensors of CurrentTensorDevice(), shared by its
// collectives (c10d_engine.cpp) and its point to point (c10d_engine_p2p.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "c10d_engine.h"

namespace collops {

inline at::TensorOptions OptionsOf(at::ScalarType type) {
  return at::TensorOptions().dtype(type).device(CurrentTensorDevice());
}

// A tensor over `numel` elements at `data` on CurrentTensorDevice() (no copy). Empty views get
// their own (empty) storage, so no backend ever sees a null data pointer.
inline at::Tensor View(const void* data, int64_t numel, at::ScalarType type) {
  if (numel == 0 || data == nullptr) return at::empty({0}, OptionsOf(type));
  return at::from_blob(const_cast<void*>(data), {numel}, OptionsOf(type));
}

inline at::Tensor Bytes(const void* data, int64_t bytes) { return View(data, bytes, at::kByte); }

}  // namespace collops
