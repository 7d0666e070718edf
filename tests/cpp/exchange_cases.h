// Communicator::Exchange cases every backend must pass (exchange_test.cpp runs them on lccl
// threads and processes, hierarchical_golden_test.cpp across pretend hosts, mpi_backend_test.cpp
// on MPI): groups in orders that deadlock blocking Send/Recv (every rank sending first), several
// destinations and several messages per channel in one group, a group meeting plain Send/Recv,
// a mismatch inside a group that leaves the communicator usable, and a refusal (one side's op
// replaced by PointToPoint::Refusal) that fails both sides naming the refusing rank. Each runs on
// every rank.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "collops/communicator.h"
#include "collops/status.h"

namespace collops {
namespace testing {

/// Element i of the m-th message of a group from `src` to `dst`.
inline int32_t ExchangeValue(int src, int dst, int m, size_t i) {
  return static_cast<int32_t>(src * 10000000 + dst * 100000 + m * 1000 + i % 997);
}

inline std::vector<int32_t> ExchangeMessage(int src, int dst, int m, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = ExchangeValue(src, dst, m, i);
  return v;
}

/// First index where got differs from the message, or -1.
inline int64_t ExchangeFirstWrong(const std::vector<int32_t>& got, int src, int dst, int m) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != ExchangeValue(src, dst, m, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

/// 0, tiny, above the 16 KiB process_vm_readv threshold, and beyond the 32 KiB halves of a 64 KiB
/// slot (several chunks, and several regions per half when a group sends to several peers).
inline const size_t kExchangeCounts[] = {0, 7, 5000, 70001};

// Every rank sends first: [send right, receive left], then [receive left, send right] on odd
// ranks only, each count in turn.
inline void RingSendingFirst(Communicator& comm, int rank, int size) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (size_t n : kExchangeCounts) {
    for (int round = 0; round < 2; ++round) {
      std::vector<int32_t> mine = ExchangeMessage(rank, right, round, n), got(n, -1);
      std::vector<PointToPoint> group = {PointToPoint::Send(mine.data(), n, ACL_INT32, right),
                                         PointToPoint::Recv(got.data(), n, ACL_INT32, left)};
      if (round == 1 && rank % 2 == 1) std::swap(group[0], group[1]);
      comm.Exchange(group);
      EXPECT_EQ(ExchangeFirstWrong(got, left, rank, round), -1)
          << "ring n=" << n << " round " << round;
    }
  }
}

// Every rank sends two messages to every other rank and receives theirs, all in one group:
// sends listed before receives, so each rank stages for R-1 destinations at once.
inline void EveryPairTwice(Communicator& comm, int rank, int size) {
  for (size_t n : kExchangeCounts) {
    std::vector<std::vector<int32_t>> out, in;
    std::vector<PointToPoint> group;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      for (int m = 0; m < 2; ++m) {
        out.push_back(ExchangeMessage(rank, peer, m, n + m));
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
        EXPECT_EQ(ExchangeFirstWrong(in[k], peer, rank, m), -1)
            << "every pair n=" << n << " from " << peer << " message " << m;
      }
    }
  }
}

// Rank 0 runs one group against rank 1's blocking Recv then Send.
inline void GroupMeetsSendRecv(Communicator& comm, int rank) {
  const size_t n = 70001;
  std::vector<int32_t> mine = ExchangeMessage(rank, 1 - rank, 0, n), got(n, -1);
  if (rank == 0) {
    comm.Exchange({PointToPoint::Send(mine.data(), n, ACL_INT32, 1),
                   PointToPoint::Recv(got.data(), n, ACL_INT32, 1)});
  } else if (rank == 1) {
    comm.Recv(got.data(), n, ACL_INT32, 0);
    comm.Send(mine.data(), n, ACL_INT32, 0);
  }
  if (rank <= 1) {
    EXPECT_EQ(ExchangeFirstWrong(got, 1 - rank, rank, 0), -1);
  }
}

// Rank 0's group sends 5 elements to rank 1, which expects 4, and a good message to rank 2 (when
// there is one): ranks 0 and 1 get the mismatch, the good message arrives, the channels stay
// usable. A bad peer is refused before anything is announced.
inline void MismatchInAGroup(Communicator& comm, int rank, int size) {
  std::vector<int32_t> five = ExchangeMessage(0, 1, 0, 5), good = ExchangeMessage(0, 2, 0, 9),
                       got(9, -1);
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
      EXPECT_EQ(ExchangeFirstWrong(got, 0, 2, 0), -1);
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH) << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("rank 0 sends 5 elements of"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("rank 1, which expects 4 elements"));
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

// Ranks 0 and 1 swap a message each way in one group, where one side's op is a
// PointToPoint::Refusal: both get the mismatch naming the refusing rank and its Status, and the
// other direction still moves. Then both sides of one message refuse: they meet without error.
inline void RefusalInAGroup(Communicator& comm, int rank) {
  if (rank > 1) return;
  const int peer = 1 - rank;
  const size_t n = 70001;
  const std::vector<int32_t> mine = ExchangeMessage(rank, peer, 0, n);
  const std::pair<int, PointToPoint::Kind> refusals[] = {{0, PointToPoint::Kind::kSend},
                                                         {1, PointToPoint::Kind::kRecv}};
  for (const auto& [refuser, kind] : refusals) {
    std::vector<int32_t> got(n, -1);
    const bool send = kind == PointToPoint::Kind::kSend;
    std::vector<PointToPoint> group = {PointToPoint::Send(mine.data(), n, ACL_INT32, peer),
                                       PointToPoint::Recv(got.data(), n, ACL_INT32, peer)};
    if (rank == refuser)
      group[send ? 0 : 1] = PointToPoint::Refusal(kind, peer, ERROR_INVALID_TENSOR_FORMAT);
    try {
      comm.Exchange(group);
      ADD_FAILURE() << "rank " << rank << ": no ERROR_RANK_MISMATCH for rank " << refuser
                    << "'s refusal";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH) << e.what();
      EXPECT_THAT(e.what(),
                  ::testing::HasSubstr(Concat("rank ", refuser, " refused its ",
                                              send ? "send to" : "receive from", " rank ",
                                              1 - refuser, " (ERROR_INVALID_TENSOR_FORMAT")));
    }
    // The direction nobody refused moved.
    const bool received = !(rank == refuser && !send) && !(rank != refuser && send);
    if (received) {
      EXPECT_EQ(ExchangeFirstWrong(got, peer, rank, 0), -1) << "refusal by rank " << refuser;
    }
  }
  comm.Exchange(
      {PointToPoint::Refusal(rank == 0 ? PointToPoint::Kind::kSend : PointToPoint::Kind::kRecv,
                             peer, ERROR_INVALID_TENSOR_FORMAT)});
  EXPECT_FALSE(comm.Broken());
}

inline void ExchangeEveryCase(Communicator& comm, int rank, int size) {
  RingSendingFirst(comm, rank, size);
  EveryPairTwice(comm, rank, size);
  GroupMeetsSendRecv(comm, rank);
  MismatchInAGroup(comm, rank, size);
  RefusalInAGroup(comm, rank);
  RingSendingFirst(comm, rank, size);
  // A collective after the groups still sees consistent slots.
  int32_t mine = rank + 1, sum = 0;
  comm.AllReduce(&mine, &sum, 1, ACL_INT32, ReduceOp::kSum);
  EXPECT_EQ(sum, size * (size + 1) / 2);
}

}  // namespace testing
}  // namespace collops
