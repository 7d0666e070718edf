#include "collops/topology.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include "collops/environment.h"
#include "collops/status.h"

namespace collops {
namespace {

std::string FirstLine(const char* path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

}  // namespace

std::string HostIdentity() {
  std::string key;
  if (const std::string override = KnobText("COLLOPS_HOST_ID"); !override.empty()) {
    key = Concat("host-id:", override);
  } else {
    struct stat netns{};
    const bool haveNetns = stat("/proc/self/ns/net", &netns) == 0;
    std::string boot = FirstLine("/proc/sys/kernel/random/boot_id");
    // Without /proc the hostname is the best guess left (then lccl finds out for itself).
    if (boot.empty()) boot = Concat("hostname:", Hostname());
    key = Concat(boot, "/netns:", haveNetns ? static_cast<unsigned long long>(netns.st_ino) : 0);
  }
  // '@' separates the key from the name; keep it out of the key whatever the override holds.
  for (char& c : key) {
    if (c == '@') c = '_';
  }
  return Concat(key, "@", Hostname());
}

std::string HostKey(const std::string& identity) { return identity.substr(0, identity.find('@')); }

std::string HostIdentityRecord(const std::string& identity) {
  std::string record = identity.substr(0, kHostIdentityRecordBytes - 1);
  record.resize(kHostIdentityRecordBytes, '\0');
  return record;
}

std::vector<std::string> HostIdentitiesFromRecords(const char* records, int count) {
  std::vector<std::string> identities;
  for (int r = 0; r < count; ++r) {
    identities.push_back(
        PeerText(records + r * kHostIdentityRecordBytes, kHostIdentityRecordBytes));
  }
  return identities;
}

std::vector<int> HostLayout::RanksOn(int host) const {
  std::vector<int> ranks;
  for (int r = 0; r < static_cast<int>(hostOfRank.size()); ++r) {
    if (hostOfRank[r] == host) ranks.push_back(r);
  }
  return ranks;
}

int HostLayout::Leader(int host) const {
  for (int r = 0; r < static_cast<int>(hostOfRank.size()); ++r) {
    if (hostOfRank[r] == host) return r;
  }
  Fail(ERROR_INTERNAL_ERROR, "host layout: host ", host, " has no ranks");
}

int HostLayout::LocalIndex(int rank) const {
  int index = 0;
  for (int r = 0; r < rank; ++r) {
    if (hostOfRank[r] == hostOfRank[rank]) ++index;
  }
  return index;
}

std::vector<int> HostLayout::HostsOfRail(int index) const {
  std::vector<int> hosts;
  for (int h = 0; h < HostCount(); ++h) {
    if (static_cast<int>(RanksOn(h).size()) > index) hosts.push_back(h);
  }
  return hosts;
}

int HostLayout::RailRank(int rank) const {
  const std::vector<int> hosts = HostsOfRail(LocalIndex(rank));
  return static_cast<int>(std::find(hosts.begin(), hosts.end(), hostOfRank[rank]) - hosts.begin());
}

bool HostLayout::Uniform() const {
  for (int h = 1; h < HostCount(); ++h) {
    if (RanksOn(h).size() != RanksOn(0).size()) return false;
  }
  return true;
}

HostLayout NormalizeLayout(const std::vector<int>& hostOfRank,
                           const std::vector<std::string>& names) {
  HostLayout layout;
  std::map<int, int> indexOfLabel;
  for (int label : hostOfRank) {
    const auto inserted = indexOfLabel.emplace(label, layout.HostCount());
    if (inserted.second) {
      layout.hostNames.push_back(label < static_cast<int>(names.size()) ? names[label] : "?");
    }
    layout.hostOfRank.push_back(inserted.first->second);
  }
  return layout;
}

HostLayout LayoutFromIdentities(const std::vector<std::string>& identityOfRank) {
  std::map<std::string, int> labelOfKey;
  std::vector<int> labels;
  std::vector<std::string> names;
  for (const std::string& identity : identityOfRank) {
    const auto inserted = labelOfKey.emplace(HostKey(identity), static_cast<int>(names.size()));
    if (inserted.second) {
      const size_t at = identity.find('@');
      names.push_back(at == std::string::npos ? identity : identity.substr(at + 1));
    }
    labels.push_back(inserted.first->second);
  }
  return NormalizeLayout(labels, names);
}

}  // namespace collops
