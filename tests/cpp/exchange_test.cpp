// Communicator::Exchange on lccl, between threads and between processes: groups of sends and
// receives in orders that deadlock blocking Send/Recv (every rank sending first), several
// destinations and several messages per channel in one group (staged in regions of one half, or
// read by process_vm_readv), groups meeting plain Send/Recv, and mismatches that leave the
// channels usable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "collops/status.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

/// Element i of the m-th message of a group from `src` to `dst`.
int32_t Value(int src, int dst, int m, size_t i) {
  return static_cast<int32_t>(src * 10000000 + dst * 100000 + m * 1000 + i % 997);
}

std::vector<int32_t> Message(int src, int dst, int m, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Value(src, dst, m, i);
  return v;
}

/// First index where got differs from the message, or -1.
int64_t FirstWrong(const std::vector<int32_t>& got, int src, int dst, int m) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != Value(src, dst, m, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

/// 0, tiny, above the 16 KiB process_vm_readv threshold, and beyond the 32 KiB halves of a 64 KiB
/// slot (several chunks, and several regions per half when a group sends to several peers).
const size_t kCounts[] = {0, 7, 5000, 70001};

// Every rank sends first: [send right, receive left], then [receive left, send right] on odd
// ranks only, each count in turn.
void RingSendingFirst(Communicator& comm, int rank, int size) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (size_t n : kCounts) {
    for (int round = 0; round < 2; ++round) {
      std::vector<int32_t> mine = Message(rank, right, round, n), got(n, -1);
      std::vector<PointToPoint> group = {PointToPoint::Send(mine.data(), n, ACL_INT32, right),
                                         PointToPoint::Recv(got.data(), n, ACL_INT32, left)};
      if (round == 1 && rank % 2 == 1) std::swap(group[0], group[1]);
      comm.Exchange(group);
      EXPECT_EQ(FirstWrong(got, left, rank, round), -1) << "ring n=" << n << " round " << round;
    }
  }
}

// Every rank sends two messages to every other rank and receives theirs, all in one group:
// sends listed before receives, so each rank stages for R-1 destinations at once.
void EveryPairTwice(Communicator& comm, int rank, int size) {
  for (size_t n : kCounts) {
    std::vector<std::vector<int32_t>> out, in;
    std::vector<PointToPoint> group;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      for (int m = 0; m < 2; ++m) {
        out.push_back(Message(rank, peer, m, n + m));
        in.emplace_back(n + m, -1);
      }
    }
    size_t k = 0;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      for (int m = 0; m < 2; ++m, ++k) {
        group.push_back(PointToPoint::Send(out[k].data(), n + m, ACL_INT32, peer));
      }
    }
    k = 0;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      for (int m = 0; m < 2; ++m, ++k) {
        group.push_back(PointToPoint::Recv(in[k].data(), n + m, ACL_INT32, peer));
      }
    }
    comm.Exchange(group);
    k = 0;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      for (int m = 0; m < 2; ++m, ++k) {
        EXPECT_EQ(FirstWrong(in[k], peer, rank, m), -1)
            << "every pair n=" << n << " from " << peer << " message " << m;
      }
    }
  }
}

// Rank 0 runs one group against rank 1's blocking Recv then Send.
void GroupMeetsSendRecv(Communicator& comm, int rank) {
  const size_t n = 70001;
  std::vector<int32_t> mine = Message(rank, 1 - rank, 0, n), got(n, -1);
  if (rank == 0) {
    comm.Exchange({PointToPoint::Send(mine.data(), n, ACL_INT32, 1),
                   PointToPoint::Recv(got.data(), n, ACL_INT32, 1)});
  } else if (rank == 1) {
    comm.Recv(got.data(), n, ACL_INT32, 0);
    comm.Send(mine.data(), n, ACL_INT32, 0);
  }
  if (rank <= 1) {
    EXPECT_EQ(FirstWrong(got, 1 - rank, rank, 0), -1);
  }
}

// Rank 0's group sends 5 elements to rank 1, which expects 4, and a good message to rank 2 (when
// there is one): ranks 0 and 1 get the mismatch, the good message arrives, the channels stay
// usable. A bad peer is refused before anything is announced.
void MismatchInAGroup(Communicator& comm, int rank, int size) {
  std::vector<int32_t> five = Message(0, 1, 0, 5), good = Message(0, 2, 0, 9), got(9, -1);
  std::vector<int32_t> four(4, -1);
  try {
    if (rank == 0) {
      std::vector<PointToPoint> group = {PointToPoint::Send(five.data(), 5, ACL_INT32, 1)};
      if (size > 2) group.push_back(PointToPoint::Send(good.data(), 9, ACL_INT32, 2));
      comm.Exchange(group);
      ADD_FAILURE() << "rank 0: no ERROR_RANK_MISMATCH";
    } else if (rank == 1) {
      comm.Exchange({PointToPoint::Recv(four.data(), 4, ACL_INT32, 0)});
      ADD_FAILURE() << "rank 1: no ERROR_RANK_MISMATCH";
    } else if (rank == 2) {
      comm.Exchange({PointToPoint::Recv(got.data(), 9, ACL_INT32, 0)});
      EXPECT_EQ(FirstWrong(got, 0, 2, 0), -1);
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("rank 0 sends 5 elements of"));
    EXPECT_THAT(e.what(), HasSubstr("rank 1, which expects 4 elements"));
  }
  EXPECT_EQ(four, std::vector<int32_t>(4, -1)) << "a mismatched message moved data";
  EXPECT_FALSE(comm.Broken());
  try {
    comm.Exchange({PointToPoint::Send(five.data(), 5, ACL_INT32, rank)});
    ADD_FAILURE() << "a send to itself was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
  }
  comm.Barrier();
  RingSendingFirst(comm, rank, size);
}

void EveryCase(Communicator& comm, int rank, int size) {
  RingSendingFirst(comm, rank, size);
  EveryPairTwice(comm, rank, size);
  GroupMeetsSendRecv(comm, rank);
  MismatchInAGroup(comm, rank, size);
  // A collective after the groups still sees consistent slots.
  int32_t mine = rank + 1, sum = 0;
  comm.AllReduce(&mine, &sum, 1, ACL_INT32, ReduceOp::kSum);
  EXPECT_EQ(sum, size * (size + 1) / 2);
}

class ExchangeTest : public ::testing::TestWithParam<int> {};

TEST_P(ExchangeTest, ThreadRanks) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    EveryCase(*comm, rank, size);
  });
}

TEST_P(ExchangeTest, ProcessRanks) {
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
          EveryCase(*comm, rank, size);
        }
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExchangeTest, ::testing::Values(2, 3, 4, 7),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return Concat("R", info.param);
                         });

}  // namespace
}  // namespace testing
}  // namespace collops
