// How every entry of the binding refuses a tensor that is not dense (sparse COO/CSR/..., mkldnn):
// the collectives read and write a tensor's memory as one flat buffer, which only a strided
// tensor has. Each entry raises its own error kind; the text after the argument's name is this.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace collops {

/// `layout` as Python prints it ("torch.sparse_coo"), so a message names what the caller passed.
inline const char* LayoutName(c10::Layout layout) {
  switch (layout) {
    case c10::kStrided:
      return "torch.strided";
    case c10::kSparse:
      return "torch.sparse_coo";
    case c10::kSparseCsr:
      return "torch.sparse_csr";
    case c10::kSparseCsc:
      return "torch.sparse_csc";
    case c10::kSparseBsr:
      return "torch.sparse_bsr";
    case c10::kSparseBsc:
      return "torch.sparse_bsc";
    case c10::kMkldnn:
      return "torch._mkldnn";
    case c10::kJagged:
      return "torch.jagged";
    default:
      return "an unknown layout";
  }
}

/// " must be a dense (strided) tensor, got layout torch.sparse_coo; ...": the rest of a message
/// that starts with the argument's name, for a tensor whose layout is not strided.
inline std::string NotDenseText(const at::Tensor& t) {
  return std::string(" must be a dense (strided) tensor, got layout ") + LayoutName(t.layout()) +
         "; call .to_dense() first";
}

}  // namespace collops
