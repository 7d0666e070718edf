// Where ranks live: which ranks share a host, in the sense that matters to lccl (the shared-memory
// backend can connect them). Hierarchical collectives run lccl inside each host and an engine
// (mpi, c10d) between hosts, so they need a layout of ranks over hosts; it comes from a rank table
// (rank_table.h) or from exchanging HostIdentity() through the engine.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace collops {

/// Identity of "one host" as lccl sees it: same kernel boot (/proc/sys/kernel/random/boot_id)
/// and same network namespace (stat("/proc/self/ns/net").st_ino) — lccl rendezvous uses abstract
/// unix sockets, which are per network namespace. Hostname appended for messages:
/// "<boot_id>/netns:<inode>@<hostname>". Only the part before '@' identifies the host.
///
/// COLLOPS_HOST_ID (a test and container knob), when set and not empty, replaces the
/// boot_id/netns part, so ranks of one machine can pretend to be on different hosts (they must
/// then not expect lccl to connect them) or containers that share a kernel and a network
/// namespace can be told apart.
std::string HostIdentity();

/// The part of an identity that says which host it is (before the first '@').
std::string HostKey(const std::string& identity);

/// Bytes per rank when identities travel as fixed-size records (an AllGatherBytes).
constexpr size_t kHostIdentityRecordBytes = 256;
/// `identity` as such a record: cut to kHostIdentityRecordBytes - 1 bytes, NUL padded.
std::string HostIdentityRecord(const std::string& identity);
/// The identities in `count` gathered records. Each is another process's bytes: read up to its
/// first NUL or its end, never past it, non-printable bytes escaped (PeerText).
std::vector<std::string> HostIdentitiesFromRecords(const char* records, int count);

/// The ranks of a job grouped by host.
struct HostLayout {
  std::vector<int> hostOfRank;         ///< host index of each rank; hosts numbered by first rank
  std::vector<std::string> hostNames;  ///< per host, for messages (server_id or hostname)

  int HostCount() const { return static_cast<int>(hostNames.size()); }
  bool SingleHost() const { return HostCount() <= 1; }
  /// The global ranks on `host`, ascending.
  std::vector<int> RanksOn(int host) const;
  /// The lowest global rank on `host`: the one that talks to the other hosts.
  int Leader(int host) const;
  /// Position of `rank` among RanksOn(its host).
  int LocalIndex(int rank) const;
  /// The hosts that have a rank at local index `index`, ascending: the members of that rail (the
  /// ranks at one local index, one per host; rail 0 is the leaders).
  std::vector<int> HostsOfRail(int index) const;
  /// `rank`'s position in its rail: its host's among HostsOfRail(LocalIndex(rank)).
  int RailRank(int rank) const;
  /// True when every host holds the same number of ranks, so every rail spans every host.
  bool Uniform() const;
};

/// Groups ranks by HostKey(identityOfRank[r]); hosts are numbered in order of their first rank
/// and named by the hostname part of that rank's identity.
HostLayout LayoutFromIdentities(const std::vector<std::string>& identityOfRank);

/// Renumbers hosts so that host indices follow the order of each host's lowest rank (the rule
/// every HostLayout follows); `hostOfRank` may use any labels >= 0, `names` is indexed by them.
HostLayout NormalizeLayout(const std::vector<int>& hostOfRank,
                           const std::vector<std::string>& names);

}  // namespace collops
