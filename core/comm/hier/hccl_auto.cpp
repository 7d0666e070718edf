// backend "hccl" in multi-process mode: ATB's default backend, meaning "the best engine for where
// the ranks are". On one host that is lccl, exactly as when "lccl" is named; MPI is touched only
// when mpirun spread the job over several nodes, torch only when torch.distributed is initialised
// and no launcher or one-server table already said "one host". Across hosts it is the
// hierarchical communicator: lccl inside each host and an engine (mpi, c10d) between hosts.
//
// The layout of ranks over hosts comes from the rank table when rankTableFile is given, else from
// exchanging HostIdentity() over the engine. The engine is COLLOPS_ENGINE when set; else "mpi"
// when mpirun started ranks on more than one node; else "c10d" when torch.distributed is usable
// for this job — its group named by commDomain, else its default group, with this job's rank and
// rankSize; else there is none and the job is taken to be on one host. COLLOPS_ENGINE=lccl (a test
// and fallback path) uses an lccl communicator over all ranks as the engine, so it only works when
// every rank shares one real host, as in tests that split one machine into pretend hosts with
// COLLOPS_HOST_ID or a table.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/environment.h"
#include "collops/hierarchical_communicator.h"
#include "collops/rank_table.h"
#include "collops/status.h"
#include "collops/topology.h"

