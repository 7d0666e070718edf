// Two-stage pipeline over row chunks (ATB's "lcoc" idea, compute overlapping communication): the
// product of chunk c + 1 runs while the collective of chunk c moves data.
#pragma once

#include <functional>

#include "collops/status.h"

namespace collops {

/// Runs compute(c) and communicate(c) for c = 0 .. chunks - 1. compute runs on a helper thread
/// and communicate on the calling thread (a rank's communicator is used from one thread), so
/// compute(c + 1) overlaps communicate(c). The order within a chunk: communicate(c) starts once
/// compute(c) is done, or with `communicateFirst` compute(c) once communicate(c) is done. With
/// one chunk both run on the calling thread, in that order, and no thread is started.
///
/// Errors: a communicate that throws stops the helper (after its current compute) and the error
/// is rethrown. A compute that throws leaves collectives this rank will not make: `abandon` runs
/// with its error on the calling thread (the caller aborts its communicator there, so its peers
/// stop waiting), then the error is rethrown.
void RunChunkPipeline(int chunks, bool communicateFirst, const std::function<void(int)>& compute,
                      const std::function<void(int)>& communicate,
                      const std::function<void(const Error&)>& abandon);

}  // namespace collops
