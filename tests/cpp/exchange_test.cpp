// Communicator::Exchange on lccl between threads and between processes (the cases:
// exchange_cases.h), staged through the slots and by process_vm_readv.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "exchange_cases.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

class Exchange : public ::testing::TestWithParam<int> {};

TEST_P(Exchange, ThreadRanks) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    ExchangeEveryCase(*comm, rank, size);
  });
}

TEST_P(Exchange, ProcessRanks) {
  const int size = GetParam();
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BYTES"] = "65536";
  options.deadlineSeconds = 90;
  RunProcessRanks(
      size,
      [size](int rank) {
        // Staged through the slots (0), and read by process_vm_readv from 16 KiB.
        for (const char* crossFrom : {"0", "16384"}) {
          setenv("COLLOPS_SHM_CMA_BYTES", crossFrom, 1);
          auto comm = MakeLcclComm(rank, size, std::string("exchange-") + crossFrom);
          SCOPED_TRACE(Concat("COLLOPS_SHM_CMA_BYTES=", crossFrom));
          ExchangeEveryCase(*comm, rank, size);
        }
      },
      options);
}

// Past the 32 MiB cap (a CPU per rank) a send moves by process_vm_readv only when its group also
// receives; a lone send is staged. The receiver follows what the sender announced, so groups and
// lone calls meet in every combination: two groups; a group's send read by a lone Recv, then a
// lone (staged) Send received inside that group.
TEST(ExchangeProcessBeyondCrossMemoryCap, ReceiverFollowsTheSendersChoice) {
  ProcessRanksOptions options;
  options.deadlineSeconds = 90;
  RunProcessRanks(
      2,
      [](int rank) {
        setenv("COLLOPS_SHM_CMA_BYTES", "16384", 1);
        auto comm = MakeLcclComm(rank, 2, "exchange-cap");
        const int peer = 1 - rank;
        const size_t n = (36u << 20) / sizeof(int32_t);
        for (int m = 0; m < 2; ++m) {
          const std::vector<int32_t> mine = ExchangeMessage(rank, peer, m, n);
          std::vector<int32_t> got(n, -1);
          if (m == 0 || rank == 0) {
            comm->Exchange({PointToPoint::Send(mine.data(), n, ACL_INT32, peer),
                            PointToPoint::Recv(got.data(), n, ACL_INT32, peer)});
          } else {
            comm->Recv(got.data(), n, ACL_INT32, peer);
            comm->Send(mine.data(), n, ACL_INT32, peer);
          }
          EXPECT_EQ(ExchangeFirstWrong(got, peer, rank, m), -1) << "message " << m;
        }
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Exchange, ::testing::Values(2, 3, 4, 7),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return Concat("R", info.param);
                         });

}  // namespace
}  // namespace testing
}  // namespace collops
