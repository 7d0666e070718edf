// Tensor descriptions in ATB's vocabulary (aclDataType numbering, ND format, up to 8 dims).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace collops {

/// Element types, numbered as ACL's aclDataType.
enum DataType : int32_t {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_INT64 = 9,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_BF16 = 27,
};

/// Memory layouts, numbered as ACL's aclFormat. Only ND is meaningful on CPU.
enum Format : int32_t {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_ND = 2,
};

constexpr size_t kMaxDimNum = 8;

/// A shape of 0..8 dims (ATB's Dims).
struct Dims {
  int64_t dims[kMaxDimNum] = {};
  uint64_t dimNum = 0;
};

struct TensorDesc {
  DataType dtype = ACL_DT_UNDEFINED;
  Format format = ACL_FORMAT_ND;
  Dims shape;
};

/// A tensor handed to an operation. On CPU `deviceData` is the tensor's memory; `hostData`, when
/// set on an int64 count tensor, holds the counts (ATB's host tensors) and wins over deviceData.
struct Tensor {
  TensorDesc desc;
  void* deviceData = nullptr;
  void* hostData = nullptr;
  uint64_t dataSize = 0;  ///< bytes; must equal NumElements(desc.shape) * DataTypeSize(desc.dtype)
};

struct VariantPack {
  std::vector<Tensor> inTensors;
  std::vector<Tensor> outTensors;
};

/// Bytes per element; 0 for ACL_DT_UNDEFINED or an unknown value.
size_t DataTypeSize(DataType dtype);
/// "float16" for ACL_FLOAT16; "unknown(<n>)" otherwise.
std::string DataTypeName(DataType dtype);
/// Product of the dims; 1 for a 0-dim shape, 0 when any dim is 0 (whatever the others). Saturates
/// at INT64_MAX instead of overflowing: the operations reject such shapes
/// (ERROR_INVALID_TENSOR_SIZE) before anything else reads them.
int64_t NumElements(const Dims& dims);
Dims MakeDims(std::initializer_list<int64_t> dims);
Dims MakeDims(const std::vector<int64_t>& dims);
/// "[2, 4]".
std::string DimsToString(const Dims& dims);
bool operator==(const Dims& a, const Dims& b);
inline bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }
bool operator==(const TensorDesc& a, const TensorDesc& b);
inline bool operator!=(const TensorDesc& a, const TensorDesc& b) { return !(a == b); }

/// Bytes of a shape of `dimNum` non-negative `dims` with `elementSize`-byte elements, or -1 when
/// that exceeds INT64_MAX (a 0 dim makes it 0, however large the others).
int64_t CheckedBytes(const int64_t* dims, size_t dimNum, size_t elementSize);

/// Bytes of a tensor described by `desc` (0 for an unknown dtype). Throws
/// Error(ERROR_INVALID_TENSOR_DIM) for a negative dim and Error(ERROR_INVALID_TENSOR_SIZE) when the
/// size exceeds 2^63 - 1 bytes, rather than returning a wrapped number.
uint64_t TensorBytes(const TensorDesc& desc);

}  // namespace collops
