#include "collops/tensor.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "collops/status.h"

namespace collops {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_BOOL:
      return 1;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
      return 2;
    case ACL_FLOAT:
    case ACL_INT32:
      return 4;
    case ACL_INT64:
    case ACL_DOUBLE:
      return 8;
    default:
      return 0;
  }
}

std::string DataTypeName(DataType dtype) {
  switch (dtype) {
    case ACL_FLOAT:
      return "float32";
    case ACL_FLOAT16:
      return "float16";
    case ACL_INT8:
      return "int8";
    case ACL_INT32:
      return "int32";
    case ACL_UINT8:
      return "uint8";
    case ACL_INT16:
      return "int16";
    case ACL_INT64:
      return "int64";
    case ACL_DOUBLE:
      return "float64";
    case ACL_BOOL:
      return "bool";
    case ACL_BF16:
      return "bfloat16";
    default:
      return "unknown(" + std::to_string(static_cast<int>(dtype)) + ")";
  }
}

int64_t NumElements(const Dims& dims) {
  const uint64_t dimNum = std::min<uint64_t>(dims.dimNum, kMaxDimNum);
  // Before multiplying: [2^62, 4, 0] holds nothing, however the other dims overflow.
  if (std::find(dims.dims, dims.dims + dimNum, 0) != dims.dims + dimNum) return 0;
  int64_t n = 1;
  for (uint64_t i = 0; i < dimNum; ++i) {
    if (__builtin_mul_overflow(n, dims.dims[i], &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

Dims MakeDims(std::initializer_list<int64_t> dims) { return MakeDims(std::vector<int64_t>(dims)); }

Dims MakeDims(const std::vector<int64_t>& dims) {
  Dims out;
  out.dimNum = dims.size() < kMaxDimNum ? dims.size() : kMaxDimNum;
  for (uint64_t i = 0; i < out.dimNum; ++i) out.dims[i] = dims[i];
  return out;
}

std::string DimsToString(const Dims& dims) {
  std::ostringstream out;
  out << '[';
  for (uint64_t i = 0; i < dims.dimNum && i < kMaxDimNum; ++i) {
    if (i) out << ", ";
    out << dims.dims[i];
  }
  out << ']';
  return out.str();
}

bool operator==(const Dims& a, const Dims& b) {
  if (a.dimNum != b.dimNum) return false;
  for (uint64_t i = 0; i < a.dimNum && i < kMaxDimNum; ++i) {
    if (a.dims[i] != b.dims[i]) return false;
  }
  return true;
}

bool operator==(const TensorDesc& a, const TensorDesc& b) {
  return a.dtype == b.dtype && a.format == b.format && a.shape == b.shape;
}

int64_t CheckedBytes(const int64_t* dims, size_t dimNum, size_t elementSize) {
  if (std::find(dims, dims + dimNum, 0) != dims + dimNum) return 0;
  int64_t bytes = static_cast<int64_t>(elementSize);
  for (size_t k = 0; k < dimNum; ++k) {
    if (__builtin_mul_overflow(bytes, dims[k], &bytes)) return -1;
  }
  return bytes;
}

uint64_t TensorBytes(const TensorDesc& desc) {
  const uint64_t dimNum = std::min<uint64_t>(desc.shape.dimNum, kMaxDimNum);
  for (uint64_t i = 0; i < dimNum; ++i) {
    if (desc.shape.dims[i] < 0) {
      Fail(ERROR_INVALID_TENSOR_DIM, "shape ", DimsToString(desc.shape), " has a negative dim");
    }
  }
  const int64_t bytes = CheckedBytes(desc.shape.dims, dimNum, DataTypeSize(desc.dtype));
  if (bytes < 0) {
    Fail(ERROR_INVALID_TENSOR_SIZE, "shape ", DimsToString(desc.shape), " of ",
         DataTypeName(desc.dtype), " is more than 2^63 - 1 bytes");
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace collops
