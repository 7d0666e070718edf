// A peer that scribbles on the shared segment (a bug, a stray write, a hostile process of the same
// user): every offset, length and string another rank wrote is checked before use, so its peers
// end with an error naming it, never a crash or a read past the field.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collops/signature.h"
#include "collops/status.h"
#include "collops/topology.h"
#include "core/comm/shm/process_segment.h"
#include "op_harness.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace {

using testing::CaughtStatus;
using testing::Contains;
using testing::MakeProcessComm;
using testing::ProcessRanksOptions;
using testing::RunProcessRanks;

/// Waits (up to 30 s) until some rank has published an abort record: the scribbler stays alive
/// until its victim has failed, so the victim's error is about the record, not a lost peer.
void AwaitAbort(const shm::Segment& segment) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (segment.Header().abort.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NE(segment.Header().abort.load(), 0u) << "the receiver never failed";
}

/// Rank 0 announces a message to rank 1 by writing its send record by hand, with the staging
/// region (offset, chunk bytes) given; rank 1 receives it and must fail naming rank 0.
void ExpectStagingRecordRefused(uint64_t stagingOffset, uint64_t chunkBytes) {
  constexpr size_t kCount = 16;
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "10";
  options.env["COLLOPS_SHM_CMA_BYTES"] = "0";
  RunProcessRanks(
      2,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, 2, "scribbled-send");
        const shm::Segment& segment = comm->SharedSegment();
        if (rank == 0) {
          shm::PairSide& side = segment.Pair(0, 1).send;
          side.count[1] = kCount;
          side.dtype[1] = ACL_FLOAT;
          side.stagingHalf[1] = 0;
          side.stagingOffset[1] = stagingOffset;
          side.chunkBytes[1] = chunkBytes;
          side.address[1] = 0;
          side.chunks.store(1, std::memory_order_release);  // "its first chunk is there"
          side.messages.store(1, std::memory_order_release);
          segment.Rank(1).bell.Notify();
          AwaitAbort(segment);
          return;
        }
        std::vector<float> buffer(kCount);
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { comm->Recv(buffer.data(), kCount, ACL_FLOAT, 0); }, &message),
                  ERROR_COMM_FAIL)
            << message;
        EXPECT_TRUE(Contains(message, "rank 0 (pid ")) << message;
        EXPECT_TRUE(Contains(message, "outside the")) << message;
      },
      options);
}

TEST(ProcessScribbledSegment, AWildStagingOffsetIsAnErrorNamingTheSender) {
  ExpectStagingRecordRefused(uint64_t{1} << 40, 4096);
}

TEST(ProcessScribbledSegment, ChunksReachingPastTheSlotAreAnErrorNamingTheSender) {
  ExpectStagingRecordRefused(0, uint64_t{1} << 62);
}

TEST(ProcessScribbledSegment, AnEmptyChunkIsAnErrorNotAStall) { ExpectStagingRecordRefused(0, 0); }

TEST(ProcessScribbledSegment, AnAbortRecordNamingNoRankIsAnErrorNotALookup) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "10";
  RunProcessRanks(
      2,
      [&](int rank) {
        // Rank 1 may still be in the last round of its creation when rank 0 scribbles, and that
        // round checks the record too: it fails there or in the barrier, the same way.
        std::string message;
        const Status status = CaughtStatus(
            [&] {
              auto comm = MakeProcessComm(rank, 2, "scribbled-abort");
              const shm::Segment& segment = comm->SharedSegment();
              if (rank == 0) {
                segment.Header().abort.store(
                    shm::PackAbort({0, 1000, static_cast<int32_t>(ERROR_PEER_LOST)}));
              }
              comm->Barrier();
            },
            &message);
        EXPECT_EQ(status, ERROR_COMM_FAIL) << message;
        EXPECT_TRUE(Contains(message, "names no rank of 2")) << message;
      },
      options);
}

