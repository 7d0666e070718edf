// Helpers shared by the thread communicator tests (thread_comm_test.cpp,
// thread_comm_fault_test.cpp): golden arithmetic written independently of the library's kernels.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "collops/status.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {

/// This rank's multi-thread lccl communicator, created through the public backend registry.
inline std::shared_ptr<Communicator> JoinRank(int rank, int size, const std::string& domain) {
  return CreateCommunicator(ThreadRankParam(rank, size, domain));
}

/// a op b for int32, wrapping like two's complement.
inline int32_t Fold(ReduceOp op, int32_t a, int32_t b) {
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
    case ReduceOp::kProd:
      return static_cast<int32_t>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kMin:
      return a < b ? a : b;
  }
  return 0;
}

/// IEEE binary16 bits of a non-negative integer <= 2048 (exactly representable).
inline uint16_t HalfFromSmallInt(int n) {
  if (n == 0) return 0;
  int exponent = 0;
  while ((n >> (exponent + 1)) != 0) ++exponent;
  const int mantissa = (n << (10 - exponent)) & 0x3FF;
  return static_cast<uint16_t>(((exponent + 15) << 10) | mantissa);
}

/// Lays segments of `counts` out one after another (last first when `reversed`) with `gap`
/// unused elements before each; fills `displs` and returns the buffer length.
inline int64_t Layout(const std::vector<int64_t>& counts, bool reversed, int64_t gap,
                      std::vector<int64_t>* displs) {
  const int n = static_cast<int>(counts.size());
  displs->assign(n, 0);
  int64_t position = 0;
  for (int k = 0; k < n; ++k) {
    const int i = reversed ? n - 1 - k : k;
    position += gap;
    (*displs)[i] = position;
    position += counts[i];
  }
  return position;
}

/// The Status body() throws as a collops::Error (NO_ERROR when it returns), and its message.
template <class Body>
Status CaughtStatus(Body&& body, std::string* message = nullptr) {
  try {
    body();
  } catch (const Error& e) {
    if (message != nullptr) *message = e.what();
    return e.status();
  }
  return NO_ERROR;
}

/// Sets an environment variable for one scope. Use only while no other thread reads the
/// environment (before RunThreadRanks starts and after it returns).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    hadOld_ = old != nullptr;
    if (hadOld_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (hadOld_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::string old_;
  bool hadOld_ = false;
};

/// For a test of one rank's own checks, run without the peers its op's rankSize names: a failing
/// first call joins the communicator's creation to tell them (OperationBase::ShareFailure), which
/// would wait COLLOPS_TIMEOUT for them; here the creation gives up at once and the rank's own
/// error stands.
class LoneRank {
 public:
  LoneRank() : timeout_("COLLOPS_TIMEOUT", "0.05") {}

 private:
  ScopedEnv timeout_;
};

}  // namespace testing
}  // namespace collops
