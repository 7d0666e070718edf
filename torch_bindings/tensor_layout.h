// How every entry of the binding refuses a tensor that is not dense (sparse COO/CSR/..., mkldnn),
// and the "collops" backend one that is strided but no plain buffer of its values (quantized,
// nested): the collectives read and write a tensor's memory as one flat buffer of values. Each
// entry raises its own error kind; the text after the argument's name is this.
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

/// Whether `t`, strided, still is no plain buffer of its values: a quantized tensor (integers that
/// mean their values only with its scale and zero point) or a nested one (several tensors).
inline bool IsQuantizedOrNested(const at::Tensor& t) { return t.is_quantized() || t.is_nested(); }

/// " is a quantized tensor (QUInt8), ...": the rest of a message that starts with the argument's
/// name, for a tensor IsQuantizedOrNested.
inline std::string NotPlainText(const at::Tensor& t) {
  if (t.is_quantized()) {
    return std::string(" is a quantized tensor (") + c10::toString(t.scalar_type()) +
           ") whose integers mean nothing without its scale and zero point; call .dequantize() "
           "first";
  }
  return " is a nested tensor, whose tensors are no one buffer; pass them one by one (.unbind()) "
         "or padded (.to_padded_tensor(0.0))";
}

}  // namespace collops
