// How a torch.distributed group's ranks agree on their token (group_join.h).
#include "group_join.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "collops/backend.h"
#include "collops/status.h"

namespace collops {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kTokenKey[] = "collops/comm_domain";      // the token being joined, or kFinished
constexpr char kFinished[] = "finished";                 // rank 0 released the ranks of that token
constexpr char kJoinedPrefix[] = "collops/joined/";      // + token + "/" + rank: that rank took it
constexpr char kReleasedPrefix[] = "collops/released/";  // + token: every rank took it
constexpr char kHostKeyPrefix[] = "collops/host_identity/";

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string JoinedKey(const std::string& token, int rank) {
  return Concat(kJoinedPrefix, token, "/", rank);
}

std::string RandomToken() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      Clock::now().time_since_epoch().count());
  return Concat("c10d.", std::hex, gen(), gen());
}

// Polls until `done()` holds or the deadline passes (false then). Store waits cannot wait for
// either of two keys, or for a key to change, so the ranks poll: 1 ms at first, then up to 20 ms.
template <class Done>
bool PollUntil(Clock::time_point deadline, Done done) {
  auto pause = std::chrono::milliseconds(1);
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

std::string JoinGroup(c10d::Store& store, int rank, int size, double timeoutSeconds) {
  const char* source = nullptr;
  const double seconds = CommTimeoutSeconds(timeoutSeconds, &source);
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(seconds));
  if (rank == 0) {
    const std::string token = RandomToken();
    store.set(kTokenKey, Bytes(token));
    std::vector<std::string> joined;
    for (int r = 1; r < size; ++r) joined.push_back(JoinedKey(token, r));
    // One Store round trip per poll for all ranks; which ones are missing only matters at the end.
    if (!PollUntil(deadline, [&] { return store.check(joined); })) {
      std::string names;
      for (int r = 1; r < size; ++r) {
        if (!store.check({joined[r - 1]})) names += Concat(names.empty() ? "" : ", ", r);
      }
      Fail(ERROR_TIMEOUT, "collops backend: group of ", size, " ranks: rank(s) ", names,
           " did not join within ", seconds, " s (", source, "); this is rank 0");
    }
    // Finished before released: a token still published was never released (group_join.h).
    store.set(kTokenKey, Bytes(kFinished));
    store.set(Concat(kReleasedPrefix, token), Bytes("1"));
    for (const std::string& key : joined) store.deleteKey(key);
    return token;
  }
  std::string taken;  // the token this rank last took, "" before any
  const bool released = PollUntil(deadline, [&] {
    if (!taken.empty() && store.check({Concat(kReleasedPrefix, taken)})) return true;
    // Once published the key is never deleted, so this get does not wait.
    if (!store.check({kTokenKey})) return false;
    const std::vector<uint8_t> value = store.get(kTokenKey);
    const std::string published(value.begin(), value.end());
    if (published != kFinished && published != taken) {
      taken = published;
      store.set(JoinedKey(taken, rank), Bytes("1"));
    }
    return false;
  });
  if (!released) {
    Fail(ERROR_TIMEOUT, "collops backend: group of ", size, " ranks: rank 0 did not ",
         taken.empty() ? "publish the group's token" : "release the group", " within ", seconds,
         " s (", source, "); this is rank ", rank);
  }
  return taken;
}

HostLayout ExchangeHostLayout(c10d::Store& store, const std::string& token, int rank, int size) {
  const std::string mine = HostIdentity();
  store.set(Concat(kHostKeyPrefix, token, "/", rank), Bytes(mine));
  std::vector<std::string> identities;
  for (int r = 0; r < size; ++r) {
    std::vector<uint8_t> v = store.get(Concat(kHostKeyPrefix, token, "/", r));
    identities.emplace_back(v.begin(), v.end());
  }
  // The default group's rank 0 usually hosts the Store (torchrun, tcp://, env://): were it to
  // return, and perhaps exit, while a peer still reads the identities, that peer would fail
  // inside init_process_group on a closed connection. The last reader lets rank 0 go.
  const std::string read = Concat(kHostKeyPrefix, token, "/read");
  if (store.add(read, 1) == size) store.set(read + "/all", Bytes("1"));
  if (rank == 0) store.wait({read + "/all"});
  return LayoutFromIdentities(identities);
}

}  // namespace collops
