// Who holds an abstract unix socket name, asked of the kernel's socket table (sock_diag) rather
// than of the socket itself: a listener that never accepts can be named without connecting to it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace collops {
namespace shm {

/// The uid that owns the listening socket bound to the abstract name `name` (without its leading
/// NUL) in this network namespace; nullopt when there is none or the kernel does not say
/// (sock_diag's UNIX_DIAG_UID needs Linux 5.3).
std::optional<uid_t> AbstractListenerUid(const std::string& name);

}  // namespace shm
}  // namespace collops
