// libFuzzer harness: the lccl segment's header and per-rank records as a peer would write them.
//
// Every rank reads what its peers wrote into the shared segment, and a peer with a bug (or a
// stray write) may have written anything. The input is cut into such records, and each goes
// through the code the engine checks it with, which must refuse it with an Error or accept it
// only when using it stays inside the memory it names; the harness then uses it as the engine
// does (touching every byte an accepted region names), so AddressSanitizer sees any access
// outside it:
//   - rank 0's header, in a memfd of a fuzzed size, mapped by Segment::Attach as a joining rank
//     maps the one it receives;
//   - a send record's staging region inside a slot half (StagedRegionFits);
//   - a published heap range (HeapRangeFits);
//   - the abort record (AbortNamesRanks, then the rank lookups ThrowIfAborted makes);
//   - the agreement records of every rank (CheckAgreementRecords) and host identity records
//     (HostIdentitiesFromRecords);
//   - a send announcement's count and dtype in the mismatch message.
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "collops/signature.h"
#include "collops/status.h"
#include "collops/topology.h"
#include "core/comm/shm/peer_checks.h"
#include "core/comm/shm/process_fd.h"
#include "core/comm/shm/process_segment.h"

namespace {

using namespace collops;
using namespace collops::shm;

constexpr uint64_t kPage = 4096;
/// Segments up to this many ranks: the fixed part (R^2 pair blocks) is faulted in by Attach.
constexpr int kMaxRanks = 64;
/// Segment files up to this size.
constexpr uint64_t kMaxFileBytes = uint64_t{256} << 20;

/// Reads one byte per page of [p, p + bytes): faults if the range is not all mapped.
void TouchPages(const uint8_t* p, uint64_t bytes) {
  volatile uint8_t sink = 0;
  for (uint64_t at = 0; at < bytes; at += kPage) sink = sink + p[at];
  if (bytes != 0) sink = sink + p[bytes - 1];
}

/// Rank 0's header as a peer could have left it, in a memfd of a size that either matches what
/// the header implies or is fuzzed too; Attach must refuse it or map a layout inside the file.
void AttachHeader(FuzzedDataProvider& in, int rankSize) {
  SegmentHeader header;
  const std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(sizeof header);
  if (!bytes.empty()) std::memcpy(static_cast<void*>(&header), bytes.data(), bytes.size());
  // Mostly a plausible header, so the checks past the magic and version are reached.
  if (in.ConsumeBool()) {
    header.magic = kSegmentMagic;
    header.version = kSegmentVersion;
    header.rankSize = rankSize;
  }
  if (in.ConsumeBool()) header.slotBytes = in.ConsumeIntegralInRange<uint64_t>(1, 64) * 2 * kPage;
  if (in.ConsumeBool()) header.heapBytes = in.ConsumeIntegralInRange<uint64_t>(0, 64) * kPage;
  // Attach faults in everything before the heaps (the slots too), as a joining rank does: files
  // are kept to what a test machine holds many times over.
  uint64_t fileBytes = in.ConsumeIntegralInRange<uint64_t>(0, kMaxFileBytes);
  if (in.ConsumeBool() && header.slotBytes <= kMaxFileBytes && header.heapBytes <= kMaxFileBytes) {
    const uint64_t implied =
        SegmentLayout::For(rankSize, header.slotBytes, header.heapBytes).totalBytes;
    if (implied <= kMaxFileBytes) fileBytes = implied;
  }
  if (fileBytes < sizeof header) fileBytes = sizeof header;
  UniqueFd fd(memfd_create("collops-fuzz-segment", MFD_CLOEXEC));
  if (!fd.Valid() || ftruncate(fd.Get(), static_cast<off_t>(fileBytes)) != 0 ||
      pwrite(fd.Get(), &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
    return;
  }
  try {
    const Segment segment = Segment::Attach(fd.Get(), rankSize);
    // Accepted: every block the layout names lies inside the mapping.
    const SegmentLayout& layout = segment.Layout();
    if (layout.totalBytes != fileBytes) __builtin_trap();
    TouchPages(reinterpret_cast<const uint8_t*>(&segment.Header()), layout.FixedBytes());
    for (int r = 0; r < rankSize; ++r) {
      const uint8_t* half = segment.Half(r, 1);
      TouchPages(half + segment.HalfBytes() - 1, 1);
      if (segment.HasHeaps()) TouchPages(segment.Heap(r) + segment.HeapBytes() - 1, 1);
    }
  } catch (const Error&) {
  }
}

/// A send record's staging region in a slot half of a fuzzed size, used as ReceiveStaged and the
/// chunk copies after it do.
void StagedRegion(FuzzedDataProvider& in) {
  const uint64_t halfBytes = in.ConsumeIntegralInRange<uint64_t>(1, 16) * kPage;
  // Near the half's bounds or anywhere at all.
  const auto value = [&] {
    return in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, halfBytes + 1)
                            : in.ConsumeIntegral<uint64_t>();
  };
  const uint64_t offset = value();
  const uint64_t chunkBytes = value();
  if (!StagedRegionFits(offset, chunkBytes, halfBytes)) return;
  std::vector<uint8_t> half(halfBytes);
  uint8_t* staging = half.data() + offset;
  std::memset(staging, 1, chunkBytes);               // chunk buffer 0
  std::memset(staging + chunkBytes, 2, chunkBytes);  // chunk buffer 1
}

/// A heap range a peer published, used as PeerHeap's callers do.
void HeapRange(FuzzedDataProvider& in) {
  const uint64_t heapBytes = in.ConsumeIntegralInRange<uint64_t>(0, 16) * kPage;
  const int64_t offset = in.ConsumeBool()
                             ? in.ConsumeIntegralInRange<int64_t>(-1, int64_t{2} * kPage + 1)
                             : in.ConsumeIntegral<int64_t>();
  const uint64_t bytes = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, 2 * kPage + 1)
                                          : in.ConsumeIntegral<uint64_t>();
  if (!HeapRangeFits(offset, bytes, heapBytes)) return;
  std::vector<uint8_t> heap(heapBytes);
  if (bytes != 0) std::memset(heap.data() + offset, 3, bytes);
}

