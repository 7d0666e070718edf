#include "core/comm/shm/thread_group.h"

#include <sched.h>

#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <utility>

namespace collops {
namespace shm {
namespace {

// Groups still forming, keyed by (commDomain, rankSize). A group leaves the registry the moment
// its last rank joins (or its rendezvous times out), so the same domain can form a new group later
// while the old one is still in use.
struct Registry {
  std::mutex mutex;
  std::map<std::pair<std::string, int>, std::shared_ptr<ThreadGroup>> forming;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: rank threads may outlive main()
  return *registry;
}

int UsableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

std::string DescribeGroup(const std::string& domain, int size) {
  return Concat("lccl thread group '", domain, "' (", size, size == 1 ? " rank)" : " ranks)");
}

}  // namespace

std::string FormatSeconds(double seconds) { return Concat(seconds, " s"); }

const char* InternedName(const std::string& name) {
  static std::mutex* mutex = new std::mutex;  // never destroyed: rank threads may outlive main()
  static std::set<std::string>* names = new std::set<std::string>;
  std::lock_guard<std::mutex> lock(*mutex);
  return names->insert(name).first->c_str();
}

ThreadGroup::ThreadGroup(std::string domain, int size)
    : domain_(std::move(domain)),
      size_(size),
      budget_(WaitBudget::Default(size > UsableCpus())),
      slots_(size),
      channels_(static_cast<size_t>(size) * size),
      claimed_(size, false) {}

std::string ThreadGroup::Describe() const { return DescribeGroup(domain_, size_); }

std::shared_ptr<ThreadGroup> ThreadGroup::Join(const CommParam& param) {
  const int size = param.rankSize;
  const int rank = param.rank;
  // Before the group exists: it holds rankSize^2 channels.
  if (size <= 0 || size > kMaxLcclRanks) {
    Fail(ERROR_INVALID_PARAM, DescribeGroup(param.commDomain, size), ": rankSize = ", size,
         " must be in [1, ", kMaxLcclRanks, "] (the most ranks an lccl communicator has)");
  }
  if (rank < 0 || rank >= size) {
    Fail(ERROR_INVALID_PARAM, DescribeGroup(param.commDomain, size), ": rank = ", rank,
         " must be in [0, ", size, ")");
  }

  Registry& registry = TheRegistry();
  const auto key = std::make_pair(param.commDomain, size);
  std::shared_ptr<ThreadGroup> group;
  bool complete = false;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    std::shared_ptr<ThreadGroup>& entry = registry.forming[key];
    if (!entry) entry = std::make_shared<ThreadGroup>(param.commDomain, size);
    group = entry;
    if (group->claimed_[rank]) {
      // One of the two threads is some other rank (or no rank of this group), so the group cannot
      // form as meant: the ranks waiting in it learn so now rather than at the timeout.
      registry.forming.erase(key);
      group->Break(ERROR_RANK_MISMATCH,
                   Concat(group->Describe(), ": a second thread joined as rank ", rank,
                          " while the group was forming, so it cannot form; every thread must ",
                          "pass its own rank"));
      Fail(ERROR_INVALID_PARAM, group->Describe(), ": rank ", rank,
           " joined twice (another thread already holds rank ", rank,
           " of the group that is forming)");
    }
    group->claimed_[rank] = true;
    complete = group->joined_.fetch_add(1, std::memory_order_acq_rel) + 1 == size;
    if (complete) registry.forming.erase(key);
  }
  if (complete) {
    group->joinWord_.Notify();
    return group;
  }

  const double timedOut = group->WaitFor(
      group->joinWord_, [&] { return group->joined_.load(std::memory_order_acquire) == size; },
      rank);
  if (timedOut == 0) return group;

  std::vector<int> missing;
  std::string otherSizes;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    // The last rank may have joined between the deadline and this lock.
    if (group->joined_.load(std::memory_order_acquire) == size) return group;
    const auto it = registry.forming.find(key);
    if (it != registry.forming.end() && it->second == group) registry.forming.erase(it);
    // Erased, so nobody can claim another slot: claimed_ is final from here on.
    for (int r = 0; r < size; ++r) {
      if (!group->claimed_[r]) missing.push_back(r);
    }
    // Threads that passed another rankSize wait in a group of their own and would only be
    // reported missing here; name them.
    for (const auto& [otherKey, other] : registry.forming) {
      if (otherKey.first != param.commDomain || otherKey.second == size) continue;
      std::vector<int> joined;
      for (int r = 0; r < otherKey.second; ++r) {
        if (other->claimed_[r]) joined.push_back(r);
      }
      otherSizes += Concat("; ", FormatRanks(joined), " of this domain joined with rankSize ",
                           otherKey.second, " instead of ", size);
    }
  }
  if (!otherSizes.empty()) otherSizes += ": every rank must pass the same rankSize";
  group->BreakAndThrow(
      ERROR_TIMEOUT, Concat(group->Describe(), ": ", FormatRanks(missing), " did not join within ",
                            FormatSeconds(timedOut), otherSizes));
}

