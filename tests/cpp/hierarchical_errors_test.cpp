// Errors of the hierarchical communicator: a caller's AllToAllV against its own Agree, errors
// inside a host naming the job's ranks, and communicators that do not match the layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/hierarchical_communicator.h"
#include "collops/topology.h"
#include "hierarchical_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

/// Runs `call(comm, rank)` on every rank of a thread hierarchy over `layout`; returns each rank's
/// error message ("" when it did not throw), every thrown status checked to be `expected`.
std::vector<std::string> ErrorsOfEveryRank(
    const HostLayout& layout, Status expected,
    const std::function<void(Communicator& comm, int rank)>& call) {
  const int size = static_cast<int>(layout.hostOfRank.size());
  const std::string domain = UniqueDomain();
  std::vector<std::string> errors(size);
  RunThreadRanks(size, [&](int rank) {
    auto comm = ThreadHierarchy(rank, layout, domain);
    try {
      call(*comm, rank);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), expected) << e.what();
      errors[rank] = e.what();
    }
  });
  return errors;
}

/// Agree() on one exchange then AllToAllV with other counts is a caller's bug: it fails on the
/// spot (every rank here, since every rank makes it) rather than moving data by a wrong matrix.
TEST(HierarchicalErrors, AllToAllVWithOtherCountsThanItsAgreeIsAnInternalError) {
  const int size = 4;
  const std::vector<std::string> errors = ErrorsOfEveryRank(
      Layout({0, 0, 1, 1}), ERROR_INTERNAL_ERROR, [](Communicator& comm, int rank) {
        const ExchangeCase agreed(rank, size, [](int j, int i) { return 1 + (j + i) % 2; });
        const ExchangeCase called(rank, size, [](int j, int i) { return 2 + (j + i) % 2; });
        comm.Agree(agreed.Signature());
        called.Run(comm);
      });
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_THAT(errors[rank], HasSubstr("differ from those of the Agree() before it"))
        << "rank " << rank;
  }
}

// The host's lccl numbers its ranks 0..k-1; the error must also say which job ranks those are,
// or "rank 0 sends 5 elements" points the user at a rank on the other host.
TEST(HierarchicalErrors, ErrorsInsideAHostNameTheJobRanks) {
  const std::vector<std::string> errors = ErrorsOfEveryRank(
      Layout({0, 0, 1, 1}), ERROR_RANK_MISMATCH, [](Communicator& comm, int rank) {
        std::vector<float> buf(6);
        if (rank == 2) comm.Send(buf.data(), 5, ACL_FLOAT, 3);
        if (rank == 3) comm.Recv(buf.data(), 6, ACL_FLOAT, 2);
      });
  for (int rank : {2, 3}) {
    EXPECT_THAT(errors[rank], AllOf(HasSubstr("sends 5 elements"),
                                    HasSubstr("[rank numbers above are within host 1's lccl "
                                              "communicator; in the job: 0 = 2, 1 = 3]")))
        << "rank " << rank;
  }
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(HierarchicalErrors, CommunicatorsMustMatchTheLayout) {
  const std::string domain = UniqueDomain();
  auto one = [&](const std::string& name) {
    return CreateCommunicator(ThreadRankParam(0, 1, domain + name));
  };
  auto expectInvalid = [](const std::function<void()>& make, const std::string& text) {
    try {
      make();
      ADD_FAILURE() << "accepted; expected: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  expectInvalid([&] { MakeHierarchicalCommunicator(one("a"), one("b"), one("c"), Layout({0, 0})); },
                "the host layout has 2 ranks but the flat communicator has 1");
  expectInvalid([&] { MakeHierarchicalCommunicator(one("d"), one("e"), nullptr, Layout({0})); },
                "the rail communicator is null");
  expectInvalid([&] { MakeHierarchicalCommunicator(one("f"), nullptr, one("g"), Layout({0})); },
                "the intra communicator is null");
  EXPECT_EQ(MakeHierarchicalCommunicator(one("h"), one("i"), one("j"), Layout({0}))->Size(), 1);

  // Two hosts of one rank each: every rank's rail (the leaders) spans both hosts.
  std::vector<std::string> errors(2);
  RunThreadRanks(2, [&](int rank) {
    auto flat = CreateCommunicator(ThreadRankParam(rank, 2, domain + "/flat"));
    try {
      MakeHierarchicalCommunicator(flat, one(Concat("/host", rank)), one(Concat("/rail", rank)),
                                   Layout({0, 1}));
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
      errors[rank] = e.what();
    }
  });
  EXPECT_THAT(errors[1], HasSubstr("its rail is rank 0 of 1 but local index 0 exists on 2 hosts, "
                                   "this one (host 1) at position 1"));
}

}  // namespace
}  // namespace testing
}  // namespace collops
