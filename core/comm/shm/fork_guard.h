// What a child of fork() must not take over from the lccl communicators its parent made. A
// DataLoader worker, a subprocess pool or a plain fork in a rank copies them all; the child may
// live on after the parent is done with them.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace collops {
namespace shm {

/// From now on, every child of fork() gives up `fd`: the number is made to refer to a fresh,
/// unbound socket, so the child neither keeps what `fd` held (a claim socket keeps its rank's
/// name taken while any process has it open) nor later closes a number that was reused.
/// `abortRecord`, when given, is the word that turns nonzero once the communicator holding the
/// claim is over (HoldsLiveClaim); it must stay valid until StopReleasingInForkedChildren.
void ReleaseInForkedChildren(int fd, const std::atomic<uint64_t>* abortRecord = nullptr);
/// Undoes ReleaseInForkedChildren, before `fd` is closed.
void StopReleasingInForkedChildren(int fd);

/// True when one of the descriptors given to ReleaseInForkedChildren (the claims of this
/// process's communicators) is bound to the abstract unix address `name` (without its leading
/// NUL) and its communicator is not over (its abort record is still zero).
bool HoldsLiveClaim(const std::string& name);

/// 0 in a process that was not forked from one that asked; bumped in each child of fork():
/// a communicator made in another generation belongs to another process.
uint64_t ForkGeneration();

}  // namespace shm
}  // namespace collops
