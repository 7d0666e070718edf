// What the oneDNN products of LinearParallelOperation (matmul_dnnl.cpp, quant_matmul_dnnl.cpp)
// share: the CPU engine, the lock around primitive creation, the per-product OpenMP thread count
// and the translation of oneDNN's errors. Included only by files built with oneDNN.
#pragma once

#include <dnnl.hpp>
#include <mutex>

namespace collops {
namespace dnnl_runtime {

dnnl::engine& CpuEngine();

/// Throws collops' Error for a oneDNN error: ERROR_OUT_OF_HOST_MEMORY or ERROR_INTERNAL_ERROR.
[[noreturn]] void Fail(const char* what, const dnnl::error& e);

/// The threads a product may use. ThreadSanitizer cannot see libgomp's own synchronisation (the
/// library is not instrumented), so in a ThreadSanitizer build every OpenMP team would look like a
/// race: products there run on the calling thread alone.
int UsableThreads(int requested);

/// Held while primitives are described and created. oneDNN allows that from many threads at
/// once, but its caches initialise lazily inside the library, where ThreadSanitizer sees the
/// lock's memory written by one thread and read by another without the order between them; one
/// lock of our own gives it that order. It costs nothing that matters: a primitive is made once
/// per row count and operation.
std::mutex& CreationMutex();

/// Sets the calling thread's OpenMP thread count for one product and restores it after: in a
/// torch process that setting is torch's intra-op thread count.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace dnnl_runtime
}  // namespace collops
