// Backend "mpi": the factory behind CreateCommunicator({backend: "mpi"}) — MPI_COMM_WORLD split
// by commDomain — and MakeMpiCommunicator(), which adopts the caller's MPI_Comm.
//
// Creating a communicator is collective over MPI_COMM_WORLD, like the MPI_Comm_split it runs:
// every process of the job creates one at the same point, each with its own domain. The domains
// themselves are exchanged (not hashed), so the split color is each domain's index among the
// distinct domains: two domains can never collide. The params are then checked against the
// split, with the same verdict on every member, so a bad param fails everywhere instead of
// hanging a peer.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/mpi_communicator.h"
#include "collops/status.h"
#include "core/comm/mpi/mpi_comm.h"
#include "core/comm/mpi/mpi_runtime.h"
#include "core/comm/mpi/mpi_types.h"
#include "core/comm/mpi/mpi_watchdog.h"

namespace collops {
namespace mpi {
namespace {

/// What one MPI_COMM_WORLD process asked for.
struct Request {
  int worldRank;
  int64_t rank;
  int64_t rankSize;
  std::string domain;
};

std::vector<Request> ExchangeRequests(MPI_Comm world, const CommParam& param) {
  int worldSize = 0;
  CheckMpi(MPI_Comm_size(world, &worldSize), "MPI_Comm_size");
  const int64_t mine[3] = {param.rank, param.rankSize,
                           static_cast<int64_t>(param.commDomain.size())};
  std::vector<int64_t> fields(3 * static_cast<size_t>(worldSize));
  CheckMpi(MPI_Allgather(mine, 3, MPI_INT64_T, fields.data(), 3, MPI_INT64_T, world),
           "MPI_Allgather");
  std::vector<int> lengths(worldSize), displs(worldSize);
  int total = 0;
  for (int w = 0; w < worldSize; ++w) {
    lengths[w] = static_cast<int>(fields[3 * w + 2]);
    displs[w] = total;
    total += lengths[w];
  }
  std::string domains(static_cast<size_t>(total), '\0');
  CheckMpi(MPI_Allgatherv(param.commDomain.data(), static_cast<int>(param.commDomain.size()),
                          MPI_CHAR, domains.data(), lengths.data(), displs.data(), MPI_CHAR, world),
           "MPI_Allgatherv");
  std::vector<Request> requests;
  for (int w = 0; w < worldSize; ++w) {
    requests.push_back(
        {w, fields[3 * w], fields[3 * w + 1], domains.substr(displs[w], lengths[w])});
  }
  return requests;
}

/// The index of `domain` among the distinct domains: the same on every process.
int ColorOf(const std::vector<Request>& requests, const std::string& domain) {
  std::vector<std::string> distinct;
  for (const Request& r : requests) distinct.push_back(r.domain);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  return static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), domain) -
                          distinct.begin());
}

std::string WorldRanks(const std::vector<const Request*>& members) {
  std::string text;
  for (const Request* m : members) text += Concat(text.empty() ? "" : ", ", m->worldRank);
  return text;
}

/// Throws ERROR_INVALID_PARAM unless every member of this process's domain passes rankSize =
/// the member count and the members' ranks are 0..n-1 (the order MPI_Comm_split gives them with
/// key = rank). Checks this process first, so its own bad field is the one named.
void CheckMembers(const std::vector<Request>& requests, int me) {
  const std::string& domain = requests[me].domain;
  std::vector<const Request*> members;  // in MPI's order: by (rank, world rank)
  for (const Request& r : requests) {
    if (r.domain == domain) members.push_back(&r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [](const Request* a, const Request* b) { return a->rank < b->rank; });
  std::vector<const Request*> order = {&requests[me]};
  for (const Request* m : members) {
    if (m != &requests[me]) order.push_back(m);
  }
  const auto n = static_cast<int64_t>(members.size());
  const std::string where = Concat("mpi backend, commDomain \"", domain, "\": ");
  for (const Request* m : order) {
    if (m->rankSize == n) continue;
    const bool singleton = requests.size() == 1 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr;
    Fail(ERROR_INVALID_PARAM, where, "rankSize = ", m->rankSize, " on MPI_COMM_WORLD rank ",
         m->worldRank, ", but MPI has ", n, " process", n == 1 ? "" : "es",
         " in this domain (MPI_COMM_WORLD rank", n == 1 ? " " : "s ", WorldRanks(members), ")",
         singleton ? "; this process was not launched by mpirun, so it is an MPI singleton and "
                     "rankSize must be 1"
                   : "");
  }
  for (const Request* m : order) {
    const auto mpiRank = std::find(members.begin(), members.end(), m) - members.begin();
    if (m->rank == mpiRank) continue;
    std::vector<const Request*> same;
    for (const Request* other : members) {
      if (other->rank == m->rank) same.push_back(other);
    }
    Fail(ERROR_INVALID_PARAM, where, "rank = ", m->rank, " on MPI_COMM_WORLD rank ", m->worldRank,
         ", but MPI ranks that process ", mpiRank, " of ", n,
         " (the ranks of a domain must be 0..rankSize-1, each passed once; rank ", m->rank,
         " is passed by MPI_COMM_WORLD rank", same.size() == 1 ? " " : "s ", WorldRanks(same), ")");
  }
}

std::shared_ptr<Communicator> CreateFromWorld(const CommParam& param) {
  (void)MaxCount();  // a bad COLLOPS_MPI_MAX_COUNT fails here, not inside a collective
  EnsureMpi();
  std::vector<Request> requests;
  int worldRank = 0;
  std::shared_ptr<Communicator> comm;
  {
    const CallWatch watch("communicator creation", param.rank, param.rankSize);
    auto lock = SerialiseMpi();
    const MPI_Comm world = PrivateWorld();
    CheckMpi(MPI_Comm_rank(world, &worldRank), "MPI_Comm_rank");
    requests = ExchangeRequests(world, param);
    // Every process splits (even one whose params are bad), so no peer is left waiting in here.
    MPI_Comm sub = MPI_COMM_NULL;
    CheckMpi(MPI_Comm_split(world, ColorOf(requests, param.commDomain), param.rank, &sub),
             "MPI_Comm_split");
    comm = WrapOwnedComm(sub);
  }
  // Outside the lock: a failed check frees `comm`, whose destructor takes the lock itself.
  CheckMembers(requests, worldRank);
  return comm;
}

[[maybe_unused]] const bool kRegistered =
    RegisterCommunicatorBackend("mpi", COMM_MULTI_PROCESS, &CreateFromWorld);

}  // namespace
}  // namespace mpi

std::shared_ptr<Communicator> MakeMpiCommunicator(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL)
    Fail(ERROR_INVALID_PARAM, "MakeMpiCommunicator: comm is MPI_COMM_NULL");
  (void)mpi::MaxCount();
  mpi::EnsureMpi();
  auto lock = mpi::SerialiseMpi();
  int inter = 0;
  mpi::CheckMpi(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter");
  if (inter) {
    Fail(ERROR_INVALID_PARAM,
         "MakeMpiCommunicator: comm is an intercommunicator; collectives "
         "need an intracommunicator");
  }
  MPI_Comm dup = MPI_COMM_NULL;
  mpi::CheckMpi(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return mpi::WrapOwnedComm(dup);
}

}  // namespace collops
