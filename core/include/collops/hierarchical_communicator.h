// Hierarchical collectives: lccl inside each host, an engine (mpi, c10d) between hosts.
//
// Three communicators of one rank: `flat` over every rank (the engine; carries point-to-point
// between hosts and small control exchanges), `intra` over the ranks of this rank's host (lccl;
// ranked by global rank, so the host's leader is intra rank 0) and `rail`, the ranks at this
// rank's local index, one per host that has one (the engine; ranked by host index). Rail 0 is the
// leaders. Each collective sends every byte over the inter-host links once. The algorithms (H
// hosts; "leader" = lowest global rank of a host):
//
// - AllReduce, every host holding the same number L > 1 of ranks: the vector in L blocks, local
//   index k owning block k; intra ReduceScatterV onto the owners; each rail AllReduces its block
//   across hosts; intra AllGatherV of the blocks. Every rank holds the rails' bits.
//   Other layouts: intra AllReduce; leaders AllReduce across hosts; intra Broadcast from the
//   leader, so every rank holds the leader's bits.
//   float16/bfloat16 sums and products run in float32 up to the cross-host reduction when H > 1
//   and round once after it, as lccl's do, the price being twice the bytes.
// - AllGatherV: intra AllGatherV packs the host's contributions (in rank order) into one host
//   block; leaders AllGatherV the host blocks; intra Broadcast of all blocks; each rank unpacks
//   them to its own rdispls (any layout, holes untouched).
// - ReduceScatterV: each rank packs its send blocks host by host; intra AllReduce of the packed
//   vector; leaders ReduceScatterV it by host blocks; each leader scatters its host's block to its
//   ranks (intra AllToAllV from the leader). Half types as AllReduce.
// - AllToAllV: every rank knows the whole count matrix, from the records of the agreement check
//   before the call (Agree) or, for a raw call, exchanged over `flat` (one small AllGatherBytes);
//   blocks between ranks of one host go intra directly (AllToAllV); blocks for other hosts are
//   gathered to the leader (intra), exchanged as one message per host pair among leaders (leaders'
//   rail AllToAllV), scattered by the receiving leader (intra) and unpacked to rdispls. Steps with
//   nothing to move on this host (or anywhere) are skipped on every rank concerned alike. Once the
//   largest host-pair message reaches 60 KiB (near the engine's eager limit), blocks for other
//   hosts go instead directly from rank to rank in one flat AllToAllV (local blocks zeroed),
//   started (StartAllToAllV) before the intra AllToAllV and finished after it, so an engine that
//   can move them meanwhile (mpi) does.
// - Broadcast: intra Broadcast on the root's host from the root; leaders Broadcast from the root's
//   host; intra Broadcast from the leader on every other host.
// - Send/Recv/Exchange (Send and Recv are groups of one): the ops with peers on this host as one
//   intra group, then the others as one flat group; the engine's Exchange returns only once a
//   send's data is through (hierarchical_comm.cpp).
// - Barrier: intra Barrier, leaders Barrier, intra Barrier (no rank leaves before all entered).
// - AllGatherBytes: AllGatherV of bytes (above).
// - Split: flat's Split (the result is an engine communicator, not hierarchical).
#pragma once

#include <memory>

#include "collops/communicator.h"
#include "collops/topology.h"

namespace collops {

/// flat: every rank (the engine: p2p, small control exchanges); intra: the ranks of this rank's
/// host (lccl), ranked by global rank; rail: the ranks at this rank's local index on every host
/// that has one (layout.HostsOfRail), ranked by host index — on leaders, the leaders'
/// communicator. An engine's Split(LocalIndex(rank), host) makes it. Rank()/Size() are flat's.
/// BackendName() is "hccl(<intra>+<flat>)", e.g. "hccl(lccl+mpi)". Throws
/// Error(ERROR_INVALID_PARAM) when a communicator is null or does not match `layout` (sizes,
/// ranks).
std::shared_ptr<Communicator> MakeHierarchicalCommunicator(std::shared_ptr<Communicator> flat,
                                                           std::shared_ptr<Communicator> intra,
                                                           std::shared_ptr<Communicator> rail,
                                                           HostLayout layout);

}  // namespace collops
