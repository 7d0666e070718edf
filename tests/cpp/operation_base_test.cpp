// The generic rules OperationBase enforces for every op, one test per rule with its Status.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "op_harness.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

TEST(OperationBaseErrors, WrongInputCountIsInvalidInTensorNum) {
  OperationPtr op = SingleRankAllReduce();
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({Desc(ACL_FLOAT, {2}), Desc(ACL_FLOAT, {2})}, out),
            ERROR_INVALID_IN_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("expects 1 inTensors (x), got 2"));
}

TEST(OperationBaseErrors, WrongOutputCountIsInvalidTensorNum) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {2});
  EXPECT_EQ(RunOperation(*op, {x.tensor()}, {}), ERROR_INVALID_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outTensors"));
}

TEST(OperationBaseErrors, ZeroOrNineDimsIsInvalidDimNum) {
  OperationPtr op = SingleRankAllReduce();
  std::vector<TensorDesc> out;
  TensorDesc scalar;
  scalar.dtype = ACL_FLOAT;
  EXPECT_EQ(op->InferShape({scalar}, out), ERROR_INVALID_TENSOR_DIM_NUM);
  TensorDesc nine = scalar;
  nine.shape.dimNum = 9;
  EXPECT_EQ(op->InferShape({nine}, out), ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("9 dims"));
}

TEST(OperationBaseErrors, NegativeDimIsInvalidDim) {
  OperationPtr op = SingleRankAllReduce();
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({Desc(ACL_FLOAT, {2, -1})}, out), ERROR_INVALID_TENSOR_DIM);
}

TEST(OperationBaseErrors, UnknownDtypeIsInvalidDtype) {
  OperationPtr op = SingleRankAllReduce();
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({Desc(static_cast<DataType>(42), {2})}, out),
            ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("unknown(42)"));
}

TEST(OperationBaseErrors, NonNdFormatIsInvalidFormat) {
  OperationPtr op = SingleRankAllReduce();
  std::vector<TensorDesc> out;
  TensorDesc d = Desc(ACL_FLOAT, {2});
  d.format = static_cast<Format>(29);
  EXPECT_EQ(op->InferShape({d}, out), ERROR_INVALID_TENSOR_FORMAT);
}

TEST(OperationBaseErrors, DataSizeDisagreeingWithShapeIsInvalidSize) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {4});
  Tensor bad = x.tensor();
  bad.dataSize = 12;
  EXPECT_EQ(RunOperation(*op, {bad}, {y.tensor()}), ERROR_INVALID_TENSOR_SIZE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("dataSize 12"));
}

TEST(OperationBaseErrors, NullDataIsInvalidAddr) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {4});
  Tensor bad = x.tensor();
  bad.deviceData = nullptr;
  EXPECT_EQ(RunOperation(*op, {bad}, {y.tensor()}), ERROR_INVALID_TENSOR_ADDR);
}

TEST(OperationBaseErrors, ShapeWhoseByteSizeOverflowsIsInvalidSize) {
  // 2^61 + 1 rows of 4 floats: the element count wraps to a 16-byte tensor if unchecked.
  OperationPtr op = SingleRankAllReduce();
  const int64_t rows = (int64_t{1} << 61) + 1;
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({Desc(ACL_FLOAT, {rows, 4})}, out), ERROR_INVALID_TENSOR_SIZE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("more than 2^63 - 1 bytes"));
  HostTensor x(ACL_FLOAT, {4});
  Tensor huge = x.tensor();
  huge.desc.shape = MakeDims({rows, 4});
  EXPECT_EQ(RunOperation(*op, {huge}, {huge}), ERROR_INVALID_TENSOR_SIZE);
}

