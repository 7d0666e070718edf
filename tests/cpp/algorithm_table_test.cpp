// The algorithm table (collops/algorithms.h): docs/backends.md shows exactly what
// AlgorithmTableMarkdown() prints, and every algorithm of every collective of the process engine
// can be forced by its COLLOPS_ALGO_<COLLECTIVE> knob — it runs the call (golden) where it can,
// and fails on every rank with ERROR_INVALID_PARAM naming the knob where it cannot.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "collops/algorithms.h"
#include "collops/status.h"
#include "process_ranks.h"

namespace collops {
namespace {

using testing::MakeProcessComm;
using testing::ProcessRanksOptions;
using testing::RunProcessRanks;

constexpr const char* kProcessEngine = "lccl, multi-process (`commMode` 0)";

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(AlgorithmTable, DocsShowTheTableCollopsBenchPrints) {
  const std::string docs = ReadFile(std::string(COLLOPS_SOURCE_DIR) + "/docs/backends.md");
  const std::string begin = "<!-- algorithm table: begin (collops-bench --algorithms) -->\n";
  const std::string end = "<!-- algorithm table: end -->";
  const size_t from = docs.find(begin), to = docs.find(end);
  ASSERT_NE(from, std::string::npos) << "docs/backends.md has no " << begin;
  ASSERT_NE(to, std::string::npos) << "docs/backends.md has no " << end;
  const std::string shown = docs.substr(from + begin.size(), to - from - begin.size());
  EXPECT_EQ(shown, AlgorithmTableMarkdown())
      << "docs/backends.md's algorithm table differs from the code's: paste the output of "
         "collops-bench --algorithms between the markers";
}

TEST(AlgorithmTable, EveryEngineThatChoosesIsListed) {
  std::vector<std::string> engines;
  for (const EngineAlgorithms& engine : AlgorithmTable()) {
    engines.push_back(engine.engine);
    for (const AlgorithmInfo& row : engine.rows) {
      for (const char* field :
           {row.collective, row.serves, row.name, row.description, row.condition, row.selection}) {
        EXPECT_NE(std::strlen(field), 0u) << engine.engine << " " << row.name;
        EXPECT_EQ(std::strchr(field, '|'), nullptr) << "a '|' breaks the Markdown row: " << field;
      }
    }
  }
  EXPECT_EQ(engines, (std::vector<std::string>{kProcessEngine, "lccl, multi-thread (`commMode` 1)",
                                               "hierarchical (`hccl` across hosts)"}));
}

std::vector<AlgorithmInfo> ProcessAlgorithms() {
  for (const EngineAlgorithms& engine : AlgorithmTable()) {
    if (std::strcmp(engine.engine, kProcessEngine) == 0) return engine.rows;
  }
  return {};
}

TEST(ProcessAlgorithmKnobs, RejectNamesOfNoAlgorithm) {
  std::vector<std::string> knobs;
  for (const AlgorithmInfo& row : ProcessAlgorithms()) {
    const std::string knob = AlgorithmKnob("COLLOPS_ALGO_", row.collective);
    if (!knobs.empty() && knobs.back() == knob) continue;
    knobs.push_back(knob);
    testing::ExpectEnvRejected(knob.c_str(), "ring");
  }
  EXPECT_EQ(knobs,
            (std::vector<std::string>{"COLLOPS_ALGO_ALLREDUCE", "COLLOPS_ALGO_ALLGATHER",
                                      "COLLOPS_ALGO_BROADCAST", "COLLOPS_ALGO_REDUCESCATTER",
                                      "COLLOPS_ALGO_ALLTOALL", "COLLOPS_ALGO_SENDRECV",
                                      "COLLOPS_ALGO_BARRIER", "COLLOPS_ALGO_QUANTALLREDUCE"}));
}

/// Buffers of `bytes`, from the communicator's heap when `shared`.
class Buffers {
 public:
  Buffers(Communicator& comm, bool shared) : comm_(comm), shared_(shared) {}
  ~Buffers() {
    for (void* p : heap_) comm_.FreeShared(p);
  }
  float* Floats(size_t count) {
    if (!shared_) {
      own_.emplace_back(count);
      return own_.back().data();
    }
    void* p = comm_.AllocateShared(count * sizeof(float));
    if (p == nullptr) Fail(ERROR_INTERNAL_ERROR, "AllocateShared gave null");
    heap_.push_back(p);
    return static_cast<float*>(p);
  }

