// Fault tests of the multi-process lccl communicator under resource limits and impossible sizes:
// ulimit -f, -n and -v below what a rank needs, an impossible AllocateShared and a bad
// COLLOPS_SHM_BYTES. Each is a clear error naming the limit or the knob, never a crash.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "process_fault_test_util.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace {

using testing::CaughtStatus;
using testing::Contains;
using testing::MakeLcclComm;
using testing::ProcessRanksOptions;
using testing::RunProcessRanks;
using testing::SharedArray;

/// Growing the segment (its size counts the sparse heaps, R x 1 GiB by default) past `ulimit -f`
/// is a clear error naming the limit and the knob: the kernel would kill rank 0 with SIGXFSZ.
TEST(ProcessFault, AFileSizeLimitBelowTheSegmentIsAClearError) {
  RunProcessRanks(1, [](int) {
    const rlimit limit{1 << 20, 1 << 20};
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
    std::string message;
    EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(0, 1, "file-size-limit"); }, &message),
              ERROR_OUT_OF_HOST_MEMORY)
        << message;
    EXPECT_TRUE(Contains(message, "exceeds the file size limit (ulimit -f) of 1048576 bytes"))
        << message;
    EXPECT_TRUE(Contains(message, "COLLOPS_SHM_HEAP_BYTES")) << message;
  });
}

/// Sanitizer runtimes open descriptors of their own while checking (UBSan's vptr check reads
/// memory through a pipe), and report a full table as a fault of the code under test.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizersNeedDescriptors = true;
#else
constexpr bool kSanitizersNeedDescriptors = false;
#endif

/// Lowers this process's open-file limit to just above its highest open descriptor and fills
/// every free slot but the `spare` highest: the next `spare` descriptors it opens succeed, the
/// one after fails (EMFILE). Returns the fillers, for the caller to close.
std::vector<int> FillDescriptorTableBut(int spare) {
  int highest = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) highest = fd;
  }
  const rlimit limit{static_cast<rlim_t>(highest + 1 + spare),
                     static_cast<rlim_t>(highest + 1 + spare)};
  EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0) << std::strerror(errno);
  std::vector<int> fillers;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(fd);
  EXPECT_GE(fillers.size(), static_cast<size_t>(spare));
  for (int i = 0; i < spare && !fillers.empty(); ++i) {
    close(fillers.back());
    fillers.pop_back();
  }
  return fillers;
}