// NumElements saturated [2^62, 4, 0] to INT64_MAX elements: the range rule passed a send of 2^26
// elements from an empty x, and Execute read past it; the size check named a wrapped byte count.
TEST(OperationBaseErrors, ZeroDimShapeHoldsNothingHoweverLargeTheOtherDims) {
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(NumElements(MakeDims({big, 4, 0})), 0);
  EXPECT_EQ(TensorBytes(Desc(ACL_FLOAT, {big, 4, 0})), 0u);
  OperationPtr op = MakeOperation("AllToAllVOperation", {{"rank", 0},
                                                         {"rankSize", 1},
                                                         {"commMode", 1},
                                                         {"commDomain", UniqueDomain()},
                                                         {"sendCounts", {8}},
                                                         {"sdispls", {0}},
                                                         {"recvCounts", {8}},
                                                         {"rdispls", {0}}});
  HostTensor x(ACL_FLOAT, {8});
  HostTensor y(ACL_FLOAT, {1, 8});
  Tensor empty = x.tensor();
  empty.desc.shape = MakeDims({big, 4, 0});
  empty.dataSize = 0;
  EXPECT_EQ(RunOperation(*op, {empty}, {y.tensor()}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("exceeds x.numel() = 0"));
  empty.dataSize = 32;
  EXPECT_EQ(RunOperation(*op, {empty}, {y.tensor()}), ERROR_INVALID_TENSOR_SIZE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("has dataSize 32 but shape [4611686018427387904, 4, 0] "
                                            "of float32 needs 0 bytes"));
}

TEST(OperationBaseErrors, TensorBytesRefusesSizesBeyondInt64) {
  std::string message;
  try {
    TensorBytes(Desc(ACL_FLOAT, {(int64_t{1} << 61) + 1, 4}));
    ADD_FAILURE() << "a wrapped size was returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_TENSOR_SIZE);
    message = e.what();
  }
  EXPECT_THAT(message,
              HasSubstr("shape [2305843009213693953, 4] of float32 is more than 2^63 - 1"));
  EXPECT_EQ(TensorBytes(Desc(ACL_INT16, {3, 5})), 30u);
}

TEST(OperationBaseErrors, TransposedRowsThatOverflowAreInvalidDim) {
  // An empty x [2^62, 0] passes the size rule, but y would have 2^62 * rankSize rows.
  OperationPtr op = MakeOperation(
      "AllToAllOperation",
      {{"rank", 0}, {"rankSize", 2}, {"commMode", 1}, {"transpose", true}, {"commDomain", "t"}});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({Desc(ACL_FLOAT, {int64_t{1} << 62, 0})}, out),
            ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("H * rankSize overflows int64"));
}

TEST(OperationBaseErrors, ExecuteChecksTheOutputsDataAgain) {
  // The descs equal Setup's, so only the data pointer and size tell: both are checked per call.
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {4});
  uint64_t workspaceSize = 0;
  ASSERT_EQ(op->Setup({{x.tensor()}, {y.tensor()}}, workspaceSize, nullptr), NO_ERROR);
  Tensor noData = y.tensor();
  noData.deviceData = nullptr;
  EXPECT_EQ(op->Execute({{x.tensor()}, {noData}}, nullptr, 0, nullptr), ERROR_INVALID_TENSOR_ADDR);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outTensors[0] (y) has no data"));
  Tensor shortData = y.tensor();
  shortData.dataSize = 4;
  EXPECT_EQ(op->Execute({{x.tensor()}, {shortData}}, nullptr, 0, nullptr),
            ERROR_INVALID_TENSOR_SIZE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outTensors[0] (y) has dataSize 4"));
  EXPECT_EQ(op->Execute({{x.tensor()}, {y.tensor()}}, nullptr, 0, nullptr), NO_ERROR)
      << LastErrorMessage();
}

TEST(OperationBaseErrors, OutputShapeNotInferredIsInvalidDim) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {5});
  EXPECT_EQ(RunOperation(*op, {x.tensor()}, {y.tensor()}), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("[5]"));
}

TEST(OperationBaseErrors, OutputDtypeNotInferredIsInvalidDtype) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_INT32, {4});
  EXPECT_EQ(RunOperation(*op, {x.tensor()}, {y.tensor()}), ERROR_INVALID_TENSOR_DTYPE);
}

TEST(OperationBaseErrors, ExecuteBeforeSetupIsIniMatch) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {4});
  VariantPack pack{{x.tensor()}, {y.tensor()}};
  EXPECT_EQ(op->Execute(pack, nullptr, 0, nullptr), ERROR_INVALID_TENSOR_INI_MATCH);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("Setup"));
}

TEST(OperationBaseErrors, ExecuteWithOtherShapesThanSetupIsIniMatch) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {4});
  HostTensor x5(ACL_FLOAT, {5});
  HostTensor y5(ACL_FLOAT, {5});
  uint64_t workspaceSize = 0;
  ASSERT_EQ(op->Setup({{x.tensor()}, {y.tensor()}}, workspaceSize, nullptr), NO_ERROR);
  EXPECT_EQ(op->Execute({{x5.tensor()}, {y5.tensor()}}, nullptr, 0, nullptr),
            ERROR_INVALID_TENSOR_INI_MATCH);
}

