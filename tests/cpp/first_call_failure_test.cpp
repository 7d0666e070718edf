// A rank whose first call of an operation fails its own checks, before its communicator exists,
// on thread ranks (first_call_failure_suite.h): its peers fail at once, and it returns its own
// error also when they never come (after the creation it joined gave up).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "first_call_failure_suite.h"
#include "op_harness.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Without the join the peers would wait in the creation for the 20 s timeout, after the 10 s the
// suite allows each call.
TEST(FirstCallFailureErrors, ARankFailingItsFirstCallFailsItsPeersAtOnce) {
  ScopedEnv timeout("COLLOPS_TIMEOUT", "20");
  for (int rankSize : {2, 3}) {
    const std::string domain = UniqueDomain();
    RunThreadRanks(
        rankSize,
        [&](int rank) {
          RunFirstCallFailures(ThreadJob(rank, rankSize, domain), /*promptSeconds=*/10);
        },
        /*deadlineSeconds=*/90);
  }
}

/// Rank 1 of 2 alone makes a first call that fails its own checks (rank 0 never comes): it waits
/// in the creation it joined, as a rank running the call would, and then returns its own Status
/// and message, not the creation's timeout.
void ExpectOwnErrorWhenThePeerNeverComes(const char* opName, const nlohmann::json& extra,
                                         Status own, const char* field) {
  ScopedEnv timeout("COLLOPS_TIMEOUT", "2");
  nlohmann::json param = extra;
  param.update({{"rank", 1}, {"rankSize", 2}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
  OperationPtr op = MakeOperation(opName, param);
  HostTensor x = HostTensor::FromValues(ACL_FLOAT, {4}, TestValues(ACL_FLOAT, 4, 5, 1));
  HostTensor y(ACL_FLOAT, {5});  // AllReduce's y of another shape than x
  std::vector<Tensor> ins = {x.tensor()}, outs;
  if (op->GetOutputNum() == 1) outs.push_back(y.tensor());
  if (own == ERROR_INVALID_TENSOR_DTYPE) ins[0].desc.dtype = ACL_DT_UNDEFINED;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(RunOperation(*op, ins, outs), own) << LastErrorMessage();
  const double seconds = SecondsSince(start);
  EXPECT_THAT(LastErrorMessage(), HasSubstr(field));
  EXPECT_THAT(LastErrorMessage(), Not(HasSubstr("ERROR_TIMEOUT")));
  EXPECT_GE(seconds, 1.5) << "it did not wait for its peer in the creation";
  EXPECT_LT(seconds, 10) << "it waited past the creation's timeout";
}

TEST(FirstCallFailureErrors, AFailingCollectiveWhosePeerNeverComesReturnsItsOwnError) {
  ExpectOwnErrorWhenThePeerNeverComes("AllReduceOperation", nlohmann::json::object(),
                                      ERROR_INVALID_TENSOR_DIM, "outTensors[0] (y) has shape");
}

TEST(FirstCallFailureErrors, AFailingSendWhosePeerNeverComesReturnsItsOwnError) {
  ExpectOwnErrorWhenThePeerNeverComes("SendOperation", {{"destRank", 0}},
                                      ERROR_INVALID_TENSOR_DTYPE, "inTensors[0] (x) has dtype");
}

// A good first call whose creation times out (its peer never comes) is not joined a second time
// to tell of that failure: the rank returns the timeout after one COLLOPS_TIMEOUT, not two.
TEST(FirstCallFailureErrors, ACreationThatTimesOutIsNotJoinedAgain) {
  ScopedEnv timeout("COLLOPS_TIMEOUT", "3");
  OperationPtr op = MakeOperation(
      "AllReduceOperation",
      {{"rank", 1}, {"rankSize", 2}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
  HostTensor x = HostTensor::FromValues(ACL_FLOAT, {4}, TestValues(ACL_FLOAT, 4, 5, 1));
  HostTensor y(ACL_FLOAT, {4});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(RunOperation(*op, {x.tensor()}, {y.tensor()}), ERROR_TIMEOUT) << LastErrorMessage();
  EXPECT_LT(SecondsSince(start), 5.5);
}

}  // namespace
}  // namespace testing
}  // namespace collops
