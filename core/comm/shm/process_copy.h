// CopyBytes: memcpy for the copies between user buffers and the shared segment, without glibc's
// slow case on AMD Zen.
//
// glibc copies 2 KiB to L2-sized blocks with `rep movsb`, which on AMD Zen runs an order of
// magnitude slower when the destination starts 1-63 bytes after the source modulo 4 KiB
// (docs/performance.md has the figures). That is the common case for the copy out of the
// page-aligned segment into a buffer malloc placed 16 bytes into fresh mmapped pages (every
// allocation of 128 KiB and more). A plain vector loop has no such cliff. Intel's `rep movsb` has
// none either and beats the loop, so the loop is taken on AMD only.
#pragma once

#include <cstddef>

namespace collops {
namespace shm {

/// Copies `bytes` from `src` to `dst` (non-overlapping), as fast as memcpy at any alignment.
void CopyBytes(void* dst, const void* src, size_t bytes);

/// The vector loop CopyBytes takes at glibc's slow distances on CPUs that have them (AMD Zen);
/// separate so that it is tested on every machine.
void CopyBytesByVectors(void* dst, const void* src, size_t bytes);

/// CopyBytes with non-temporal stores, for a collective's output of many MiB: that output leaves
/// the cache before anyone reads it, and ordinary stores first read every destination line
/// (read-for-ownership), a third of the memory traffic of the copy. Ends with a store fence.
void StreamBytes(void* dst, const void* src, size_t bytes);

}  // namespace shm
}  // namespace collops