 private:
  Communicator& comm_;
  bool shared_;
  std::vector<std::vector<float>> own_;
  std::vector<void*> heap_;
};

float ValueOf(int rank, size_t i) { return static_cast<float>((rank + 1) * 1000 + i % 997); }

/// Runs one call of `collective` (its rows' name) with `count` floats per piece on `shared` or
/// ordinary buffers and checks every element of the result on this rank.
void RunChecked(Communicator& comm, const std::string& collective, size_t count, bool shared) {
  const int rank = comm.Rank(), size = comm.Size();
  Buffers buffers(comm, shared);
  auto expectEqual = [&](const float* got, const std::vector<float>& want, const char* what) {
    size_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != want[i];
    EXPECT_EQ(wrong, 0u) << collective << " (" << what << ") on rank " << rank;
  };
  if (collective == "AllReduce") {
    float* in = buffers.Floats(count);
    float* out = buffers.Floats(count);
    std::vector<float> want(count, 0);
    for (size_t i = 0; i < count; ++i) {
      in[i] = ValueOf(rank, i);
      for (int r = 0; r < size; ++r) want[i] += ValueOf(r, i);
    }
    comm.AllReduce(in, out, count, ACL_FLOAT, ReduceOp::kSum);
    expectEqual(out, want, "out");
  } else if (collective == "AllGather") {
    float* in = buffers.Floats(count);
    float* out = buffers.Floats(count * size);
    std::vector<int64_t> counts(size, count), displs(size);
    std::vector<float> want(count * size);
    for (int r = 0; r < size; ++r) {
      displs[r] = r * static_cast<int64_t>(count);
      for (size_t i = 0; i < count; ++i) want[r * count + i] = ValueOf(r, i);
    }
    for (size_t i = 0; i < count; ++i) in[i] = ValueOf(rank, i);
    comm.AllGatherV(in, count, out, counts.data(), displs.data(), ACL_FLOAT);
    expectEqual(out, want, "AllGatherV");
  } else if (collective == "Broadcast") {
    const int root = size - 1;
    float* data = buffers.Floats(count);
    std::vector<float> want(count);
    for (size_t i = 0; i < count; ++i) {
      data[i] = ValueOf(rank, i);
      want[i] = ValueOf(root, i);
    }
    comm.Broadcast(data, count, ACL_FLOAT, root);
    expectEqual(data, want, "buffer");
  } else if (collective == "ReduceScatter" || collective == "AllToAll") {
    float* in = buffers.Floats(count * size);
    float* out = buffers.Floats(count * size);
    std::vector<int64_t> counts(size, count), displs(size);
    for (int r = 0; r < size; ++r) displs[r] = r * static_cast<int64_t>(count);
    for (size_t i = 0; i < count * size; ++i) in[i] = ValueOf(rank, i);
    if (collective == "ReduceScatter") {
      std::vector<float> want(count, 0);
      for (size_t i = 0; i < count; ++i) {
        for (int r = 0; r < size; ++r) want[i] += ValueOf(r, rank * count + i);
      }
      comm.ReduceScatterV(in, counts.data(), displs.data(), out, count, ACL_FLOAT, ReduceOp::kSum);
      expectEqual(out, want, "out");
    } else {
      std::vector<float> want(count * size);
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < count; ++i) want[r * count + i] = ValueOf(r, rank * count + i);
      }
      comm.AllToAllV(in, counts.data(), displs.data(), out, counts.data(), displs.data(),
                     ACL_FLOAT);
      expectEqual(out, want, "out");
    }
  } else if (collective == "SendRecv") {
    // A ring: every rank sends to the next and receives from the one before, as one group.
    float* in = buffers.Floats(count);
    float* out = buffers.Floats(count);
    const int from = (rank + size - 1) % size;
    std::vector<float> want(count);
    for (size_t i = 0; i < count; ++i) {
      in[i] = ValueOf(rank, i);
      want[i] = ValueOf(from, i);
    }
    comm.Exchange({PointToPoint::Send(in, count, ACL_FLOAT, (rank + 1) % size),
                   PointToPoint::Recv(out, count, ACL_FLOAT, from)});
    expectEqual(out, want, "received");
  } else if (collective == "Barrier") {
    comm.Barrier();
  } else if (collective == "QuantAllReduce") {
    // int8 in, float32 out, per-tensor scale 1 and offset 0: the plain sum of the int8 values.
    auto* in = reinterpret_cast<int8_t*>(buffers.Floats(count / 4 + 1));
    float* out = buffers.Floats(count);
    std::vector<float> want(count, 0);
    for (size_t i = 0; i < count; ++i) {
      in[i] = static_cast<int8_t>(static_cast<int>((rank * 37 + i) % 255) - 127);
      for (int r = 0; r < size; ++r) want[i] += static_cast<int>((r * 37 + i) % 255) - 127;
    }
    const uint16_t one = 0x3c00;  // float16 1.0
    QuantScale quant;
    quant.scale = &one;
    EXPECT_TRUE(comm.AllReduceQuantised(in, out, count, quant, ACL_FLOAT));
    expectEqual(out, want, "out");
  } else {
    ADD_FAILURE() << "no check for collective " << collective;
  }
}

