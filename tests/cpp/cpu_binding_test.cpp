// CpusAvailable and BindToOwnCpu (core/comm/shm/cpu_binding.h): a thread COLLOPS_SHM_BIND pinned
// still counts the CPUs it had, so a second communicator of the process is not taken for
// oversubscribed; a pin set by someone else is counted as it is.
#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

#include "core/comm/shm/cpu_binding.h"

namespace collops {
namespace shm {
namespace {

int AffinityCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

/// Runs `body` on a thread of its own, so the pins it sets end with it.
template <typename Body>
void OnOwnThread(Body body) {
  std::thread thread(body);
  thread.join();
}

TEST(CpuBinding, APinnedRankStillCountsTheCpusItHadBefore) {
  OnOwnThread([] {
    const int before = CpusAvailable();
    if (before < 2) GTEST_SKIP() << "needs two CPUs to pin a rank of two";
    BindToOwnCpu(1, 2);
    ASSERT_EQ(AffinityCount(), 1);
    EXPECT_EQ(CpusAvailable(), before);
  });
}

TEST(CpuBinding, APinSetByTheCallerIsCountedAsItIs) {
  OnOwnThread([] {
    const int before = CpusAvailable();
    if (before < 2) GTEST_SKIP() << "needs two CPUs";
    BindToOwnCpu(1, 2);
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    int pinned = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE && pinned < 0; ++cpu) {
      if (CPU_ISSET(cpu, &set)) pinned = cpu;
    }
    // Another CPU than ours: the caller's own pin, which the count follows.
    int other = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE && other < 0; ++cpu) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      if (cpu != pinned && sched_setaffinity(0, sizeof(one), &one) == 0) other = cpu;
    }
    ASSERT_GE(other, 0);
    EXPECT_EQ(CpusAvailable(), 1);
  });
}

TEST(CpuBinding, MoreRanksThanCpusPinNothing) {
  OnOwnThread([] {
    const int before = AffinityCount();
    BindToOwnCpu(0, before + 1);
    EXPECT_EQ(AffinityCount(), before);
    EXPECT_EQ(CpusAvailable(), before);
  });
}

}  // namespace
}  // namespace shm
}  // namespace collops
