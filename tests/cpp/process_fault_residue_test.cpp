// The multi-process lccl communicator leaves nothing behind after a normal exit, a timeout or a
// SIGKILL: no residue in /dev/shm, /tmp, SysV IPC or the abstract socket table.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "core/comm/shm/process_rendezvous.h"
#include "process_fault_test_util.h"
#include "process_ranks.h"

namespace collops {
namespace {

using testing::Contains;
using testing::ForkRanks;
using testing::KillMidCollective;
using testing::MakeLcclComm;
using testing::ProcessRanksOptions;
using testing::RunProcessRanks;

std::set<std::string> Listing(const char* dir) {
  std::set<std::string> names;
  if (DIR* d = opendir(dir)) {
    while (dirent* entry = readdir(d)) names.insert(entry->d_name);
    closedir(d);
  }
  return names;
}

std::string FileText(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// gcc's temporaries ("ccU7hYv6.s"): builds running beside the test suite make them, we never do.
bool CompilerTemporary(const std::string& name) {
  return name.size() >= 10 && name.compare(0, 2, "cc") == 0 && name[8] == '.';
}

/// OpenMPI's shared-memory segments and session directories: ctest runs the mpi backend's
/// mpirun jobs beside this test, and they keep such files for as long as they run.
bool OpenMpiFile(const std::string& name) {
  return name.rfind("vader_segment.", 0) == 0 || name.rfind("ompi.", 0) == 0 ||
         name.rfind("openmpi-sessions-", 0) == 0;
}

/// Entries that appeared in `dir` since `before` and are still there a while later (files of
/// unrelated tests and builds running in parallel come and go).
std::vector<std::string> Residue(const char* dir, const std::set<std::string>& before) {
  std::vector<std::string> added;
  for (int attempt = 0; attempt < 15; ++attempt) {
    added.clear();
    for (const std::string& name : Listing(dir)) {
      if (before.count(name) == 0 && !CompilerTemporary(name) && !OpenMpiFile(name)) {
        added.push_back(name);
      }
    }
    if (added.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return added;
}

TEST(ProcessFault, NothingIsLeftBehindAfterNormalExitTimeoutAndSigkill) {
  const std::set<std::string> shmBefore = Listing("/dev/shm"), tmpBefore = Listing("/tmp");
  const std::string sysvBefore =
      FileText("/proc/sysvipc/shm") + FileText("/proc/sysvipc/sem") + FileText("/proc/sysvipc/msg");
  std::vector<std::string> jobs;
  // A normal run of several collectives.
  {
    ProcessRanksOptions options;
    options.env["COLLOPS_SHM_BYTES"] = "65536";
    RunProcessRanks(
        3,
        [&jobs](int rank) {
          auto comm = MakeLcclComm(rank, 3, "residue");
          std::vector<float> in(100000, 1.0f), out(in.size());
          comm->AllReduce(in.data(), out.data(), in.size(), ACL_FLOAT, ReduceOp::kSum);
          comm->Broadcast(in.data(), in.size(), ACL_FLOAT, 2);
          std::vector<uint8_t> all(3 * 1000);
          comm->AllGatherBytes(in.data(), all.data(), 1000);
          comm->Barrier();
        },
        options);
  }
  // A rank killed in the middle, and a rendezvous that times out.
  KillMidCollective(3, 2);
  {
    ProcessRanksOptions options;
    options.env["COLLOPS_TIMEOUT"] = "1";
    ForkRanks(
        2,
        [](int rank) {
          if (rank == 0) MakeLcclComm(0, 2, "residue-timeout");
        },
        options);
  }
  EXPECT_EQ(Residue("/dev/shm", shmBefore), std::vector<std::string>{});
  EXPECT_EQ(Residue("/tmp", tmpBefore), std::vector<std::string>{});
  EXPECT_EQ(
      FileText("/proc/sysvipc/shm") + FileText("/proc/sysvipc/sem") + FileText("/proc/sysvipc/msg"),
      sysvBefore);
  // No abstract socket of this test process's jobs survives its ranks.
  std::istringstream lines(FileText("/proc/net/unix"));
  for (std::string line; std::getline(lines, line);) {
    for (int counter = 1; counter < 64; ++counter) {
      shm::RendezvousSpec job;
      job.jobKey = Concat("gtest-", getpid(), "-", counter);
      const std::string name = shm::ClaimSocketName(geteuid(), job, 0);
      // "collops-lccl:u<uid>:<job hash>": any domain, size or rank of that job.
      const std::string jobPrefix = name.substr(0, name.find(':', name.find(":u") + 2) + 17);
      EXPECT_FALSE(Contains(line, jobPrefix)) << line;
    }
  }
}

}  // namespace
}  // namespace collops
