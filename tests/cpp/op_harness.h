// Test helpers for operation golden tests: tensors that own their memory, dtype conversion
// written independently of the library's kernels, deterministic test data, and ATB's
// comparison rule, and a substring check for error messages.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "collops/collops.h"

namespace collops {
namespace testing {

/// A CPU tensor that owns its bytes.
class HostTensor {
 public:
  HostTensor(DataType dtype, std::vector<int64_t> shape);
  /// A tensor of `dtype` holding `values` (each converted with round-to-nearest-even).
  static HostTensor FromValues(DataType dtype, std::vector<int64_t> shape,
                               const std::vector<double>& values);
  /// A 1-D int64 count tensor.
  static HostTensor Counts(const std::vector<int64_t>& counts);

  Tensor& tensor() { return tensor_; }
  const Tensor& tensor() const { return tensor_; }
  DataType dtype() const { return tensor_.desc.dtype; }
  int64_t numel() const { return NumElements(tensor_.desc.shape); }
  std::vector<int64_t> shape() const;
  std::vector<double> ToDoubles() const;
  void* data() { return bytes_.data(); }

  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);

 private:
  std::vector<uint8_t> bytes_;
  Tensor tensor_;
};

/// Independent scalar conversions (not the library's kernels).
double ElementToDouble(DataType dtype, const void* element);
void DoubleToElement(DataType dtype, double value, void* element);
/// What storing `value` in `dtype` gives back: rounding for floats, two's-complement wrap for
/// integers.
double RoundTrip(DataType dtype, double value);

/// Deterministic values exactly representable in `dtype`, different per (seed, rank): small
/// integers (and halves for float dtypes) so sums over 7 ranks stay exact. `forProd` keeps
/// magnitudes in {1, 2} with signs so products stay small.
std::vector<double> TestValues(DataType dtype, int64_t n, uint64_t seed, int rank,
                               bool forProd = false);

/// One step of a reduction's golden: `op` applied to two values, in double.
double FoldPair(ReduceOp op, double a, double b);
/// Golden of a reduction: the ranks' values folded in rank order in double (the dtype's rounding
/// is applied by the comparison).
std::vector<double> FoldRanks(const std::vector<std::vector<double>>& perRank, ReduceOp op);

/// A desc of `dtype` and `shape`, for InferShape tests.
TensorDesc Desc(DataType dtype, std::initializer_list<int64_t> shape);
/// Allocates outputs shaped by op.InferShape(ins) (ASSERTs success).
std::vector<HostTensor> AllocateOutputs(Operation& op, const std::vector<Tensor>& ins);
/// Setup, workspace, Execute. Returns the first failing Status.
Status RunOperation(Operation& op, const std::vector<Tensor>& ins, const std::vector<Tensor>& outs,
                    Context* context = nullptr);
std::vector<Tensor> Tensors(std::vector<HostTensor>& tensors);
/// A tensor of `shape` over `base`'s memory from element `offset` on: an aliasing input or
/// output of an in-place call.
Tensor View(HostTensor& base, int64_t offset, const std::vector<int64_t>& shape);

/// Data movement must be exact.
void ExpectExactly(const HostTensor& got, const std::vector<double>& golden,
                   const std::string& what);
/// ATB's rule: |a - g| <= thr * max(1, |g|), thr float16 2^-8, bfloat16 2^-7, float32 2^-11;
/// integers exact after wrapping golden to the dtype.
void ExpectClose(const HostTensor& got, const std::vector<double>& golden, const std::string& what);
/// ATB's per-dtype threshold above; 0 for integers.
double CloseThreshold(DataType dtype);
/// The first i with |values[i] - golden[i]| > CloseThreshold(dtype) * max(1, magnitude[i]), or
/// -1. `magnitude` is what the computation's rounding errors scale with, at least |golden[i]|
/// (ExpectClose's is |golden[i]| itself).
int64_t FirstBeyondBound(DataType dtype, const std::vector<double>& values,
                         const std::vector<double>& golden, const std::vector<double>& magnitude);
/// ExpectClose with |a - g| <= thr * max(1, magnitude[i]) (FirstBeyondBound).
void ExpectCloseScaled(const HostTensor& got, const std::vector<double>& golden,
                       const std::vector<double>& magnitude, const std::string& what);

/// Whether `text` holds `piece`: the check of error messages.
inline bool Contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

const std::vector<DataType>& ReducibleDtypes();
const std::vector<DataType>& MovableDtypes();
/// Every dtype of DtypeSet::kMovable: MovableDtypes() plus bool (Send, Recv, SendRecv).
const std::vector<DataType>& PointToPointDtypes();
/// {1, 2, 3, 4, 7}
const std::vector<int>& GoldenRankSizes();
/// gtest-safe name of a dtype, e.g. "float16".
std::string DtypeTestName(DataType dtype);

}  // namespace testing
}  // namespace collops