/// A rank at its open-file limit fails at once, saying why: the kernel drops the descriptors rank 0
/// passes it, so a retry cannot succeed and would only blame rank 0 after the timeout.
TEST(ProcessFault, ARankAtItsOpenFileLimitIsToldSo) {
  if (kSanitizersNeedDescriptors) GTEST_SKIP() << "needs a build without sanitizers";
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "20";
  RunProcessRanks(
      2,
      [](int rank) {
        const auto start = std::chrono::steady_clock::now();
        std::vector<int> fillers;
        // Two slots free, which the rank's claim and rendezvous sockets get: the segment rank 0
        // passes finds no room.
        if (rank == 1) fillers = FillDescriptorTableBut(2);
        std::string message;
        const Status status = CaughtStatus([&] { MakeLcclComm(rank, 2, "fd-limit"); }, &message);
        for (int fd : fillers) close(fd);
        if (rank == 1) {
          EXPECT_EQ(status, ERROR_COMM_FAIL) << message;
          EXPECT_TRUE(Contains(message, "rank 1 could not take the descriptors rank 0")) << message;
          EXPECT_TRUE(Contains(message, "Too many open files; RLIMIT_NOFILE = ")) << message;
        } else {
          EXPECT_NE(status, NO_ERROR) << "rank 1 never had its communicator";
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      },
      options);
}

/// Rank 0 at its open-file limit during the rendezvous fails at once naming RLIMIT_NOFILE, and
/// answers the rank that connected with the same error (through a descriptor kept in reserve):
/// its accept fails (EMFILE) while the connection stays queued, so retrying would spin until the
/// timeout with each rank blaming the other.
TEST(ProcessFault, RankZeroAtItsOpenFileLimitFailsAtOnceAndTellsThePeers) {
  if (kSanitizersNeedDescriptors) GTEST_SKIP() << "needs a build without sanitizers";
  pid_t* rankZeroPid = SharedArray<pid_t>(1);
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "20";
  RunProcessRanks(
      2,
      [&](int rank) {
        const auto start = std::chrono::steady_clock::now();
        std::vector<int> fillers;
        if (rank == 0) {
          *rankZeroPid = getpid();
          // Room for the claim socket, the reserve and a pidfd: none for the segment, nor for
          // accepting rank 1.
          fillers = FillDescriptorTableBut(3);
        }
        std::string message;
        const Status status =
            CaughtStatus([&] { MakeLcclComm(rank, 2, "fd-limit-root"); }, &message);
        for (int fd : fillers) close(fd);
        EXPECT_EQ(status, ERROR_COMM_FAIL) << message;
        EXPECT_TRUE(Contains(message, Concat("rank 0 (pid ", *rankZeroPid,
                                             ") ran out of file descriptors during the "
                                             "rendezvous: Too many open files (RLIMIT_NOFILE = ")))
            << message;
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      },
      options);
  munmap(rankZeroPid, sizeof(pid_t));
}

/// Under an address-space limit (ulimit -v) even a 1 KiB AllReduce failed with "cannot map",
/// naming neither the limit nor the sparse heaps that take most of the segment's addresses.
TEST(ProcessFault, AnAddressSpaceLimitBelowTheSegmentNamesTheLimitAndTheHeaps) {
  RunProcessRanks(1, [](int) {
    std::ifstream status("/proc/self/status");
    std::string line;
    uint64_t used = 0;
    while (std::getline(status, line)) {
      if (line.rfind("VmSize:", 0) == 0) used = std::stoull(line.substr(7)) * 1024;
    }
    ASSERT_GT(used, 0u);
    const rlim_t room = used + (rlim_t{256} << 20);  // well below the 1 GiB heap
    const rlimit limit{room, room};
    ASSERT_EQ(setrlimit(RLIMIT_AS, &limit), 0);
    std::string message;
    EXPECT_EQ(CaughtStatus([] { MakeLcclComm(0, 1, "address-space-limit"); }, &message),
              ERROR_OUT_OF_HOST_MEMORY);
    EXPECT_TRUE(Contains(message, Concat("the address-space limit (ulimit -v) is ", room)))
        << message;
    EXPECT_TRUE(Contains(message, "COLLOPS_SHM_HEAP_BYTES")) << message;
  });
}

/// A size whose rounding up to pages overflowed returned a zero-length block at the address the
/// next allocation got again: two buffers aliasing each other.
TEST(ProcessFault, AllocateSharedOfAnImpossibleSizeIsNull) {
  RunProcessRanks(1, [](int) {
    std::shared_ptr<Communicator> comm = MakeLcclComm(0, 1, "huge-allocation");
    EXPECT_EQ(comm->AllocateShared(SIZE_MAX), nullptr);
    EXPECT_EQ(comm->AllocateShared(SIZE_MAX - 100), nullptr);
    void* page = comm->AllocateShared(4096);
    EXPECT_NE(page, nullptr);
    comm->FreeShared(page);
  });
}

TEST(ProcessFault, InvalidBufferSizeFailsOnEveryRank) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BYTES"] = "lots";
  options.env["COLLOPS_TIMEOUT"] = "10";
  RunProcessRanks(
      3,
      [](int rank) {
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(rank, 3, "bad-size"); }, &message),
                  ERROR_INVALID_PARAM)
            << message;
        EXPECT_TRUE(Contains(message, "COLLOPS_SHM_BYTES=\"lots\"")) << message;
      },
      options);
}

}  // namespace
}  // namespace collops