TEST(OperationBaseErrors, WorkspaceSmallerThanSetupIsInvalidWorkspaceSize) {
  // Transposed AllToAll packs column blocks through the workspace, so it asks for one.
  OperationPtr op = MakeOperation("AllToAllOperation", {{"rank", 0},
                                                        {"rankSize", 1},
                                                        {"commMode", 1},
                                                        {"transpose", true},
                                                        {"commDomain", UniqueDomain()}});
  HostTensor x(ACL_FLOAT, {2, 4});
  std::vector<HostTensor> outs = AllocateOutputs(*op, {x.tensor()});
  VariantPack pack{{x.tensor()}, Tensors(outs)};
  uint64_t workspaceSize = 0;
  ASSERT_EQ(op->Setup(pack, workspaceSize, nullptr), NO_ERROR) << LastErrorMessage();
  ASSERT_GT(workspaceSize, 0u);
  std::vector<uint8_t> workspace(workspaceSize);
  EXPECT_EQ(op->Execute(pack, workspace.data(), workspaceSize - 1, nullptr),
            ERROR_INVALID_WORKSPACE_SIZE);
  EXPECT_EQ(op->Execute(pack, nullptr, workspaceSize, nullptr), ERROR_INVALID_WORKSPACE_ADDR);
  EXPECT_EQ(op->Execute(pack, workspace.data(), workspaceSize, nullptr), NO_ERROR)
      << LastErrorMessage();
}

TEST(OperationBase, ShapeCarrierNeedsNoData) {
  // ATB passes tensorForInferShape / y_shape only for their shapes; their data is never read.
  OperationPtr op = MakeOperation(
      "AllGatherVOperation",
      {{"rank", 0}, {"rankSize", 1}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
  HostTensor x = HostTensor::FromValues(ACL_INT32, {3}, {1, 2, 3});
  HostTensor sendCount = HostTensor::Counts({3});
  HostTensor recvCounts = HostTensor::Counts({3});
  HostTensor rdispls = HostTensor::Counts({0});
  Tensor yShape;
  yShape.desc = Desc(ACL_INT8, {4});
  yShape.dataSize = 4;  // deviceData stays null
  std::vector<Tensor> ins = {x.tensor(), sendCount.tensor(), recvCounts.tensor(), rdispls.tensor(),
                             yShape};
  std::vector<HostTensor> outs = AllocateOutputs(*op, ins);
  ASSERT_EQ(RunOperation(*op, ins, Tensors(outs)), NO_ERROR) << LastErrorMessage();
  ExpectExactly(outs[0], {1, 2, 3, 0}, "AllGatherV with a data-less y_shape");
}

TEST(OperationBase, ListOperationsNamesEveryOp) {
  EXPECT_THAT(ListOperations(),
              ::testing::IsSupersetOf(
                  {"AllReduceOperation", "AllGatherOperation", "AllGatherVOperation",
                   "ReduceScatterOperation", "ReduceScatterVOperation", "BroadcastOperation",
                   "AllToAllOperation", "AllToAllVOperation", "AllToAllVV2Operation",
                   "SendOperation", "RecvOperation", "SendRecvOperation", "BarrierOperation"}));
}

TEST(OperationBaseErrors, UnknownOperationNameIsInvalidParam) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllReduce", nlohmann::json::object(), &op), ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("unknown operation \"AllReduce\""));
}

TEST(OperationBaseErrors, MalformedJsonTextIsInvalidParam) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllReduceOperation", std::string("{\"rank\": 0,"), &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("not valid JSON"));
}

// The JSON parser stops at a NUL byte, so `{"rankSize":1}\0junk` must be refused as a whole
// rather than read as its valid prefix.
TEST(OperationBaseErrors, JsonTextWithANulByteIsInvalidParam) {
  Operation* op = nullptr;
  const std::string text("{\"rank\": 0, \"rankSize\": 1}\0junk", 31);
  EXPECT_EQ(CreateOperation("AllReduceOperation", text, &op), ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("NUL byte at byte offset 26"));
  EXPECT_EQ(CreateOperation("AllReduceOperation", text.substr(0, 26), &op), NO_ERROR)
      << LastErrorMessage();
  DestroyOperation(op);
}

TEST(OperationBaseErrors, CallerCommunicatorOfOtherSizeIsInvalidParam) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    std::shared_ptr<Communicator> comm = CreateCommunicator(ThreadRankParam(rank, 2, domain));
    CommParam param;
    param.rank = rank;
    param.rankSize = 3;
    param.comm = comm.get();
    EXPECT_THROW(DefaultContext().Communicators().Get(param), Error);
    param.rankSize = 2;
    EXPECT_EQ(DefaultContext().Communicators().Get(param).get(), comm.get());
  });
}

