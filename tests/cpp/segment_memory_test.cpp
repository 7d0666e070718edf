// What the multi-process lccl segment costs the host, and when: nothing while rank 0 waits for its
// peers (a rankSize typo must not hold gigabytes for the whole timeout), never more than the host
// has, and per rank count exactly what docs/backends.md says.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/shm/process_segment.h"
#include "op_harness.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace {

using testing::CaughtStatus;
using testing::Contains;
using testing::ForkRanks;
using testing::MakeLcclComm;
using testing::ProcessRanksOptions;
using testing::RankOutcome;

/// Whether process `pid` holds a descriptor of an lccl segment (a memfd named collops-lccl).
bool HoldsSegment(pid_t pid) {
  const std::string dir = Concat("/proc/", pid, "/fd");
  DIR* fds = opendir(dir.c_str());
  if (fds == nullptr) return false;
  bool found = false;
  while (dirent* entry = readdir(fds)) {
    char target[256] = {};
    const std::string link = dir + "/" + entry->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) > 0 &&
        Contains(target, "memfd:collops-lccl")) {
      found = true;
    }
  }
  closedir(fds);
  return found;
}

TEST(ProcessRendezvousMemory, ALoneRankZeroHoldsNoSharedMemoryWhileItWaits) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "3";
  options.deadlineSeconds = 30;
  bool seen = false;
  int looks = 0;
  options.afterFork = [&](const std::vector<pid_t>& pids) {
    // Rank 0 waits 3 s for 3 peers that never come; look at it through most of that.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
    while (std::chrono::steady_clock::now() < until) {
      seen = seen || HoldsSegment(pids[0]);
      ++looks;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  const std::vector<RankOutcome> outcomes = ForkRanks(
      1,
      [](int) {
        std::string message;
        EXPECT_EQ(CaughtStatus([] { MakeLcclComm(0, 4, "alone"); }, &message), ERROR_TIMEOUT)
            << message;
        EXPECT_TRUE(Contains(message, "ranks 1, 2, 3 did not arrive")) << message;
      },
      options);
  for (const RankOutcome& outcome : outcomes) EXPECT_TRUE(outcome.Ok()) << outcome.Describe();
  EXPECT_GT(looks, 10);
  EXPECT_FALSE(seen) << "rank 0 created the segment for 4 ranks before any peer arrived";
}

TEST(SegmentMemory, ASegmentBeyondTheAvailableMemoryIsRefusedNamingTheKnob) {
  const shm::SegmentLayout layout = shm::SegmentLayout::For(512, shm::kDefaultSlotBytes);
  std::string message;
  EXPECT_EQ(CaughtStatus([&] { shm::CheckSegmentFits(layout, uint64_t{1} << 30); }, &message),
            ERROR_OUT_OF_HOST_MEMORY);
  EXPECT_TRUE(Contains(message, "for 512 ranks needs ")) << message;
  EXPECT_TRUE(Contains(message, "COLLOPS_SHM_BYTES")) << message;
  EXPECT_TRUE(Contains(message, "1073741824 bytes this host has available")) << message;
  EXPECT_EQ(CaughtStatus([&] { shm::CheckSegmentFits(layout, layout.FixedBytes()); }), NO_ERROR);
  EXPECT_EQ(CaughtStatus([&] { shm::CheckSegmentFits(layout, 0); }), NO_ERROR) << "unknown";
  EXPECT_GT(shm::AvailableHostMemory(), 0u) << "/proc/meminfo has no MemAvailable";
}

/// The rows of docs/backends.md's table of segment sizes: rank count -> the bytes it states as
/// allocated at creation.
std::map<int, uint64_t> DocumentedFixedBytes() {
  std::ifstream doc(COLLOPS_SOURCE_DIR "/docs/backends.md");
  std::string line;
  bool inTable = false;
  std::map<int, uint64_t> rows;
  while (std::getline(doc, line)) {
    if (Contains(line, "| ranks | slots | control blocks | allocated at creation |")) {
      inTable = true;
      continue;
    }
    if (!inTable) continue;
    if (line.rfind("|", 0) != 0) break;
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    std::string cell;
    while (std::getline(row, cell, '|')) cells.push_back(cell);
    if (cells.size() < 4 || Contains(cells[0], "---")) continue;
    // "2 147 483 648 (2.0 GiB)": the digits before the parenthesis.
    std::string digits;
    for (char c : cells[3].substr(0, cells[3].find('('))) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    rows[std::atoi(cells[0].c_str())] = std::stoull(digits);
  }
  return rows;
}

TEST(SegmentMemory, TheDocumentedBytesPerRankCountAreTheLayouts) {
  const std::map<int, uint64_t> rows = DocumentedFixedBytes();
  ASSERT_GE(rows.size(), 4u) << "docs/backends.md has no table of segment sizes";
  for (const auto& [ranks, bytes] : rows) {
    const shm::SegmentLayout layout =
        shm::SegmentLayout::For(ranks, shm::kDefaultSlotBytes, shm::kDefaultHeapBytes);
    EXPECT_EQ(bytes, layout.FixedBytes()) << "the row for " << ranks << " ranks";
  }
}

}  // namespace
}  // namespace collops
