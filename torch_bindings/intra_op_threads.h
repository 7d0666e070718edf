// Several ranks of a job on one host, each with torch's default intra-op pool (a thread per CPU),
// put ranks x CPUs threads on the CPUs. An OpenMP region of one rank (any copy, clone or add of
// more than 32K elements) then needs all its threads running at once while the other ranks'
// threads hold the CPUs, and every collective waits for it (docs/distributed.md shows by how
// much). torchrun avoids it by setting OMP_NUM_THREADS=1; ATB-style scripts started by
// torch.multiprocessing or mpirun do not, so the binding lowers the threads itself.
#pragma once

namespace collops {

/// Lowers torch's intra-op threads to this process's share of the CPUs, CPUs / ranksOnThisHost
/// (at least 1), when more would oversubscribe them, and says so once on stderr. Leaves them
/// alone when OMP_NUM_THREADS is set (the user's choice) or when a launcher pinned this process
/// to part of the CPUs (mpirun's binding: its choice). Returns whether it changed them.
bool ShareCpusWithLocalRanks(int ranksOnThisHost);

}  // namespace collops
