#include "core/comm/shm/process_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <utility>

#include "collops/environment.h"
#include "collops/signature.h"
#include "collops/status.h"

namespace collops {
namespace shm {
namespace {

constexpr uint64_t kPage = 4096;
// The largest COLLOPS_SHM_BYTES and COLLOPS_SHM_HEAP_BYTES (collops/environment.h), which a
// header a peer wrote must not exceed either.
constexpr uint64_t kMaxSlotBytes = 1ULL << 30;
constexpr uint64_t kMaxHeapBytes = 1ULL << 40;

uint64_t RoundUp(uint64_t value, uint64_t to) { return (value + to - 1) / to * to; }

/// Faults the first `bytes` of a mapping in now, not inside the first timed collective (the
/// heaps after them stay sparse, so MAP_POPULATE cannot be used).
void Populate(uint8_t* base, uint64_t bytes) {
  auto* at = reinterpret_cast<volatile uint8_t*>(base);
  for (uint64_t offset = 0; offset < bytes; offset += kPage) (void)at[offset];
}

}  // namespace

SegmentLayout SegmentLayout::For(int rankSize, uint64_t slotBytes, uint64_t heapBytes) {
  SegmentLayout layout;
  layout.rankSize = rankSize;
  layout.slotBytes = slotBytes;
  const uint64_t r = static_cast<uint64_t>(rankSize);
  layout.rankOffset = RoundUp(sizeof(SegmentHeader), kControlStride);
  layout.pairOffset = layout.rankOffset + r * sizeof(RankControl);
  layout.recordOffset = layout.pairOffset + r * r * sizeof(PairControl);
  if (rankSize <= kMaxCarriedAgreementRanks) {
    layout.recordStride =
        RoundUp(sizeof(uint64_t) + AgreementRecordBytes(rankSize), kControlStride);
  }
  layout.directOffset = layout.recordOffset + 2 * r * layout.recordStride;
  if (rankSize <= kMaxCarriedAgreementRanks) {
    layout.heapBytes = heapBytes;
    layout.directStride = RoundUp(3 * r * sizeof(int64_t), kControlStride);
  }
  layout.slotOffset = RoundUp(layout.directOffset + 2 * r * layout.directStride, kPage);
  layout.heapOffset = layout.slotOffset + r * slotBytes;
  layout.totalBytes = layout.heapOffset + r * layout.heapBytes;
  return layout;
}

uint64_t SlotBytesFromEnv(int rankSize) {
  const uint64_t bytes = KnobInteger("COLLOPS_SHM_BYTES", kDefaultSlotBytes);
  // Each half must give every rank at least one 64-byte region (the per-destination layout of
  // the all-to-all and reduce-scatter rounds), and halves stay page aligned.
  const uint64_t minimum = RoundUp(2 * 64 * static_cast<uint64_t>(rankSize), 2 * kPage);
  return bytes < minimum ? minimum : RoundUp(bytes, 2 * kPage);
}

uint64_t HeapBytesFromEnv() {
  return RoundUp(KnobInteger("COLLOPS_SHM_HEAP_BYTES", kDefaultHeapBytes), kPage);
}

uint64_t HeapCacheBytesFromEnv() {
  return KnobInteger("COLLOPS_SHM_HEAP_CACHE_BYTES", kDefaultHeapCacheBytes);
}

uint64_t AvailableHostMemory() {
  std::ifstream info("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (info >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib << 10;
  }
  return 0;
}

void CheckSegmentFits(const SegmentLayout& layout, uint64_t availableBytes) {
  if (availableBytes == 0 || layout.FixedBytes() <= availableBytes) return;
  const uint64_t r = static_cast<uint64_t>(layout.rankSize);
  Fail(ERROR_OUT_OF_HOST_MEMORY, "lccl: the shared segment for ", layout.rankSize, " ranks needs ",
       layout.FixedBytes(), " bytes of memory from the start (", r, " x ", layout.slotBytes,
       " bytes of slots, COLLOPS_SHM_BYTES, plus ", layout.FixedBytes() - r * layout.slotBytes,
       " bytes of control blocks), more than the ", availableBytes,
       " bytes this host has available (MemAvailable); lower COLLOPS_SHM_BYTES, or check "
       "rankSize");
}

uint8_t* Segment::Map(int fd, uint64_t bytes, uint64_t populate) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    // Most of the segment is the ranks' sparse heaps: address space, not memory, which only an
    // address-space limit (ulimit -v) refuses.
    rlimit addressSpace{};
    const bool limited =
        getrlimit(RLIMIT_AS, &addressSpace) == 0 && addressSpace.rlim_cur != RLIM_INFINITY;
    Fail(err == ENOMEM ? ERROR_OUT_OF_HOST_MEMORY : ERROR_COMM_FAIL, "lccl: cannot map the ", bytes,
         "-byte shared segment: ", std::strerror(err),
         limited && err == ENOMEM
             ? Concat("; the address-space limit (ulimit -v) is ", addressSpace.rlim_cur,
                      " bytes: raise it, or lower COLLOPS_SHM_HEAP_BYTES (the ranks' shared "
                      "heaps, most of the segment; 0 = none) or COLLOPS_SHM_BYTES")
             : std::string());
  }
  madvise(base, bytes, MADV_HUGEPAGE);  // a hint; fine when transparent huge pages are off
  Populate(static_cast<uint8_t*>(base), populate);
  return static_cast<uint8_t*>(base);
}

