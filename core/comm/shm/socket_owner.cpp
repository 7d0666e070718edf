#include "core/comm/shm/socket_owner.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/comm/shm/process_fd.h"

namespace collops {
namespace shm {

std::optional<uid_t> AbstractListenerUid(const std::string& name) {
  UniqueFd fd(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!fd.Valid()) return std::nullopt;
  timeval timeout{1, 0};  // the kernel answers at once; never let a question outlast a rendezvous
  setsockopt(fd.Get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  struct {
    nlmsghdr header;
    unix_diag_req request;
  } query{};
  query.header.nlmsg_len = sizeof query;
  query.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  query.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  query.request.sdiag_family = AF_UNIX;
  query.request.udiag_states = 1u << TCP_LISTEN;
  query.request.udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_UID;
  if (send(fd.Get(), &query, sizeof query, 0) != static_cast<ssize_t>(sizeof query)) {
    return std::nullopt;
  }
  const std::string wanted = std::string(1, '\0') + name;
  std::optional<uid_t> owner;
  std::vector<char> buffer(32 << 10);
  for (;;) {
    const ssize_t got = recv(fd.Get(), buffer.data(), buffer.size(), 0);
    if (got <= 0) return owner;
    int left = static_cast<int>(got);
    for (auto* message = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(message, left);
         message = NLMSG_NEXT(message, left)) {
      if (message->nlmsg_type == NLMSG_DONE || message->nlmsg_type == NLMSG_ERROR) return owner;
      if (message->nlmsg_len < NLMSG_LENGTH(sizeof(unix_diag_msg))) continue;
      const auto* socketInfo = static_cast<const unix_diag_msg*>(NLMSG_DATA(message));
      int attributesLeft = static_cast<int>(message->nlmsg_len - NLMSG_LENGTH(sizeof *socketInfo));
      bool named = false;
      std::optional<uid_t> uid;
      for (auto* attribute = reinterpret_cast<rtattr*>(const_cast<unix_diag_msg*>(socketInfo + 1));
           RTA_OK(attribute, attributesLeft); attribute = RTA_NEXT(attribute, attributesLeft)) {
        const size_t bytes = RTA_PAYLOAD(attribute);
        if (attribute->rta_type == UNIX_DIAG_NAME) {
          named =
              bytes == wanted.size() && std::memcmp(RTA_DATA(attribute), wanted.data(), bytes) == 0;
        } else if (attribute->rta_type == UNIX_DIAG_UID && bytes >= sizeof(uint32_t)) {
          uint32_t value = 0;
          std::memcpy(&value, RTA_DATA(attribute), sizeof value);
          uid = static_cast<uid_t>(value);
        }
      }
      if (named && uid) owner = uid;
    }
  }
}

}  // namespace shm
}  // namespace collops
