// The lccl waits' idle hook (Communicator::SetIdleHook), checked the same way on thread and
// process ranks: rank 0 waits for a rank 1 that comes late, first in a collective, then in a Recv.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>

#include "collops/communicator.h"

namespace collops {
namespace testing {

/// Long enough for ~10 of lccl's 20 ms sleep slices.
constexpr useconds_t kLateMicros = 200'000;

/// Run by every rank of a 2-rank communicator. Rank 0's hook must run while it sleeps (at least
/// twice per wait: every slice, not once), and the calls still deliver.
inline void ExpectIdleHookRunsWhileWaiting(Communicator& comm, int rank) {
  int calls = 0;
  if (rank == 0) comm.SetIdleHook([&calls] { ++calls; });
  if (rank == 1) usleep(kLateMicros);
  comm.Barrier();
  if (rank == 0) {
    EXPECT_GE(calls, 2) << "Barrier: the hook ran " << calls << " times in a 200 ms wait";
  }
  const int inBarrier = calls;
  int32_t message = rank == 1 ? 41 : 0;
  if (rank == 1) {
    usleep(kLateMicros);
    comm.Send(&message, 1, ACL_INT32, 0);
  } else {
    comm.Recv(&message, 1, ACL_INT32, 1);
    EXPECT_EQ(message, 41);
    EXPECT_GE(calls - inBarrier, 2) << "Recv: the hook ran " << calls - inBarrier << " times";
    comm.SetIdleHook(nullptr);
  }
  // Once removed, a late peer does not run it (it would touch `calls`, gone after this returns).
  const int before = calls;
  if (rank == 1) usleep(kLateMicros / 4);
  comm.Barrier();
  EXPECT_EQ(calls, before);
}

}  // namespace testing
}  // namespace collops
