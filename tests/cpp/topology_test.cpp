// Host identity and host layouts: what hierarchical collectives group ranks by.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "collops/topology.h"

namespace collops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

/// Sets an environment variable for one scope and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

TEST(Topology, HostIdentityNamesBootAndNetworkNamespace) {
  ScopedEnv unset("COLLOPS_HOST_ID", nullptr);
  const std::string identity = HostIdentity();
  EXPECT_THAT(identity, HasSubstr("/netns:"));
  EXPECT_THAT(identity, HasSubstr("@"));
  EXPECT_EQ(identity, HostIdentity()) << "a host's identity is stable";
  const std::string key = HostKey(identity);
  EXPECT_FALSE(key.empty());
  EXPECT_EQ(key.find('@'), std::string::npos);
}

TEST(Topology, HostIdOverrideReplacesTheKeyOnly) {
  std::string real;
  {
    ScopedEnv unset("COLLOPS_HOST_ID", nullptr);
    real = HostIdentity();
  }
  ScopedEnv set("COLLOPS_HOST_ID", "pretend@host");
  const std::string identity = HostIdentity();
  EXPECT_THAT(identity, StartsWith("host-id:pretend_host@"));
  EXPECT_NE(HostKey(identity), HostKey(real));
  EXPECT_EQ(identity.substr(identity.find('@')), real.substr(real.find('@')))
      << "the hostname part still names the machine";
}

TEST(Topology, LayoutNumbersHostsByTheirFirstRank) {
  const HostLayout layout =
      LayoutFromIdentities({"b/netns:1@beta", "a/netns:1@alpha", "b/netns:1@beta",
                            "c/netns:2@gamma", "a/netns:1@alpha"});
  EXPECT_THAT(layout.hostOfRank, ElementsAre(0, 1, 0, 2, 1));
  EXPECT_THAT(layout.hostNames, ElementsAre("beta", "alpha", "gamma"));
  EXPECT_EQ(layout.HostCount(), 3);
  EXPECT_FALSE(layout.SingleHost());
  EXPECT_THAT(layout.RanksOn(1), ElementsAre(1, 4));
  EXPECT_EQ(layout.Leader(0), 0);
  EXPECT_EQ(layout.Leader(1), 1);
  EXPECT_EQ(layout.Leader(2), 3);
  EXPECT_EQ(layout.LocalIndex(2), 1);
  EXPECT_EQ(layout.LocalIndex(4), 1);
  EXPECT_EQ(layout.LocalIndex(3), 0);
}

TEST(Topology, SameBootInAnotherNetworkNamespaceIsAnotherHost) {
  const HostLayout layout = LayoutFromIdentities({"boot/netns:7@h", "boot/netns:8@h"});
  EXPECT_EQ(layout.HostCount(), 2);
}

TEST(Topology, OnlyTheKeyDecidesTheHost) {
  // Two names for one key (a hostname changed mid-job) stay one host.
  const HostLayout layout = LayoutFromIdentities({"k@one", "k@two", "k"});
  EXPECT_TRUE(layout.SingleHost());
  EXPECT_THAT(layout.hostNames, ElementsAre("one"));
  EXPECT_THAT(layout.RanksOn(0), ElementsAre(0, 1, 2));
}

TEST(Topology, NormalizeRenumbersAnyLabels) {
  const HostLayout layout = NormalizeLayout({5, 2, 5, 2}, {"", "", "two", "", "", "five"});
  EXPECT_THAT(layout.hostOfRank, ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(layout.hostNames, ElementsAre("five", "two"));
}

}  // namespace
}  // namespace collops