// Rank 0's policy lives in the segment header. A rank that writes over it between two ranks'
// choices of algorithm for one AllReduce must not make them run different algorithms (wrong sums
// reported as a success): each rank keeps the policy it read at creation. Rank 1 picks its
// algorithm and waits in its first round; rank 0 then raises the header's one-shot limit above
// the call's bytes and makes the call.
TEST(ProcessScribbledSegment, APolicyWrittenOverAfterCreationChangesNoRanksAlgorithm) {
  constexpr size_t kCount = 64 << 10;  // 256 KiB of float32: above the one-shot limits
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "10";
  options.env["COLLOPS_SHM_CMA_BYTES"] = "0";  // staged algorithms only
  RunProcessRanks(
      2,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, 2, "scribbled-policy");
        const shm::Segment& segment = comm->SharedSegment();
        if (rank == 0) {
          const uint64_t round = comm->Rounds() + 1;
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
          while (segment.Rank(1).posted.load() < round &&
                 std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
          }
          ASSERT_GE(segment.Rank(1).posted.load(), round) << "rank 1 never made its call";
          segment.Header().policy.oneShotMaxBytes = ~uint64_t{0};
        }
        std::vector<float> in(kCount), out(kCount, -1);
        for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>((rank + 1) * (i % 97));
        std::string message;
        ASSERT_EQ(
            CaughtStatus(
                [&] { comm->AllReduce(in.data(), out.data(), kCount, ACL_FLOAT, ReduceOp::kSum); },
                &message),
            NO_ERROR)
            << message;
        for (size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(out[i], static_cast<float>(3 * (i % 97))) << "element " << i;
        }
      },
      options);
}

TEST(PeerRecordText, AnUnterminatedOpNameIsReadWithinItsRecord) {
  const int size = 2;
  const size_t stride = AgreementRecordBytes(size);
  std::vector<uint8_t> records(2 * stride);
  CallSignature first, second;
  first.opName = "AllReduce";
  second.opName = "Broadcast";
  EncodeAgreement(first, size, records.data());
  EncodeAgreement(second, size, records.data() + stride);
  // The name field is the record's first 48 bytes; the hash after it is not text.
  std::memset(records.data() + stride, 'X', 47);
  records[stride + 47] = static_cast<uint8_t>(0xff);
  std::string message;
  EXPECT_EQ(
      CaughtStatus([&] { CheckAgreementRecords(records.data(), stride, size, first); }, &message),
      ERROR_RANK_MISMATCH);
  const std::string expected = "rank 1 runs " + std::string(47, 'X') + "\\xFF";
  ASSERT_GE(message.size(), expected.size()) << message;
  EXPECT_EQ(message.substr(message.size() - expected.size()), expected) << message;
}

TEST(PeerRecordText, AnUnterminatedHostIdentityIsReadWithinItsRecord) {
  std::string records(2 * kHostIdentityRecordBytes, '\0');
  records.replace(0, kHostIdentityRecordBytes, kHostIdentityRecordBytes, 'A');
  records[kHostIdentityRecordBytes - 1] = '\n';
  records.replace(kHostIdentityRecordBytes, 6, "B@host");
  const std::vector<std::string> identities = HostIdentitiesFromRecords(records.data(), 2);
  ASSERT_EQ(identities.size(), 2u);
  EXPECT_EQ(identities[0], std::string(kHostIdentityRecordBytes - 1, 'A') + "\\x0A");
  EXPECT_EQ(identities[1], "B@host");
  EXPECT_EQ(HostIdentitiesFromRecords(HostIdentityRecord("C@c").data(), 1),
            std::vector<std::string>{"C@c"});
}

TEST(SegmentHeader, SlotSizesThatWrapTheLayoutAroundAreRefused) {
  // A header whose slot size, times the rank count, wraps around to the segment's real size:
  // unchecked, the slots would lie 2^63 bytes away from the mapping.
  const uint64_t slotBytes = 1 << 20;
  const shm::SegmentLayout layout = shm::SegmentLayout::For(2, slotBytes);
  shm::UniqueFd fd(memfd_create("segment-peer-validation", MFD_CLOEXEC));
  ASSERT_TRUE(fd.Valid());
  ASSERT_EQ(ftruncate(fd.Get(), static_cast<off_t>(layout.totalBytes)), 0);
  shm::SegmentHeader header;
  header.magic = shm::kSegmentMagic;
  header.version = shm::kSegmentVersion;
  header.rankSize = 2;
  header.slotBytes = slotBytes + (uint64_t{1} << 63);
  header.totalBytes = layout.totalBytes;
  ASSERT_EQ(shm::SegmentLayout::For(2, header.slotBytes).totalBytes, layout.totalBytes);
  ASSERT_EQ(pwrite(fd.Get(), &header, sizeof header, 0), static_cast<ssize_t>(sizeof header));
  std::string message;
  EXPECT_EQ(CaughtStatus([&] { shm::Segment::Attach(fd.Get(), 2); }, &message), ERROR_COMM_FAIL)
      << message;
  EXPECT_TRUE(Contains(message, "memory corruption")) << message;
}

}  // namespace
}  // namespace collops