/// The abort record, looked up as ThrowIfAborted does once it is accepted.
void Abort(FuzzedDataProvider& in, int rankSize) {
  const AbortRecord abort = UnpackAbort(in.ConsumeIntegral<uint64_t>());
  if (!AbortNamesRanks(abort, rankSize)) return;
  std::vector<int> pids(rankSize, 1);
  const int culprit = abort.culprit >= 0 ? abort.culprit : 0;
  volatile int sink = pids[abort.reporter] + pids[culprit];
  (void)sink;
}

/// Every rank's agreement record, checked as the first round of a call checks them, against a
/// signature of this rank's.
void AgreementRecords(FuzzedDataProvider& in, int rankSize) {
  const size_t stride = AgreementRecordBytes(rankSize);
  std::vector<uint8_t> records = in.ConsumeBytes<uint8_t>(stride * rankSize);
  records.resize(stride * rankSize);
  records.shrink_to_fit();  // exactly the records: a read past them is a heap overflow
  CallSignature mine;
  mine.opName = "AllToAllV";
  if (in.ConsumeBool()) {
    mine.sendCounts.assign(rankSize, in.ConsumeIntegral<int64_t>());
    mine.recvCounts.assign(rankSize, in.ConsumeIntegral<int64_t>());
  }
  try {
    CheckAgreementRecords(records.data(), stride, rankSize, mine);
    for (int j = 0; j < rankSize; ++j) RecordedCount(records.data(), rankSize, true, j);
  } catch (const Error&) {
  }
}

void IdentityRecords(FuzzedDataProvider& in, int rankSize) {
  std::vector<char> records = in.ConsumeBytes<char>(kHostIdentityRecordBytes * rankSize);
  records.resize(kHostIdentityRecordBytes * rankSize);
  records.shrink_to_fit();
  HostIdentitiesFromRecords(records.data(), rankSize);
}

void Announcement(FuzzedDataProvider& in) {
  const int64_t count = in.ConsumeIntegral<int64_t>();
  const auto dtype = static_cast<DataType>(in.ConsumeIntegral<int32_t>());
  SendRecvMismatchMessage("lccl", 0, count, dtype, 1, 4, ACL_FLOAT);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const int rankSize = in.ConsumeIntegralInRange<int>(1, kMaxRanks);
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:
      AttachHeader(in, rankSize);
      break;
    case 1:
      StagedRegion(in);
      break;
    case 2:
      HeapRange(in);
      break;
    case 3:
      Abort(in, rankSize);
      break;
    case 4:
      AgreementRecords(in, rankSize);
      break;
    case 5:
      IdentityRecords(in, rankSize);
      break;
    default:
      Announcement(in);
      break;
  }
  return 0;
}
