#include "op_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "collops/operation_base.h"

namespace collops {
namespace testing {
namespace {

/// float -> binary16 / bfloat16 bits by exponent arithmetic on doubles (round half to even).
uint16_t EncodeSmallFloat(double value, int mantissaBits, int exponentBits) {
  const int bias = (1 << (exponentBits - 1)) - 1;
  const uint16_t sign = std::signbit(value) ? 1 : 0;
  const uint16_t signBit = static_cast<uint16_t>(sign << (mantissaBits + exponentBits));
  const uint16_t expAllOnes = static_cast<uint16_t>(((1 << exponentBits) - 1) << mantissaBits);
  if (std::isnan(value)) return static_cast<uint16_t>(expAllOnes | (1 << (mantissaBits - 1)));
  double mag = std::fabs(value);
  if (std::isinf(mag)) return signBit | expAllOnes;
  if (mag == 0) return signBit;
  int exp = std::ilogb(mag);
  if (exp < 1 - bias) exp = 1 - bias;  // subnormal range uses the minimum exponent
  // Scale so the mantissa's least significant bit is 1, round half to even.
  const double scaled = std::ldexp(mag, mantissaBits - exp);
  double rounded = std::nearbyint(scaled);  // default rounding mode: half to even
  if (rounded >= std::ldexp(1.0, mantissaBits + 1)) {
    rounded /= 2;
    ++exp;
  }
  if (exp > bias) return signBit | expAllOnes;  // overflow to infinity
  const bool normal = rounded >= std::ldexp(1.0, mantissaBits);
  const uint32_t mant = static_cast<uint32_t>(rounded) & ((1u << mantissaBits) - 1);
  const uint32_t biased = normal ? static_cast<uint32_t>(exp + bias) : 0;
  return static_cast<uint16_t>(signBit | (biased << mantissaBits) | mant);
}

double DecodeSmallFloat(uint16_t bits, int mantissaBits, int exponentBits) {
  const int bias = (1 << (exponentBits - 1)) - 1;
  const bool sign = (bits >> (mantissaBits + exponentBits)) & 1;
  const int biased = (bits >> mantissaBits) & ((1 << exponentBits) - 1);
  const int mant = bits & ((1 << mantissaBits) - 1);
  double mag;
  if (biased == (1 << exponentBits) - 1) {
    mag = mant ? NAN : INFINITY;
  } else if (biased == 0) {
    mag = std::ldexp(mant, 1 - bias - mantissaBits);
  } else {
    mag = std::ldexp(mant + (1 << mantissaBits), biased - bias - mantissaBits);
  }
  return sign ? -mag : mag;
}

template <class T>
T WrapInteger(double value) {
  using U = std::make_unsigned_t<T>;
  const auto wide = static_cast<uint64_t>(static_cast<int64_t>(value));
  const U narrow = static_cast<U>(wide);
  T out;
  std::memcpy(&out, &narrow, sizeof out);
  return out;
}

}  // namespace

double ElementToDouble(DataType dtype, const void* p) {
  switch (dtype) {
    case ACL_FLOAT:
      return *static_cast<const float*>(p);
    case ACL_DOUBLE:
      return *static_cast<const double*>(p);
    case ACL_FLOAT16:
      return DecodeSmallFloat(*static_cast<const uint16_t*>(p), 10, 5);
    case ACL_BF16:
      return DecodeSmallFloat(*static_cast<const uint16_t*>(p), 7, 8);
    case ACL_INT8:
      return *static_cast<const int8_t*>(p);
    case ACL_UINT8:
      return *static_cast<const uint8_t*>(p);
    case ACL_BOOL:
      return *static_cast<const uint8_t*>(p);
    case ACL_INT16:
      return *static_cast<const int16_t*>(p);
    case ACL_INT32:
      return *static_cast<const int32_t*>(p);
    case ACL_INT64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    default:
      ADD_FAILURE() << "no conversion for " << DataTypeName(dtype);
      return 0;
  }
}

void DoubleToElement(DataType dtype, double v, void* p) {
  switch (dtype) {
    case ACL_FLOAT:
      *static_cast<float*>(p) = static_cast<float>(v);
      break;
    case ACL_DOUBLE:
      *static_cast<double*>(p) = v;
      break;
    case ACL_FLOAT16:
      *static_cast<uint16_t*>(p) = EncodeSmallFloat(v, 10, 5);
      break;
    case ACL_BF16:
      *static_cast<uint16_t*>(p) = EncodeSmallFloat(v, 7, 8);
      break;
    case ACL_INT8:
      *static_cast<int8_t*>(p) = WrapInteger<int8_t>(v);
      break;
    case ACL_UINT8:
      *static_cast<uint8_t*>(p) = WrapInteger<int8_t>(v);
      break;
    case ACL_BOOL:
      *static_cast<uint8_t*>(p) = v != 0;
      break;
    case ACL_INT16:
      *static_cast<int16_t*>(p) = WrapInteger<int16_t>(v);
      break;
    case ACL_INT32:
      *static_cast<int32_t*>(p) = WrapInteger<int32_t>(v);
      break;
    case ACL_INT64:
      *static_cast<int64_t*>(p) = static_cast<int64_t>(v);
      break;
    default:
      ADD_FAILURE() << "no conversion for " << DataTypeName(dtype);
  }
}

double RoundTrip(DataType dtype, double value) {
  uint8_t buffer[8] = {};
  DoubleToElement(dtype, value, buffer);
  return ElementToDouble(dtype, buffer);
}

HostTensor::HostTensor(DataType dtype, std::vector<int64_t> shape) {
  tensor_.desc.dtype = dtype;
  tensor_.desc.format = ACL_FORMAT_ND;
  tensor_.desc.shape = MakeDims(shape);
  tensor_.dataSize = TensorBytes(tensor_.desc);
  // One spare byte so a 0-byte tensor still has a distinct, valid address.
  bytes_.assign(tensor_.dataSize + 1, 0);
  tensor_.deviceData = bytes_.data();
}

HostTensor::HostTensor(const HostTensor& other) : bytes_(other.bytes_), tensor_(other.tensor_) {
  tensor_.deviceData = bytes_.data();
}

HostTensor& HostTensor::operator=(const HostTensor& other) {
  bytes_ = other.bytes_;
  tensor_ = other.tensor_;
  tensor_.deviceData = bytes_.data();
  return *this;
}

HostTensor HostTensor::FromValues(DataType dtype, std::vector<int64_t> shape,
                                  const std::vector<double>& values) {
  HostTensor t(dtype, std::move(shape));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel()) << "FromValues: value count";
  const size_t width = DataTypeSize(dtype);
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < t.numel(); ++i) {
    DoubleToElement(dtype, values[i], t.bytes_.data() + i * width);
  }
  return t;
}

