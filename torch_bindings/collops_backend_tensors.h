// How the "collops" backend hands torch tensors to a communicator: CPU and dense checks, the
// collops dtype a tensor moves as, contiguous stand-ins for strided tensors, and lists of
// tensors packed into one byte buffer.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "collops/tensor.h"

namespace collops {

/// The collops dtype a collective moves or reduces `type` as: dtype_map.h's, except bool, which
/// goes as its bytes (uint8, 0 or 1) since the communicators reduce no bool; nullopt where collops
/// has no such dtype.
std::optional<DataType> BackendDtype(at::ScalarType type);

/// How a collective hands `t` to the communicator: in elements of its collops dtype, so that the
/// cross-rank check compares dtypes as well as sizes (ranks gathering float32 and int32 of one
/// size would otherwise swap reinterpreted bytes); as bytes (int8, 1) where collops has no such
/// dtype. Returns {dtype, element size}.
std::pair<DataType, int64_t> MovedAs(const at::Tensor& t);

/// Byte count of a tensor: data movement treats every dtype as bytes.
inline size_t NumBytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

/// Throws a torch error (RuntimeError, as gloo's "only supports dense tensors") naming the
/// collective `what` and its argument `arg` unless `t` is a dense (strided) CPU tensor of plain
/// values (not quantized, not nested: tensor_layout.h). Every
/// collective calls it on each tensor it is given before anything reads one, so no rank moves
/// data for a call it refuses.
void CheckCpu(const at::Tensor& t, const char* what, const char* arg = "tensor");
/// CheckCpu of every tensor of `ts`.
void CheckCpu(const std::vector<at::Tensor>& ts, const char* what, const char* arg);
/// CheckCpu of every tensor of every list of `lists`.
void CheckCpu(const std::vector<std::vector<at::Tensor>>& lists, const char* what, const char* arg);

/// CheckCpu of each argument given as (tensors, its name) pairs, in order; `tensors` is a tensor,
/// a list or a list of lists.
inline void CheckCpuArgs(const char* /*what*/) {}
template <class Tensors, class... Rest>
void CheckCpuArgs(const char* what, const Tensors& tensors, const char* arg, const Rest&... rest) {
  CheckCpu(tensors, what, arg);
  CheckCpuArgs(what, rest...);
}

/// Throws a torch error unless a call that pairs each output with an input (the list and
/// coalesced forms) got as many of each: "collops backend: `what` needs one `pairing`, ...".
inline void CheckSameCount(size_t outputs, size_t inputs, const char* what, const char* pairing) {
  TORCH_CHECK(outputs == inputs, "collops backend: ", what, " needs one ", pairing, ", got ",
              outputs, " outputs and ", inputs, " inputs");
}

/// Runs `body` on a contiguous view of `t` and copies the result back when `t` was strided.
template <class Body>
void InPlace(at::Tensor& t, const char* what, Body body) {
  CheckCpu(t, what);
  if (t.is_contiguous()) {
    body(t);
    return;
  }
  at::Tensor c = t.contiguous();
  body(c);
  t.copy_(c);
}

/// Counts and displacements of `size` blocks of `n` elements each, one after the other.
struct EvenBlocks {
  EvenBlocks(int size, int64_t n) : counts(size, n), displs(size) {
    for (int i = 0; i < size; ++i) displs[i] = i * n;
  }
  std::vector<int64_t> counts, displs;
};

/// Flattens a list of tensors, checked by CheckCpu, into one byte buffer; `counts`/`displs` get
/// each one's bytes.
at::Tensor Pack(const std::vector<at::Tensor>& ts, std::vector<int64_t>* counts,
                std::vector<int64_t>* displs);

/// Copies each tensor of `ts` out of `buf` at its byte displacement.
void Unpack(const at::Tensor& buf, std::vector<at::Tensor>& ts, const std::vector<int64_t>& displs);

}  // namespace collops
