// Messages and the receive-side check shared by the point-to-point op tests (Send/Recv and
// SendRecv on thread ranks).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "op_harness.h"

namespace collops {
namespace testing {

/// What rank `src` sends to rank `dst`: distinct per pair, so a message delivered to the wrong
/// rank or from the wrong peer cannot match.
inline std::vector<double> PairMessage(DataType dtype, int64_t n, int src, int dst) {
  return TestValues(dtype, n, 100 + static_cast<uint64_t>(dst), src);
}

/// The golden suites' parameter: rank count and dtype ("R4_float16").
using RanksAndDtype = std::tuple<int, DataType>;
inline std::string RanksAndDtypeName(const ::testing::TestParamInfo<RanksAndDtype>& info) {
  return Concat("R", std::get<0>(info.param), "_", DtypeTestName(std::get<1>(info.param)));
}

/// `op` (a Recv or SendRecv, whose y takes its float32 {4} input's shape and dtype) refuses a y of
/// another shape (naming y), another dtype, and a missing y, before any communication.
inline void ExpectOutputMustFollowInput(Operation& op) {
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {4})};
  std::vector<HostTensor> wrongShape = {HostTensor(ACL_FLOAT, {5})};
  EXPECT_EQ(RunOperation(op, Tensors(ins), Tensors(wrongShape)), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), ::testing::HasSubstr("y"));
  std::vector<HostTensor> wrongDtype = {HostTensor(ACL_INT32, {4})};
  EXPECT_EQ(RunOperation(op, Tensors(ins), Tensors(wrongDtype)), ERROR_INVALID_TENSOR_DTYPE);
  std::vector<HostTensor> none;
  EXPECT_EQ(RunOperation(op, Tensors(ins), Tensors(none)), ERROR_INVALID_TENSOR_NUM);
}

/// Runs `op` (a Recv or SendRecv on `rank`, whose only output is y) on `ins` and checks that y
/// has `shape` and holds what `src` sends to `rank`.
inline void RunAndExpectMessage(Operation& op, std::vector<HostTensor>& ins, DataType dtype,
                                const std::vector<int64_t>& shape, int src, int rank) {
  std::vector<HostTensor> outs = AllocateOutputs(op, Tensors(ins));
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].shape(), shape);
  ASSERT_EQ(RunOperation(op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
  ExpectExactly(
      outs[0], PairMessage(dtype, NumElements(MakeDims(shape)), src, rank),
      Concat("rank ", rank, " from rank ", src, " shape ", DimsToString(MakeDims(shape))));
}

}  // namespace testing
}  // namespace collops
