// How the ranks of a torch.distributed group agree, through the group's Store, on the token that
// names their lccl communicators, and learn which host every rank is on.
#pragma once

#include <string>

#include "collops/topology.h"

namespace c10d {
class Store;
}

namespace collops {

/// The token naming this creation of the group, the same on every rank: rank 0 draws it at
/// random and publishes it; every other rank returns it only once rank 0 has seen all of them
/// take it. Collective: every rank of the group calls it, with the same `timeoutSeconds`
/// (0 = COLLOPS_TIMEOUT). A rank that does not arrive within the timeout makes it throw
/// ERROR_TIMEOUT naming that rank.
///
/// Why the handshake: torchrun keeps one Store for every restart of a job, so the keys of a
/// previous attempt are still there. A rank that reads the token key before this attempt's rank 0
/// writes it would take the dead attempt's token and wait in a rendezvous nobody else joins. Rank 0
/// marks a token finished before it releases the ranks, so a token that is still published but
/// never released is stale, and the ranks switch to the new one when it appears.
std::string JoinGroup(c10d::Store& store, int rank, int size, double timeoutSeconds);

/// Every rank's HostIdentity() through the Store (keys under `token`, so never a previous
/// attempt's), as a layout of ranks over hosts. Collective, after JoinGroup; the group's rank 0
/// (the default group's usually hosts the Store) returns only once every rank has read every
/// identity.
HostLayout ExchangeHostLayout(c10d::Store& store, const std::string& token, int rank, int size);

}  // namespace collops
