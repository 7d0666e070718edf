// The checked collectives and environments of the process heap tests (process_heap_checks.h),
// and the instantiation of their collective tests for R = 2, 3 and 4.
#include "process_heap_checks.h"

#include <cstring>

#include "piece_layout.h"

namespace collops {
namespace testing {

uint64_t CheckedAllToAllV(shm::ProcessCommunicator& comm, int64_t scale, Placement placement) {
  const int rank = comm.Rank(), size = comm.Size();
  const PieceLayout l(rank, size, scale);
  Placed in(comm, l.sendEnd, (placement.inputs >> rank) & 1);
  Placed out(comm, l.recvEnd, (placement.outputs >> rank) & 1);
  for (int64_t i = 0; i < l.sendEnd; ++i) in.data()[i] = static_cast<uint8_t>(ValueAt(rank, i));
  std::memset(out.data(), 0xee, l.recvEnd);
  std::vector<uint8_t> want(l.recvEnd, 0xee);
  for (int r = 0; r < size; ++r) {
    const int64_t theirDispl = PieceLayout::SendDispl(r, rank, scale);
    for (int64_t i = 0; i < l.recvCounts[r]; ++i) {
      want[l.rdispls[r] + i] = static_cast<uint8_t>(ValueAt(r, theirDispl + i));
    }
  }
  const uint64_t before = comm.Rounds();
  comm.AllToAllV(in.data(), l.sendCounts.data(), l.sdispls.data(), out.data(), l.recvCounts.data(),
                 l.rdispls.data(), ACL_INT8);
  const uint64_t rounds = comm.Rounds() - before;
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < l.recvEnd; ++i) {
    if (out.data()[i] != want[i] && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0) << "rank " << rank << " of " << size << ", scale " << scale << ", inputs "
                      << placement.inputs << ", outputs " << placement.outputs << ": first at "
                      << first << " got " << int{out.data()[first >= 0 ? first : 0]} << " want "
                      << int{want[first >= 0 ? first : 0]};
  // Both sides must be done with the shared memory when the call returns: the next iteration
  // frees and reuses it.
  return rounds;
}

ProcessRanksOptions SmallSlots(bool crossMemory) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BYTES"] = "64K";  // many staged rounds for the larger pieces
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "64M";
  options.env["COLLOPS_SHM_CMA_BYTES"] = crossMemory ? "4096" : "0";
  return options;
}

ProcessRanksOptions HeapsAnd(const std::string& name, const std::string& value) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "64M";
  options.env[name] = value;
  return options;
}

void ForEachSharedInputSet(int size, const char* domain, const std::vector<int64_t>& scales,
                           const std::function<void(shm::ProcessCommunicator& comm, int64_t scale,
                                                    unsigned shared)>& check,
                           bool crossMemory) {
  RunProcessRanks(
      size,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, size, domain);
        const unsigned all = (1u << size) - 1;
        for (const int64_t scale : scales) {
          for (const unsigned shared : {0u, all, 1u, 2u & all}) check(*comm, scale, shared);
        }
      },
      SmallSlots(crossMemory));
}

uint64_t CheckedAllReduce(shm::ProcessCommunicator& comm, int64_t count, bool inPlace,
                          bool sharedInput, bool sharedOutput) {
  const int rank = comm.Rank(), size = comm.Size();
  Placed in(comm, count * sizeof(float), sharedInput);
  Placed other(comm, count * sizeof(float), sharedOutput);
  auto* x = reinterpret_cast<float*>(in.data());
  auto* y = inPlace ? x : reinterpret_cast<float*>(other.data());
  for (int64_t i = 0; i < count; ++i) x[i] = static_cast<float>((rank + 1) * (i % 97));
  const uint64_t before = comm.Rounds();
  comm.AllReduce(x, y, count, ACL_FLOAT, ReduceOp::kSum);
  const uint64_t rounds = comm.Rounds() - before;
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    wrong += y[i] != static_cast<float>(size * (size + 1) / 2 * (i % 97));
  }
  EXPECT_EQ(wrong, 0) << "rank " << rank << ": count " << count << " shared " << sharedInput
                      << sharedOutput << " in place " << inPlace << " (" << rounds << " rounds)";
  return rounds;
}

void ExpectForcedFails(shm::ProcessCommunicator& comm, const std::string& knob,
                       const std::string& why, const std::function<void()>& call) {
  try {
    call();
    ADD_FAILURE() << "rank " << comm.Rank() << ": " << knob << " ran a call it cannot run";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
    EXPECT_NE(std::string(e.what()).find(knob + " (rank 0's environment) cannot run this call"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  EXPECT_FALSE(comm.Broken()) << "rank " << comm.Rank();
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessHeapCollectives, ::testing::Values(2, 3, 4));

}  // namespace testing
}  // namespace collops
