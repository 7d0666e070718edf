#include "core/comm/shm/fork_guard.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>

namespace collops {
namespace shm {
namespace {

// fd + 1 per slot, 0 = free: plain atomics, because the child handler runs after fork(), where a
// mutex another thread held stays locked forever. Slots come in blocks chained by `next`: a new
// block is allocated and linked (never freed, never unlinked) when every slot is taken, so the
// child handler only ever walks the chain. With a fixed table, the claims of communicators past
// its end stayed with the child, and the parent's next communicator of that rank found its name
// taken by "an earlier communicator of this process".
constexpr int kSlotsPerBlock = 1024;
/// No constructor: the first block is zero-initialised before any code runs (no dynamic
/// initialisation to race with a communicator made by another static initialiser), and
/// `new Block()` value-initialises, which zeroes every slot.
struct Slot {
  std::atomic<int> released;                              ///< fd + 1, 0 = free
  std::atomic<const std::atomic<uint64_t>*> abortRecord;  ///< of the holder of `released`
};
struct Block {
  Slot slots[kSlotsPerBlock];
  std::atomic<Block*> next;
};
Block gFirst;
std::atomic<uint64_t> gGeneration{0};

Block* Next(const Block* block) { return block->next.load(std::memory_order_acquire); }

/// The block after `block`, linked now if there is none yet.
Block* NextOrNew(Block* block) {
  Block* next = Next(block);
  if (next != nullptr) return next;
  auto* fresh = new Block();
  if (block->next.compare_exchange_strong(next, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;  // another thread linked one first
  return next;
}

/// Calls visit(slot) for every slot of the linked blocks, in order, until it returns true;
/// whether one did. Allocates nothing (the child handler uses it).
template <class Visit>
bool AnySlot(Visit&& visit) {
  for (Block* block = &gFirst; block != nullptr; block = Next(block)) {
    for (Slot& slot : block->slots) {
      if (visit(slot)) return true;
    }
  }
  return false;
}

// Async-signal-safe calls only: the child of a multithreaded parent may call nothing else.
void ReleaseClaimsInChild() {
  AnySlot([](Slot& slot) {
    const int stored = slot.released.load(std::memory_order_relaxed);
    slot.abortRecord.store(nullptr, std::memory_order_relaxed);
    if (stored != 0) {
      const int blank = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (blank >= 0) {
        dup3(blank, stored - 1, O_CLOEXEC);
        close(blank);
      }
      slot.released.store(0, std::memory_order_relaxed);
    }
    return false;
  });
  gGeneration.fetch_add(1, std::memory_order_relaxed);
}

/// Whether `fd` is a unix socket bound to the abstract address `name` (without its leading NUL).
bool BoundTo(int fd, const std::string& name) {
  sockaddr_un addr{};
  socklen_t length = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return false;
  if (length < offsetof(sockaddr_un, sun_path)) return false;
  const size_t pathBytes = length - offsetof(sockaddr_un, sun_path);
  return addr.sun_family == AF_UNIX && pathBytes == name.size() + 1 && addr.sun_path[0] == '\0' &&
         std::memcmp(addr.sun_path + 1, name.data(), name.size()) == 0;
}

void InstallOnce() {
  static const bool installed = pthread_atfork(nullptr, nullptr, &ReleaseClaimsInChild) == 0;
  (void)installed;
}

}  // namespace

void ReleaseInForkedChildren(int fd, const std::atomic<uint64_t>* abortRecord) {
  if (fd < 0) return;
  InstallOnce();
  // Links a new block when every slot is taken, unlike AnySlot.
  for (Block* block = &gFirst;; block = NextOrNew(block)) {
    for (Slot& slot : block->slots) {
      int free = 0;
      if (slot.released.compare_exchange_strong(free, fd + 1)) {
        slot.abortRecord.store(abortRecord, std::memory_order_release);
        return;
      }
    }
  }
}

void StopReleasingInForkedChildren(int fd) {
  if (fd < 0) return;  // fd + 1 would match a free slot
  AnySlot([fd](Slot& slot) {
    if (slot.released.load(std::memory_order_relaxed) != fd + 1) return false;
    slot.abortRecord.store(nullptr, std::memory_order_release);  // before the memory goes
    int mine = fd + 1;
    return slot.released.compare_exchange_strong(mine, 0);
  });
}

bool HoldsLiveClaim(const std::string& name) {
  return AnySlot([&name](Slot& slot) {
    const int stored = slot.released.load(std::memory_order_acquire);
    if (stored == 0) return false;
    const std::atomic<uint64_t>* abortRecord = slot.abortRecord.load(std::memory_order_acquire);
    if (abortRecord != nullptr && abortRecord->load(std::memory_order_acquire) != 0) return false;
    return BoundTo(stored - 1, name);
  });
}

uint64_t ForkGeneration() {
  InstallOnce();
  return gGeneration.load(std::memory_order_relaxed);
}

}  // namespace shm
}  // namespace collops
