#include "ops/linear_parallel/chunk_pipeline.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace collops {
namespace {

/// What the two threads share: how far each stage got, whether to stop, the helper's error.
struct Progress {
  std::mutex mutex;
  std::condition_variable changed;
  int computed = 0;      // chunks whose compute is done
  int communicated = 0;  // chunks whose communicate is done
  bool stop = false;     // the calling thread gave up: the helper leaves at its next check
  std::exception_ptr computeError;
};

Error AsError(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e;
  } catch (const std::bad_alloc&) {
    return Error(ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return Error(ERROR_INTERNAL_ERROR, Concat("internal error: ", e.what()));
  }
}

/// The helper thread's loop: compute every chunk, each once the calling thread has communicated
/// it when `communicateFirst`.
void ComputeChunks(int chunks, bool communicateFirst, const std::function<void(int)>& compute,
                   Progress& p) {
  for (int c = 0; c < chunks; ++c) {
    {
      std::unique_lock<std::mutex> lock(p.mutex);
      p.changed.wait(lock, [&] { return p.stop || !communicateFirst || p.communicated > c; });
      if (p.stop) return;
    }
    try {
      compute(c);
    } catch (...) {
      std::lock_guard<std::mutex> lock(p.mutex);
      p.computeError = std::current_exception();
      p.changed.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(p.mutex);
    p.computed = c + 1;
    p.changed.notify_all();
  }
}

}  // namespace

void RunChunkPipeline(int chunks, bool communicateFirst, const std::function<void(int)>& compute,
                      const std::function<void(int)>& communicate,
                      const std::function<void(const Error&)>& abandon) {
  if (chunks <= 1) {
    if (communicateFirst) {
      communicate(0);
      try {
        compute(0);
      } catch (const Error& e) {
        abandon(e);
        throw;
      }
      return;
    }
    try {
      compute(0);
    } catch (const Error& e) {
      abandon(e);
      throw;
    }
    communicate(0);
    return;
  }
  Progress p;
  std::thread helper([&] { ComputeChunks(chunks, communicateFirst, compute, p); });
  auto stopHelper = [&] {
    {
      std::lock_guard<std::mutex> lock(p.mutex);
      p.stop = true;
      p.changed.notify_all();
    }
    helper.join();
  };
  try {
    for (int c = 0; c < chunks; ++c) {
      {
        std::unique_lock<std::mutex> lock(p.mutex);
        // Before communicating chunk c: its product is ready, or (communicateFirst) the product
        // of an earlier chunk failed, after which nothing more is sent.
        p.changed.wait(
            lock, [&] { return p.computeError != nullptr || communicateFirst || p.computed > c; });
        if (p.computeError != nullptr) break;
      }
      communicate(c);
      std::lock_guard<std::mutex> lock(p.mutex);
      p.communicated = c + 1;
      p.changed.notify_all();
    }
    if (communicateFirst) {
      std::unique_lock<std::mutex> lock(p.mutex);
      p.changed.wait(lock, [&] { return p.computeError != nullptr || p.computed == chunks; });
    }
  } catch (...) {
    stopHelper();
    throw;
  }
  stopHelper();
  if (p.computeError != nullptr) {
    const Error error = AsError(p.computeError);
    abandon(error);
    throw error;
  }
}

}  // namespace collops