HostTensor HostTensor::Counts(const std::vector<int64_t>& counts) {
  HostTensor t(ACL_INT64, {static_cast<int64_t>(counts.size())});
  if (!counts.empty()) std::memcpy(t.bytes_.data(), counts.data(), counts.size() * 8);
  return t;
}

std::vector<int64_t> HostTensor::shape() const {
  return std::vector<int64_t>(tensor_.desc.shape.dims,
                              tensor_.desc.shape.dims + tensor_.desc.shape.dimNum);
}

std::vector<double> HostTensor::ToDoubles() const {
  std::vector<double> out(numel());
  const size_t width = DataTypeSize(dtype());
  for (size_t i = 0; i < out.size(); ++i) out[i] = ElementToDouble(dtype(), &bytes_[i * width]);
  return out;
}

std::vector<double> TestValues(DataType dtype, int64_t n, uint64_t seed, int rank, bool forProd) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(rank) * 7919u + 17u);
  const bool isFloat =
      dtype == ACL_FLOAT || dtype == ACL_FLOAT16 || dtype == ACL_BF16 || dtype == ACL_DOUBLE;
  const bool isUnsigned = dtype == ACL_UINT8 || dtype == ACL_BOOL;
  std::vector<double> values(n);
  for (auto& v : values) {
    if (forProd) {
      v = (rng() % 2 ? 1.0 : 2.0) * (rng() % 2 ? 1.0 : -1.0);
    } else if (dtype == ACL_BOOL) {
      v = static_cast<double>(rng() % 2);
    } else {
      v = static_cast<double>(static_cast<int>(rng() % 17) - (isUnsigned ? 0 : 8));
      if (isFloat && rng() % 2) v += 0.5;
      // Bits float32 cannot hold (sums of 7 stay exact in float64): a float64 reduction that
      // went through float32 anywhere shows.
      if (dtype == ACL_DOUBLE) v += std::ldexp(static_cast<double>(rng() % 8), -40);
    }
  }
  return values;
}

double FoldPair(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kMin:
      return std::min(a, b);
  }
  return a;
}

std::vector<double> FoldRanks(const std::vector<std::vector<double>>& perRank, ReduceOp op) {
  std::vector<double> out = perRank[0];
  for (size_t r = 1; r < perRank.size(); ++r) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = FoldPair(op, out[i], perRank[r][i]);
  }
  return out;
}

Tensor View(HostTensor& base, int64_t offset, const std::vector<int64_t>& shape) {
  Tensor t = base.tensor();
  t.desc.shape = MakeDims(shape);
  t.deviceData = ElementPtr(base.data(), offset, base.dtype());
  t.dataSize = TensorBytes(t.desc);
  return t;
}

std::vector<Tensor> Tensors(std::vector<HostTensor>& tensors) {
  std::vector<Tensor> out;
  for (auto& t : tensors) out.push_back(t.tensor());
  return out;
}