void ThreadGroup::Sync(int rank, const char* what) {
  ThrowIfBroken();
  RankSlot& mine = slots_[rank];
  const uint64_t k = mine.syncs.load(std::memory_order_relaxed) + 1;
  mine.syncs.store(k, std::memory_order_relaxed);
  // acq_rel: the release publishes this rank's slot; the last arriver's acquire collects every
  // rank's release before it opens the sync point with its own release store.
  if (arrivals_.fetch_add(1, std::memory_order_acq_rel) + 1 == k * size_) {
    // A pending break is applied before the sync point opens, so every rank leaves with it.
    if (pendingBreak_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(brokenMutex_);
      if (!broken_.load(std::memory_order_relaxed)) {
        brokenStatus_ = pendingStatus_;
        brokenMessage_ = pendingMessage_;
        broken_.store(true, std::memory_order_release);
      }
    }
    generation_.store(k, std::memory_order_release);
    syncWord_.Notify();
    ThrowIfBroken();
    return;
  }
  // Marked until the timeout is reported: a peer timing out at the same moment reads the mark.
  const WaitingMark waiting(mine, what);
  const double timedOut =
      WaitFor(syncWord_, [&] { return generation_.load(std::memory_order_acquire) >= k; }, rank);
  if (timedOut == 0) {
    ThrowIfBroken();
    return;
  }

  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (slots_[r].syncs.load(std::memory_order_relaxed) < k) missing.push_back(r);
  }
  BreakAndThrow(ERROR_TIMEOUT, Concat(Describe(), ": ", what, " on rank ", rank,
                                      " timed out after ", FormatSeconds(timedOut), " waiting for ",
                                      FormatRanks(missing), " to arrive", Whereabouts(missing)));
}

std::string ThreadGroup::Whereabouts(const std::vector<int>& ranks) const {
  std::string text;
  size_t shown = 0;
  for (int r : ranks) {
    const char* what = slots_[r].waitingIn.load(std::memory_order_acquire);
    if (what == nullptr) continue;
    if (shown++ == kListedRanks) {
      text += "; and more ranks are waiting in calls of this group";
      break;
    }
    const int peer = slots_[r].waitingPeer.load(std::memory_order_relaxed);
    text += Concat("; rank ", r, " is waiting in ", what);
    if (peer >= 0)
      text += Concat(std::strcmp(what, "Send") == 0 ? " to rank " : " from rank ", peer);
  }
  return text;
}

void ThreadGroup::ThrowIfBroken() const {
  if (!Broken()) return;
  std::lock_guard<std::mutex> lock(brokenMutex_);
  throw Error(brokenStatus_, brokenMessage_);
}

void ThreadGroup::Break(Status status, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(brokenMutex_);
    if (!broken_.load(std::memory_order_relaxed)) {
      brokenStatus_ = status;
      brokenMessage_ = message;
      broken_.store(true, std::memory_order_release);
    }
  }
  WakeAll();
}

void ThreadGroup::BreakAndThrow(Status status, const std::string& message) {
  Break(status, message);
  ThrowIfBroken();
  throw Error(status, message);  // not reached: the group is broken by now
}

void ThreadGroup::SyncThenBreak(int rank, const char* what, Status status,
                                const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(brokenMutex_);
    if (!pendingBreak_.load(std::memory_order_relaxed)) {
      pendingStatus_ = status;
      pendingMessage_ = message;
      pendingBreak_.store(true, std::memory_order_release);
    }
  }
  Sync(rank, what);
  BreakAndThrow(status, message);  // not reached: the Sync throws the group's error
}

void ThreadGroup::WakeAll() {
  syncWord_.Notify();
  joinWord_.Notify();
  for (RankSlot& slot : slots_) slot.word.Notify();
}

}  // namespace shm
}  // namespace collops
