// Random schedules: a seeded sequence of collective and point-to-point calls of every kind on one
// communicator, each call's sizes drawn across the backends' algorithm thresholds (empty, one
// round, process_vm_readv, pipelined), its dtype, reduction, root and layout drawn too, and its
// buffers drawn per rank from ordinary or AllocateShared memory, in place or not. The golden
// tests run each primitive from a fresh start; a schedule runs them after one another, which is
// where state a backend carries from call to call (round parity, carried agreement records,
// single-copy announcements, heap tables, the hierarchical count matrix) can go stale.
//
// Every rank draws the same schedule from the seed and checks its own outputs against values it
// computes for all ranks, including that bytes outside every written range stay untouched.
//
// Soak runs: COLLOPS_TEST_SCHEDULE_SEED=N shifts every seed (other schedules, same tests) and
// COLLOPS_TEST_SCHEDULE_STEPS=N sets the number of calls (COLLOPS_TEST_SCHEDULE_TRACE=1 names each
// call on stderr before it starts, to find one that hangs), e.g. with n = 1, 2, ...:
//   COLLOPS_TEST_SCHEDULE_SEED=$n build/tests/collops_tests --gtest_filter='*RandomSchedule*'
#pragma once

#include <cstdint>

#include "collops/communicator.h"

namespace collops {
namespace testing {

/// Runs `steps` calls of the schedule of `seed` on `comm` (every rank of it must call this with
/// the same seed and steps) and records a gtest failure for each wrong output, naming the step,
/// the primitive, its dtype and sizes. `maxCount` bounds every count (elements per piece).
void RunRandomSchedule(Communicator& comm, uint64_t seed, int steps, int64_t maxCount = 300000);

}  // namespace testing
}  // namespace collops