std::vector<HostTensor> AllocateOutputs(Operation& op, const std::vector<Tensor>& ins) {
  std::vector<TensorDesc> inDescs;
  for (const auto& t : ins) inDescs.push_back(t.desc);
  std::vector<TensorDesc> outDescs;
  const Status status = op.InferShape(inDescs, outDescs);
  EXPECT_EQ(status, NO_ERROR) << StatusName(status) << ": " << LastErrorMessage();
  std::vector<HostTensor> outs;
  for (const auto& d : outDescs) {
    outs.emplace_back(d.dtype, std::vector<int64_t>(d.shape.dims, d.shape.dims + d.shape.dimNum));
  }
  return outs;
}

Status RunOperation(Operation& op, const std::vector<Tensor>& ins, const std::vector<Tensor>& outs,
                    Context* context) {
  VariantPack pack{ins, outs};
  uint64_t workspaceSize = 0;
  const Status setup = op.Setup(pack, workspaceSize, context);
  if (setup != NO_ERROR) return setup;
  std::vector<uint8_t> workspace(workspaceSize);
  return op.Execute(pack, workspace.data(), workspaceSize, context);
}

void ExpectExactly(const HostTensor& got, const std::vector<double>& golden,
                   const std::string& what) {
  const std::vector<double> values = got.ToDoubles();
  ASSERT_EQ(values.size(), golden.size()) << what;
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(values[i], RoundTrip(got.dtype(), golden[i]))
        << what << ": element " << i << " of " << DataTypeName(got.dtype());
  }
}

double CloseThreshold(DataType dtype) {
  switch (dtype) {
    case ACL_FLOAT16:
      return std::ldexp(1.0, -8);
    case ACL_BF16:
      return std::ldexp(1.0, -7);
    case ACL_FLOAT:
      return std::ldexp(1.0, -11);
    default:
      return 0;
  }
}

int64_t FirstBeyondBound(DataType dtype, const std::vector<double>& values,
                         const std::vector<double>& golden, const std::vector<double>& magnitude) {
  const double thr = CloseThreshold(dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    if (!(std::fabs(values[i] - golden[i]) <= thr * std::max(1.0, magnitude[i]))) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

void ExpectCloseScaled(const HostTensor& got, const std::vector<double>& golden,
                       const std::vector<double>& magnitude, const std::string& what) {
  if (CloseThreshold(got.dtype()) == 0) return ExpectExactly(got, golden, what);
  const std::vector<double> values = got.ToDoubles();
  ASSERT_EQ(values.size(), golden.size()) << what;
  ASSERT_EQ(magnitude.size(), golden.size()) << what;
  const int64_t i = FirstBeyondBound(got.dtype(), values, golden, magnitude);
  ASSERT_EQ(i, -1) << what << ": element " << i << " of " << DataTypeName(got.dtype()) << " is "
                   << values[i] << ", golden " << golden[i] << ", bound "
                   << CloseThreshold(got.dtype()) << " * max(1, " << magnitude[i] << ")";
}

void ExpectClose(const HostTensor& got, const std::vector<double>& golden,
                 const std::string& what) {
  std::vector<double> magnitude(golden.size());
  for (size_t i = 0; i < golden.size(); ++i) magnitude[i] = std::fabs(golden[i]);
  ExpectCloseScaled(got, golden, magnitude, what);
}

const std::vector<DataType>& ReducibleDtypes() {
  static const std::vector<DataType> dtypes = {ACL_INT8,    ACL_INT16, ACL_INT32, ACL_INT64,
                                               ACL_FLOAT16, ACL_BF16,  ACL_FLOAT};
  return dtypes;
}

const std::vector<DataType>& MovableDtypes() {
  static const std::vector<DataType> dtypes = {ACL_INT8,  ACL_INT16,   ACL_INT32,
                                               ACL_INT64, ACL_FLOAT16, ACL_BF16,
                                               ACL_FLOAT, ACL_UINT8,   ACL_DOUBLE};
  return dtypes;
}

const std::vector<DataType>& PointToPointDtypes() {
  static const std::vector<DataType> dtypes = [] {
    std::vector<DataType> all = MovableDtypes();
    all.push_back(ACL_BOOL);
    return all;
  }();
  return dtypes;
}

const std::vector<int>& GoldenRankSizes() {
  static const std::vector<int> sizes = {1, 2, 3, 4, 7};
  return sizes;
}

std::string DtypeTestName(DataType dtype) { return DataTypeName(dtype); }

TensorDesc Desc(DataType dtype, std::initializer_list<int64_t> shape) {
  TensorDesc d;
  d.dtype = dtype;
  d.shape = MakeDims(shape);
  return d;
}

}  // namespace testing
}  // namespace collops