Segment Segment::Create(const SegmentLayout& layout, UniqueFd* fd) {
  CheckSegmentFits(layout, AvailableHostMemory());
  UniqueFd memory(memfd_create("collops-lccl", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memory.Valid()) {
    Fail(ERROR_COMM_FAIL, "lccl: memfd_create failed: ", std::strerror(errno));
  }
  fchmod(memory.Get(), 0600);
  // Growing a file past RLIMIT_FSIZE (ulimit -f) raises SIGXFSZ, which kills the process; the
  // segment's size counts its sparse heaps (R x COLLOPS_SHM_HEAP_BYTES) as well.
  rlimit fileSize{};
  if (getrlimit(RLIMIT_FSIZE, &fileSize) == 0 && fileSize.rlim_cur != RLIM_INFINITY &&
      layout.totalBytes > fileSize.rlim_cur) {
    Fail(ERROR_OUT_OF_HOST_MEMORY, "lccl: the shared segment of ", layout.totalBytes, " bytes for ",
         layout.rankSize, " ranks exceeds the file size limit (ulimit -f) of ", fileSize.rlim_cur,
         " bytes; raise it, or lower COLLOPS_SHM_HEAP_BYTES (the ranks' shared "
         "heaps, most of the size) or COLLOPS_SHM_BYTES");
  }
  // fallocate, not ftruncate alone: a sparse file would SIGBUS on first touch once tmpfs or the
  // memory cgroup runs dry; allocating now turns that into a clear error here. The heaps stay
  // sparse: a rank allocates its heap pages when it hands them out (process_heap.h).
  int err = ftruncate(memory.Get(), static_cast<off_t>(layout.totalBytes)) == 0 ? 0 : errno;
  if (err == 0) err = posix_fallocate(memory.Get(), 0, static_cast<off_t>(layout.FixedBytes()));
  if (err != 0) {
    Fail(err == ENOSPC || err == ENOMEM ? ERROR_OUT_OF_HOST_MEMORY : ERROR_COMM_FAIL,
         "lccl: cannot allocate ", layout.totalBytes, " bytes of shared memory for ",
         layout.rankSize, " ranks (", layout.slotBytes,
         " per rank, COLLOPS_SHM_BYTES): ", std::strerror(err));
  }
  fcntl(memory.Get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);

  Segment segment;
  segment.layout_ = layout;
  segment.base_ = Map(memory.Get(), layout.totalBytes, layout.FixedBytes());
  auto* header = new (segment.base_) SegmentHeader;
  for (int r = 0; r < layout.rankSize; ++r) new (&segment.Rank(r)) RankControl;
  for (int s = 0; s < layout.rankSize; ++s) {
    for (int d = 0; d < layout.rankSize; ++d) new (&segment.Pair(s, d)) PairControl;
  }
  header->version = kSegmentVersion;
  header->rankSize = layout.rankSize;
  header->slotBytes = layout.slotBytes;
  header->heapBytes = layout.heapBytes;
  header->totalBytes = layout.totalBytes;
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kSegmentMagic;
  *fd = std::move(memory);
  return segment;
}

Segment Segment::Attach(int fd, int rankSize) {
  struct stat st{};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(SegmentHeader))) {
    Fail(ERROR_COMM_FAIL, "lccl: the shared segment received from rank 0 is unusable");
  }
  Segment segment;
  segment.base_ = Map(fd, static_cast<uint64_t>(st.st_size), 0);
  segment.layout_.totalBytes = static_cast<uint64_t>(st.st_size);
  const SegmentHeader& header = segment.Header();
  if (header.magic != kSegmentMagic || header.version != kSegmentVersion ||
      header.rankSize != rankSize) {
    Fail(ERROR_COMM_FAIL, "lccl: the shared segment from rank 0 has version ", header.version,
         " and ", header.rankSize, " ranks; this rank expects version ", kSegmentVersion, " and ",
         rankSize, " ranks (mixed collops builds?)");
  }
  // Bounded before the layout multiplies them by rankSize: a value written over could otherwise
  // wrap the arithmetic around to the real size and point the slots outside the mapping.
  if (header.slotBytes == 0 || header.slotBytes > kMaxSlotBytes ||
      header.slotBytes % (2 * kPage) != 0 || header.heapBytes > kMaxHeapBytes ||
      header.heapBytes % kPage != 0) {
    Fail(ERROR_COMM_FAIL, "lccl: the shared segment from rank 0 has slots of ", header.slotBytes,
         " bytes and heaps of ", header.heapBytes, " bytes, outside what any rank 0 creates ",
         "(memory corruption?)");
  }
  const SegmentLayout layout = SegmentLayout::For(rankSize, header.slotBytes, header.heapBytes);
  if (layout.totalBytes != static_cast<uint64_t>(st.st_size)) {
    Fail(ERROR_COMM_FAIL, "lccl: the shared segment from rank 0 has ", st.st_size,
         " bytes, its header implies ", layout.totalBytes);
  }
  segment.layout_ = layout;
  Populate(segment.base_, layout.FixedBytes());
  return segment;
}

Segment::Segment(Segment&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), layout_(other.layout_) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, layout_.totalBytes);
    base_ = std::exchange(other.base_, nullptr);
    layout_ = other.layout_;
  }
  return *this;
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, layout_.totalBytes);
}

}  // namespace shm
}  // namespace collops