/// Every process algorithm, forced: on buffers in the heaps every one runs (golden, small and
/// large); on ordinary buffers "heap" fails on every rank naming the knob, and the communicator
/// goes on. process_vm_readv is configured from 4 KiB, so that "cma" runs whatever the kernel copy
/// costs here (where the kernel refuses it, "cma" must fail naming the knob).
class ProcessForcedAlgorithm : public ::testing::TestWithParam<int> {};

TEST_P(ProcessForcedAlgorithm, RunsEveryCallItCanAndRefusesTheOthersByName) {
  const int size = GetParam();
  for (const AlgorithmInfo& row : ProcessAlgorithms()) {
    const std::string knob = AlgorithmKnob("COLLOPS_ALGO_", row.collective);
    const std::string name = row.name;
    SCOPED_TRACE(knob + "=" + name);
    ProcessRanksOptions options;
    options.env["COLLOPS_SHM_BYTES"] = "64K";  // large calls take many rounds
    options.env["COLLOPS_SHM_HEAP_BYTES"] = "64M";
    options.env["COLLOPS_SHM_CMA_BYTES"] = "4096";
    options.env[knob] = name;
    options.deadlineSeconds = 90;
    RunProcessRanks(
        size,
        [&](int rank) {
          auto comm = MakeProcessComm(rank, size, "forced-" + knob + "-" + name);
          const bool refused = name == "cma" && !comm->CrossMemory();
          for (const size_t count : {size_t{1}, size_t{5000}, size_t{40000}}) {
            for (const bool shared : {true, false}) {
              // "heap" stages what is below 8 KiB in AllGather and Broadcast (algorithm_table.cpp).
              const std::string collective = row.collective;
              const bool staysStaged = (collective == "AllGather" || collective == "Broadcast") &&
                                       count * sizeof(float) < 8192;
              const bool runs = !refused && !(name == "heap" && !shared && !staysStaged);
              if (runs) {
                RunChecked(*comm, row.collective, count, shared);
                continue;
              }
              const std::string expected = knob + "=" + name + " (rank 0's environment) cannot run";
              try {
                RunChecked(*comm, row.collective, count, shared);
                ADD_FAILURE() << "rank " << rank << ": ran a call it cannot run, count " << count;
              } catch (const Error& e) {
                EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
                EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
              }
              EXPECT_FALSE(comm->Broken());
            }
          }
          comm->Barrier();
        },
        options);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessForcedAlgorithm, ::testing::Values(2, 3),
                         [](const auto& info) { return "R" + std::to_string(info.param); });

}  // namespace
}  // namespace collops
