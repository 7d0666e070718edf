#include "thread_ranks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collops/status.h"

namespace collops {
namespace testing {
namespace {

// Shared by the rank threads and the watcher; owned through shared_ptr so that nothing dangles in
// the moment between a rank finishing and the watcher returning.
struct RunState {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<bool> done;
  int remaining = 0;
};

void RunOneRank(int rank, const std::function<void(int)>& body) {
  SCOPED_TRACE(Concat("rank ", rank));
  try {
    body(rank);
  } catch (const Error& e) {
    ADD_FAILURE() << "rank " << rank << " threw collops::Error " << StatusName(e.status()) << ": "
                  << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << " threw: " << e.what();
  } catch (...) {
    ADD_FAILURE() << "rank " << rank << " threw a non-std exception";
  }
}

}  // namespace

void RunThreadRanks(int rankSize, const std::function<void(int rank)>& body,
                    double deadlineSeconds) {
  auto state = std::make_shared<RunState>();
  state->done.assign(rankSize, false);
  state->remaining = rankSize;

  std::vector<std::thread> threads;
  threads.reserve(rankSize);
  for (int rank = 0; rank < rankSize; ++rank) {
    threads.emplace_back([state, rank, &body] {
      RunOneRank(rank, body);
      std::lock_guard<std::mutex> lock(state->mutex);
      state->done[rank] = true;
      if (--state->remaining == 0) state->cv.notify_all();
    });
  }

  {
    std::unique_lock<std::mutex> lock(state->mutex);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(deadlineSeconds));
    if (!state->cv.wait_until(lock, deadline, [&] { return state->remaining == 0; })) {
      std::string stuck;
      for (int rank = 0; rank < rankSize; ++rank) {
        if (!state->done[rank]) stuck += (stuck.empty() ? "" : ", ") + std::to_string(rank);
      }
      const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
      std::fprintf(stderr,
                   "RunThreadRanks(%d) in %s.%s: rank(s) %s still running after %g s; "
                   "aborting so the test fails instead of hanging\n",
                   rankSize, test ? test->test_suite_name() : "?", test ? test->name() : "?",
                   stuck.c_str(), deadlineSeconds);
      std::fflush(stderr);
      std::abort();
    }
  }
  for (std::thread& thread : threads) thread.join();
}

std::string UniqueDomain(const std::string& tag) {
  static std::atomic<uint64_t> counter{0};
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = test ? Concat(test->test_suite_name(), ".", test->name()) : "no-test";
  if (!tag.empty()) name += ":" + tag;
  const std::string suffix = Concat("#", counter.fetch_add(1));
  // Keep the tail (parameter index, tag) when the name is long; the counter alone makes it unique.
  const size_t room = kMaxCommDomainLength - suffix.size();
  if (name.size() > room) name = name.substr(name.size() - room);
  return name + suffix;
}

CommParam ThreadRankParam(int rank, int rankSize, const std::string& domain) {
  CommParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.backend = "lccl";
  param.commMode = COMM_MULTI_THREAD;
  param.commDomain = domain;
  return param;
}

OperationPtr SingleRankAllReduce() {
  return MakeOperation(
      "AllReduceOperation",
      {{"rank", 0}, {"rankSize", 1}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
}

}  // namespace testing
}  // namespace collops
