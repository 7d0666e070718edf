// dnnl_runtime.h over oneDNN and OpenMP.
#include <omp.h>

#include <algorithm>

#include "collops/status.h"
#include "ops/linear_parallel/dnnl_runtime.h"

namespace collops {
namespace dnnl_runtime {

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

void Fail(const char* what, const dnnl::error& e) {
  if (e.status == dnnl_out_of_memory)
    collops::Fail(ERROR_OUT_OF_HOST_MEMORY, "oneDNN ", what, ": ", e.what());
  collops::Fail(ERROR_INTERNAL_ERROR, "oneDNN ", what, ": ", e.what());
}

int UsableThreads(int requested) {
#if defined(__SANITIZE_THREAD__)
  (void)requested;
  return 1;
#else
  return std::max(1, requested);
#endif
}

std::mutex& CreationMutex() {
  static std::mutex mutex;
  return mutex;
}

ScopedOmpThreads::ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) {
  const int usable = UsableThreads(threads);
  if (usable != saved_) omp_set_num_threads(usable);
}

ScopedOmpThreads::~ScopedOmpThreads() { omp_set_num_threads(saved_); }

}  // namespace dnnl_runtime
}  // namespace collops