namespace collops {
namespace hier {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

CommParam WithBackend(const CommParam& param, const std::string& backend,
                      const std::string& suffix = "") {
  CommParam copy = param;
  copy.backend = backend;
  copy.commDomain += suffix;
  copy.comm = nullptr;
  return copy;
}

/// The launcher says every rank is on this host: mpirun on one node, or torchrun on one node.
bool LauncherSaysOneHost() {
  const std::string ompiSize = Env("OMPI_COMM_WORLD_SIZE");
  if (!ompiSize.empty() && ompiSize == Env("OMPI_COMM_WORLD_LOCAL_SIZE")) return true;
  const std::string worldSize = Env("WORLD_SIZE");
  return !worldSize.empty() && worldSize == Env("LOCAL_WORLD_SIZE");
}

bool MpirunOnSeveralNodes() {
  const std::string ompiSize = Env("OMPI_COMM_WORLD_SIZE");
  return !ompiSize.empty() && ompiSize != Env("OMPI_COMM_WORLD_LOCAL_SIZE");
}

bool UnderMpirun() { return !Env("OMPI_COMM_WORLD_SIZE").empty(); }

/// torch.distributed's group named by commDomain, else its default group (an ATB commDomain is
/// rarely a torch group name), or null when neither fits this job (torch.distributed not
/// initialised, no such group, another size or rank: ERROR_BACKEND_UNAVAILABLE or
/// ERROR_INVALID_PARAM from the c10d factory). `required`: rethrow the first failure instead.
std::shared_ptr<Communicator> CreateC10d(const CommParam& param, bool required) {
  std::exception_ptr first;
  for (const bool defaultGroup : {false, true}) {
    if (defaultGroup && param.commDomain.empty()) break;
    CommParam c10d = WithBackend(param, "c10d");
    if (defaultGroup) c10d.commDomain.clear();
    try {
      return CreateCommunicator(c10d);
    } catch (const Error& e) {
      if (e.status() != ERROR_BACKEND_UNAVAILABLE && e.status() != ERROR_INVALID_PARAM) throw;
      if (!first) first = std::current_exception();
    }
  }
  if (required) std::rethrow_exception(first);
  return nullptr;
}

/// The engine's communicator over every rank, or null when no engine is usable.
/// `tableSpansHosts`: a rank table puts the ranks on several servers, which mpirun's own node
/// count cannot overrule (one machine split into pretend servers needs the engine all the same).
std::shared_ptr<Communicator> CreateEngine(const CommParam& param, bool tableSpansHosts) {
  std::string chosen;
  try {
    chosen = KnobWord("COLLOPS_ENGINE", "");
  } catch (const Error& e) {
    Fail(e.status(), "backend hccl: ", e.what(), " (lccl: every rank on one real host)");
  }
  if (!chosen.empty()) {
    try {
      if (chosen == "c10d") return CreateC10d(param, true);
      return CreateCommunicator(WithBackend(param, chosen, chosen == "lccl" ? "@flat" : ""));
    } catch (const Error& e) {
      Fail(e.status(), "backend hccl: the engine COLLOPS_ENGINE = \"", chosen,
           "\" could not be created: ", e.what());
    }
  }
  if (MpirunOnSeveralNodes() || (tableSpansHosts && UnderMpirun())) {
    try {
      return CreateCommunicator(WithBackend(param, "mpi"));
    } catch (const Error& e) {
      Fail(e.status(), "backend hccl: mpirun started this job ",
           tableSpansHosts ? "and its rank table spans several servers" : "on several nodes",
           ", but its mpi engine could not be created: ", e.what());
    }
  }
  return CreateC10d(param, false);
}

std::vector<std::string> ExchangeIdentities(Communicator& flat) {
  const std::string mine = HostIdentityRecord(HostIdentity());
  std::vector<char> all(kHostIdentityRecordBytes * flat.Size());
  flat.AllGatherBytes(mine.data(), all.data(), kHostIdentityRecordBytes);
  return HostIdentitiesFromRecords(all.data(), flat.Size());
}

/// A table may split one real host into several servers (each gets its own lccl communicator),
/// but ranks it puts on one server must share a host, or their lccl rendezvous would time out.
void CheckTableAgainstHosts(const HostLayout& table, const std::vector<std::string>& identities,
                            const std::string& path) {
  for (int h = 0; h < table.HostCount(); ++h) {
    const std::vector<int> ranks = table.RanksOn(h);
    for (int r : ranks) {
      if (HostKey(identities[r]) != HostKey(identities[ranks.front()])) {
        Fail(ERROR_INVALID_PARAM, "rank table ", path, ": ranks ", ranks.front(), " and ", r,
             " are both on server \"", table.hostNames[h], "\" but run on different hosts (",
             identities[ranks.front()], " and ", identities[r],
             "); lccl cannot connect them — fix the table");
      }
    }
  }
}

std::shared_ptr<Communicator> CreateHierarchical(const CommParam& param,
                                                 std::shared_ptr<Communicator> flat,
                                                 const HostLayout& layout) {
  const int host = layout.hostOfRank[param.rank];
  CommParam intraParam = WithBackend(param, "lccl", Concat("@host", host));
  intraParam.rank = layout.LocalIndex(param.rank);
  intraParam.rankSize = static_cast<int>(layout.RanksOn(host).size());
  intraParam.rankRoot = 0;
  std::shared_ptr<Communicator> intra = CreateCommunicator(intraParam);
  // Every rank's rail: the ranks at its local index, one per host (rail 0 is the leaders).
  const int local = layout.LocalIndex(param.rank);
  std::shared_ptr<Communicator> rail;
  try {
    rail = flat->Split(local, host);
  } catch (const Error& e) {
    // An engine without Split (the lccl test engine) says so on every rank without
    // communicating; each rail then meets in a communicator of its own.
    if (e.status() != ERROR_BACKEND_UNAVAILABLE) throw;
    CommParam railParam = WithBackend(param, flat->BackendName(), Concat("@rail", local));
    railParam.rank = layout.RailRank(param.rank);
    railParam.rankSize = static_cast<int>(layout.HostsOfRail(local).size());
    railParam.rankRoot = 0;
    rail = CreateCommunicator(railParam);
  }
  return MakeHierarchicalCommunicator(std::move(flat), std::move(intra), std::move(rail), layout);
}

/// lccl for a domain that no engine fits, taken to be on this host (docs/backends.md). When the
/// launcher says the job spans hosts, a rendezvous that times out most likely means this domain
/// does too: the error says so, not only which ranks did not arrive.
std::shared_ptr<Communicator> CreateLcclWithoutEngine(const CommParam& lccl) {
  try {
    return CreateCommunicator(lccl);
  } catch (const Error& e) {
    const std::string world = Env("WORLD_SIZE");
    const std::string local = Env("LOCAL_WORLD_SIZE");
    if (e.status() != ERROR_TIMEOUT || world.empty() || local.empty() || world == local) throw;
    const std::string group =
        lccl.commDomain.empty()
            ? std::string("no default torch.distributed group")
            : Concat("no torch.distributed group named \"", lccl.commDomain, "\"");
    Fail(ERROR_TIMEOUT, e.what(), "; backend hccl found no engine between hosts for this domain (",
         group, " of ", lccl.rankSize, " ranks, no mpirun) and took its ranks to be on this host, ",
         "but the launcher says the job spans hosts (WORLD_SIZE=", world,
         ", LOCAL_WORLD_SIZE=", local,
         "): if the domain's ranks are on several hosts, name a torch.distributed group of ",
         "them as commDomain, or run the job under mpirun");
  }
}

std::shared_ptr<Communicator> CreateHccl(const CommParam& param) {
  const CommParam lccl = WithBackend(param, "lccl");
  const std::string& table = param.rankTableFile;
  HostLayout layout;
  if (!table.empty()) {
    layout = LoadRankTable(table, param.rankSize);
    if (layout.SingleHost()) return CreateCommunicator(lccl);
  } else if (LauncherSaysOneHost()) {
    if (KnobValue("COLLOPS_ENGINE") == nullptr) return CreateCommunicator(lccl);
  }
  std::shared_ptr<Communicator> flat = CreateEngine(param, !table.empty());
  if (flat == nullptr) {
    if (table.empty()) return CreateLcclWithoutEngine(lccl);
    Fail(ERROR_BACKEND_UNAVAILABLE, "backend hccl: rank table ", table, " places the ",
         param.rankSize, " ranks on ", layout.HostCount(),
         " hosts, which needs an engine between hosts, and none is usable: run the job under ",
         "mpirun (OpenMPI), or initialise torch.distributed with a default group of the job's ",
         param.rankSize, " ranks, or set COLLOPS_ENGINE=mpi|c10d");
  }
  const std::vector<std::string> identities = ExchangeIdentities(*flat);
  if (table.empty()) {
    layout = LayoutFromIdentities(identities);
    if (layout.SingleHost()) return CreateCommunicator(lccl);
  } else {
    CheckTableAgainstHosts(layout, identities, table);
  }
  return CreateHierarchical(param, std::move(flat), layout);
}

[[maybe_unused]] const bool kRegistered =
    RegisterCommunicatorBackend("hccl", COMM_MULTI_PROCESS, CreateHccl);

}  // namespace
}  // namespace hier
}  // namespace collops
