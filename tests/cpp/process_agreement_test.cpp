// lccl carries the cross-rank agreement record with the first round of the collective that follows
// Agree() (process_comm.h): these tests pin down that it costs no round of its own, that ranks
// which disagree all fail before any output is written and keep a usable communicator, and that a
// rank calling without the check is named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "collops/signature.h"
#include "core/comm/shm/process_comm.h"
#include "core/comm/shm/process_segment.h"
#include "process_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

CallSignature Signature(const std::string& op, int64_t count) {
  CallSignature s;
  s.opName = op;
  s.dtype = ACL_INT32;
  s.count = count;
  return s;
}

class ProcessAgreement : public ::testing::TestWithParam<int> {};

/// A small AllReduce, an AllToAllV, an AllGatherV and a Broadcast each take one round, with or
/// without the agreement check before them: the check adds no round.
TEST_P(ProcessAgreement, CheckAddsNoRound) {
  const int size = GetParam();
  RunProcessRanks(size, [size](int rank) {
    auto comm = MakeProcessComm(rank, size, "rounds");
    std::vector<int32_t> in(size * 4, rank + 1), out(size * 4, -1);
    std::vector<int64_t> counts(size, 4), displs(size);
    for (int r = 0; r < size; ++r) displs[r] = 4 * r;
    const auto calls = [&](bool checked) {
      std::vector<uint64_t> rounds;
      auto run = [&](const char* name, auto&& call) {
        const uint64_t before = comm->Rounds();
        if (checked) comm->Agree(Signature(name, 4));
        call();
        rounds.push_back(comm->Rounds() - before);
      };
      run("AllReduce",
          [&] { comm->AllReduce(in.data(), out.data(), 4, ACL_INT32, ReduceOp::kSum); });
      run("AllToAllV", [&] {
        comm->AllToAllV(in.data(), counts.data(), displs.data(), out.data(), counts.data(),
                        displs.data(), ACL_INT32);
      });
      run("AllGatherV", [&] {
        comm->AllGatherV(in.data(), 4, out.data(), counts.data(), displs.data(), ACL_INT32);
      });
      run("Broadcast", [&] { comm->Broadcast(out.data(), 4, ACL_INT32, 0); });
      return rounds;
    };
    const std::vector<uint64_t> unchecked = calls(false);
    EXPECT_EQ(calls(true), unchecked) << "rounds per call with the check differ from without";
    EXPECT_EQ(unchecked, std::vector<uint64_t>(4, size == 1 ? 0 : 1));
  });
}

/// Rank 1 expects a different piece from rank 0: every rank throws the same message, no output
/// element is written on any rank (its own piece included), and the next call works.
TEST_P(ProcessAgreement, DisagreementFailsEveryRankBeforeAnyOutput) {
  const int size = GetParam();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  RunProcessRanks(size, [size](int rank) {
    auto comm = MakeProcessComm(rank, size, "disagree");
    std::vector<int64_t> sendCounts(size, 3), recvCounts(size, 3), displs(size);
    for (int r = 0; r < size; ++r) displs[r] = 3 * r;
    if (rank == 1) recvCounts[0] = 2;
    std::vector<int32_t> in(3 * size, rank), out(3 * size, -7);
    CallSignature s = Signature("AllToAllV", -1);
    s.sendCounts = sendCounts;
    s.recvCounts = recvCounts;
    std::string message;
    try {
      comm->Agree(s);
      comm->AllToAllV(in.data(), sendCounts.data(), displs.data(), out.data(), recvCounts.data(),
                      displs.data(), ACL_INT32);
      ADD_FAILURE() << "rank " << rank << " got no ERROR_RANK_MISMATCH";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH);
      message = e.what();
    }
    EXPECT_THAT(message, HasSubstr("rank 0 sends 3 elements to rank 1"));
    EXPECT_THAT(message, HasSubstr("rank 1 expects 2 from rank 0"));
    EXPECT_EQ(out, std::vector<int32_t>(3 * size, -7)) << "rank " << rank << " wrote output";
    EXPECT_FALSE(comm->Broken());
    // Same message on every rank, and the communicator still works.
    std::vector<char> mine(200, 0), all(200 * size);
    message.copy(mine.data(), mine.size() - 1);
    comm->AllGatherBytes(mine.data(), all.data(), mine.size());
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(std::string(all.data() + 200 * r), std::string(mine.data())) << "rank " << r;
    }
  });
}

/// Rank 1 calls the primitive without the check while the others checked: they name rank 1.
TEST_P(ProcessAgreement, UncheckedRankIsNamed) {
  const int size = GetParam();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  RunProcessRanks(size, [size](int rank) {
    auto comm = MakeProcessComm(rank, size, "unchecked");
    int32_t in = rank, out = 0;
    if (rank != 1) {
      try {
        comm->Agree(Signature("AllReduce", 1));
        comm->AllReduce(&in, &out, 1, ACL_INT32, ReduceOp::kSum);
        ADD_FAILURE() << "rank " << rank << " got no ERROR_RANK_MISMATCH";
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH);
        EXPECT_THAT(e.what(), HasSubstr("rank 1 (pid"));
        EXPECT_THAT(e.what(), HasSubstr("without the cross-rank check"));
      }
    } else {
      comm->AllReduce(&in, &out, 1, ACL_INT32, ReduceOp::kSum);
    }
    comm->Barrier();
  });
}

/// A rank that failed its own checks (failedStatus) reaches peers that are inside their call.
TEST_P(ProcessAgreement, LocalFailureMeetsThePeersFirstRound) {
  const int size = GetParam();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  RunProcessRanks(size, [size](int rank) {
    auto comm = MakeProcessComm(rank, size, "failed");
    std::vector<int32_t> in(8, rank), out(8, -7);
    CallSignature s = Signature("AllReduce", 8);
    if (rank == size - 1) s.failedStatus = ERROR_INVALID_PARAM;
    try {
      comm->Agree(s);
      comm->AllReduce(in.data(), out.data(), 8, ACL_INT32, ReduceOp::kSum);
      ADD_FAILURE() << "rank " << rank << " got no ERROR_RANK_MISMATCH";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH);
      EXPECT_THAT(e.what(), HasSubstr(Concat("rank ", size - 1, " failed its own checks")));
    }
    EXPECT_EQ(out, std::vector<int32_t>(8, -7));
    comm->Barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessAgreement, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "R" + std::to_string(info.param);
                         });

/// Records ride in the segment up to kMaxCarriedAgreementRanks; beyond, R^2 counts would bloat
/// the control area and Agree() exchanges them as its own round.
TEST(ProcessAgreementLayout, RecordsUpToTheRankLimit) {
  const auto limit = shm::kMaxCarriedAgreementRanks;
  const auto at = shm::SegmentLayout::For(limit, 1 << 20);
  EXPECT_GE(at.recordStride, sizeof(uint64_t) + AgreementRecordBytes(limit));
  EXPECT_EQ(at.recordStride % shm::kControlStride, 0u);
  EXPECT_LE(at.recordOffset + 2 * limit * at.recordStride, at.slotOffset);
  EXPECT_EQ(shm::SegmentLayout::For(limit + 1, 1 << 20).recordStride, 0u);
}

}  // namespace
}  // namespace testing
}  // namespace collops
