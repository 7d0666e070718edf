// A program that uses an installed collops through its CMake package: an AllReduce of 2 thread
// ranks, made from the typed param struct, each rank's output checked against the sum. Prints
// the library version, and exits non-zero on any failure.
#include <collops/collops.h>
#include <collops/ops/ops.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kRanks = 2;
constexpr int kCount = 6;

/// Rank r contributes r * 10 + i at index i; every rank must end up with the sum over ranks.
float Input(int rank, int i) { return static_cast<float>(rank * 10 + i); }

std::string RunRank(int rank) {
  collops::AllReduceParam param;
  param.rank = rank;
  param.rankSize = kRanks;
  param.backend = "lccl";
  param.commMode = collops::COMM_MULTI_THREAD;
  param.commDomain = "cmake-consumer";
  param.allReduceType = "sum";
  collops::Operation* raw = nullptr;
  if (collops::CreateOperation(param, &raw) != collops::NO_ERROR) {
    return "CreateOperation: " + collops::LastErrorMessage();
  }
  collops::OperationPtr op(raw);

  std::vector<float> in(kCount), out(kCount, -1.0f);
  for (int i = 0; i < kCount; ++i) in[i] = Input(rank, i);
  collops::Tensor x;
  x.desc.dtype = collops::ACL_FLOAT;
  x.desc.shape = collops::MakeDims({kCount});
  x.deviceData = in.data();
  x.dataSize = sizeof(float) * kCount;
  collops::Tensor y = x;
  y.deviceData = out.data();
  collops::VariantPack pack{{x}, {y}};

  std::vector<collops::TensorDesc> outDescs;
  uint64_t workspaceSize = 0;
  if (op->InferShape({x.desc}, outDescs) != collops::NO_ERROR ||
      op->Setup(pack, workspaceSize, nullptr) != collops::NO_ERROR) {
    return "InferShape/Setup: " + collops::LastErrorMessage();
  }
  std::vector<uint8_t> workspace(workspaceSize);
  if (op->Execute(pack, workspace.data(), workspaceSize, nullptr) != collops::NO_ERROR) {
    return "Execute: " + collops::LastErrorMessage();
  }
  for (int i = 0; i < kCount; ++i) {
    float sum = 0;
    for (int r = 0; r < kRanks; ++r) sum += Input(r, i);
    if (out[i] != sum) {
      return "output[" + std::to_string(i) + "] is " + std::to_string(out[i]) + ", expected " +
             std::to_string(sum);
    }
  }
  return "";
}

}  // namespace

int main() {
  if (std::strcmp(collops::Version(), COLLOPS_PACKAGE_VERSION) != 0) {
    std::printf("FAILED: libcollops.so is version %s, its CMake package says %s\n",
                collops::Version(), COLLOPS_PACKAGE_VERSION);
    return 1;
  }
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([r, &errors] { errors[r] = RunRank(r); });
  }
  for (auto& t : ranks) t.join();
  int failed = 0;
  for (int r = 0; r < kRanks; ++r) {
    if (!errors[r].empty()) {
      std::printf("rank %d FAILED: %s\n", r, errors[r].c_str());
      ++failed;
    }
  }
  if (failed) return 1;
  std::printf("collops %s: AllReduce of %d thread ranks ok\n", collops::Version(), kRanks);
  return 0;
}