// A rank whose params disagree with the communicator it hands in fails, and its peer fails with
// it: otherwise the peer's call would pair with that rank's next one and return its data.
TEST(OperationBaseErrors, CallerCommunicatorDisagreeingWithTheParamsFailsThePeersToo) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    std::shared_ptr<Communicator> comm = CreateCommunicator(ThreadRankParam(rank, 2, domain));
    Operation* raw = nullptr;
    ASSERT_EQ(CreateOperation("AllReduceOperation",
                              {{"rank", rank == 1 ? 0 : rank}, {"rankSize", 2}}, comm.get(), &raw),
              NO_ERROR)
        << LastErrorMessage();
    OperationPtr op(raw);
    HostTensor x = HostTensor::FromValues(ACL_FLOAT, {4}, TestValues(ACL_FLOAT, 4, 2, rank));
    HostTensor y(ACL_FLOAT, {4});
    const Status status = RunOperation(*op, {x.tensor()}, {y.tensor()});
    if (rank == 1) {
      EXPECT_EQ(status, ERROR_INVALID_PARAM);
      EXPECT_THAT(LastErrorMessage(), HasSubstr("the caller's communicator is rank 1 of 2"));
    } else {
      EXPECT_EQ(status, ERROR_RANK_MISMATCH);
      EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1 failed its own checks"));
    }
  });
}

// Two threads of one rank running ops of one commDomain at once share the communicator, so the
// thread that comes second fails at once, and the one inside fails when done and stops the
// communicator: the peers may have paired its call with the other's, mixing their data.
TEST(OperationBaseErrors, TwoThreadsOfARankOnOneCommunicatorBothFail) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    auto makeOp = [&] {
      return MakeOperation(
          "AllReduceOperation",
          {{"rank", rank}, {"rankSize", 2}, {"commMode", 1}, {"commDomain", domain}});
    };
    OperationPtr first = makeOp(), second = makeOp();
    HostTensor x = HostTensor::FromValues(ACL_FLOAT, {4}, TestValues(ACL_FLOAT, 4, 2, rank));
    HostTensor y(ACL_FLOAT, {4}), z(ACL_FLOAT, {4});
    ASSERT_EQ(RunOperation(*first, {x.tensor()}, {y.tensor()}), NO_ERROR) << LastErrorMessage();
    if (rank == 1) {
      // Rank 0's first thread waits in its call for this one meanwhile.
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      RunOperation(*first, {x.tensor()}, {y.tensor()});  // paired with it: either outcome
      return;
    }
    Status inside = NO_ERROR;
    std::string insideMessage;
    std::thread other([&] {
      inside = RunOperation(*first, {x.tensor()}, {y.tensor()});
      insideMessage = LastErrorMessage();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(RunOperation(*second, {x.tensor()}, {z.tensor()}), ERROR_COMM_FAIL);
    EXPECT_THAT(LastErrorMessage(),
                HasSubstr("AllReduceOperation (rank 0): another thread of this rank is in a call "
                          "on the same lccl communicator"));
    other.join();
    EXPECT_EQ(inside, ERROR_COMM_FAIL);
    EXPECT_THAT(insideMessage, HasSubstr("another thread of this rank called on the same lccl "
                                         "communicator during this call"));
  });
}

TEST(OperationBaseErrors, RankFailingItsOwnChecksFailsItsPeersFast) {
  // Rank 1 hands in an output of the wrong shape (a fresh op, so the failure is in Setup). It must
  // not leave ranks 0 and 2 waiting for COLLOPS_TIMEOUT (30 s under ctest): they learn of it in
  // the signature exchange of their Execute.
  const std::string domain = UniqueDomain();
  const auto start = std::chrono::steady_clock::now();
  RunThreadRanks(3, [&](int rank) {
    OperationPtr op =
        MakeOperation("AllReduceOperation",
                      {{"rank", rank}, {"rankSize", 3}, {"commMode", 1}, {"commDomain", domain}});
    HostTensor x = HostTensor::FromValues(ACL_FLOAT, {4}, TestValues(ACL_FLOAT, 4, 3, rank));
    HostTensor good(ACL_FLOAT, {4});
    // A first good step creates the communicator, as in any training or inference loop.
    ASSERT_EQ(RunOperation(*op, {x.tensor()}, {good.tensor()}), NO_ERROR) << LastErrorMessage();
    OperationPtr next =
        MakeOperation("AllReduceOperation",
                      {{"rank", rank}, {"rankSize", 3}, {"commMode", 1}, {"commDomain", domain}});
    HostTensor y(ACL_FLOAT, {rank == 1 ? 5 : 4});
    const Status status = RunOperation(*next, {x.tensor()}, {y.tensor()});
    if (rank == 1) {
      EXPECT_EQ(status, ERROR_INVALID_TENSOR_DIM);
    } else {
      EXPECT_EQ(status, ERROR_RANK_MISMATCH);
      EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1 failed its own checks"));
      EXPECT_THAT(LastErrorMessage(), HasSubstr("ERROR_INVALID_TENSOR_DIM"));
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace testing
}  // namespace collops
