// Rank tables (rank_table.h): the HCCL format is read, and every bad table is ERROR_INVALID_PARAM
// naming the file and the problem. Fixtures: tests/cases/rank_tables/.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "collops/rank_table.h"
#include "collops/status.h"

namespace collops {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return std::string(COLLOPS_SOURCE_DIR) + "/tests/cases/rank_tables/" + name;
}

/// The message of the ERROR_INVALID_PARAM that loading `name` for `rankSize` ranks throws.
std::string Rejection(const std::string& name, int rankSize) {
  try {
    LoadRankTable(Fixture(name), rankSize);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(name)) << "the message names the file";
    return e.what();
  }
  ADD_FAILURE() << name << " was accepted";
  return "";
}

TEST(RankTable, HcclTableWithStringNumbersAndExtraKeys) {
  const HostLayout layout = LoadRankTable(Fixture("two_servers.json"), 4);
  EXPECT_THAT(layout.hostOfRank, ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(layout.hostNames, ElementsAre("10.231.0.1", "10.231.0.2"));
  EXPECT_THAT(layout.RanksOn(1), ElementsAre(1, 3));
}

TEST(RankTable, IntegerNumbersAndUnevenServers) {
  const HostLayout layout = LoadRankTable(Fixture("three_servers_uneven.json"), 6);
  EXPECT_THAT(layout.hostOfRank, ElementsAre(0, 0, 1, 2, 2, 2));
  EXPECT_THAT(layout.hostNames, ElementsAre("node-a", "node-b", "node-c"));
}

TEST(RankTable, HostsAreNumberedByTheirLowestRank) {
  // The second server listed holds rank 0, so it is host 0.
  const HostLayout layout = ParseRankTable(
      R"({"server_count": 2, "server_list": [
            {"server_id": "x", "device": [{"device_id": 0, "rank_id": 1}]},
            {"server_id": "y", "device": [{"device_id": 0, "rank_id": 0}]}]})",
      "inline", 2);
  EXPECT_THAT(layout.hostOfRank, ElementsAre(0, 1));
  EXPECT_THAT(layout.hostNames, ElementsAre("y", "x"));
}

TEST(RankTable, ServerWithoutDevicesHostsNoRank) {
  const HostLayout layout = ParseRankTable(
      R"({"server_count": 2, "server_list": [
            {"server_id": "idle", "device": []},
            {"server_id": "busy", "device": [{"device_id": 0, "rank_id": 0}]}]})",
      "inline", 1);
  EXPECT_TRUE(layout.SingleHost());
  EXPECT_THAT(layout.hostNames, ElementsAre("busy"));
}

TEST(RankTable, UnreadableFile) {
  EXPECT_THAT(Rejection("no_such_table.json", 2), HasSubstr("cannot be read"));
}

TEST(RankTable, DirectoryIsUnreadable) {
  try {
    LoadRankTable(std::string(COLLOPS_SOURCE_DIR) + "/tests/cases/rank_tables", 2);
    ADD_FAILURE() << "a directory was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
    EXPECT_THAT(e.what(), HasSubstr("cannot be read"));
  }
}

TEST(RankTable, MalformedJsonGivesTheByteOffset) {
  EXPECT_THAT(Rejection("malformed.json", 1), HasSubstr("malformed JSON at byte offset 122"));
}

TEST(RankTable, TopLevelMustBeAnObject) {
  EXPECT_THAT(Rejection("not_an_object.json", 1), HasSubstr("must be an object, not array"));
}

TEST(RankTable, MissingServerList) {
  EXPECT_THAT(Rejection("missing_server_list.json", 1), HasSubstr("no \"server_list\""));
}

TEST(RankTable, MissingServerCount) {
  EXPECT_THAT(Rejection("missing_server_count.json", 1), HasSubstr("no \"server_count\""));
}

TEST(RankTable, MissingServerId) {
  EXPECT_THAT(Rejection("missing_server_id.json", 1),
              HasSubstr("server_list[0] has no \"server_id\""));
}

TEST(RankTable, MissingRankIdKey) {
  EXPECT_THAT(Rejection("missing_rank_id_key.json", 2),
              HasSubstr("server_list[0].device[1] has no \"rank_id\""));
}

TEST(RankTable, RankIdMustBeANumber) {
  EXPECT_THAT(Rejection("bad_rank_id.json", 2),
              AllOf(HasSubstr("server_list[0].device[1].rank_id = \"one\""),
                    HasSubstr("not a non-negative integer")));
}

TEST(RankTable, ServerCountDisagreesWithServerList) {
  EXPECT_THAT(Rejection("server_count_mismatch.json", 2),
              HasSubstr("server_count = 3 but server_list has 2 servers"));
}

TEST(RankTable, ServerIdListedTwice) {
  EXPECT_THAT(Rejection("duplicate_server_id.json", 2),
              HasSubstr("server_id \"a\" is listed twice (server_list[0] and [1])"));
}

TEST(RankTable, StatusMustBeCompleted) {
  EXPECT_THAT(Rejection("status_initializing.json", 2),
              HasSubstr("status = \"initializing\"; only a \"completed\" table"));
}

TEST(RankTable, DuplicateRankIdNamesBothServers) {
  EXPECT_THAT(Rejection("duplicate_rank_id.json", 4),
              HasSubstr("rank_id 1 appears twice: on server \"node-a\" and on server \"node-b\""));
}

TEST(RankTable, RankSizeDisagreesWithTheTable) {
  EXPECT_THAT(Rejection("two_servers.json", 8),
              HasSubstr("the table describes 4 ranks (rank_id 0..3) but rankSize = 8"));
  EXPECT_THAT(Rejection("two_servers.json", 2),
              HasSubstr("the table describes 4 ranks (rank_id 0..3) but rankSize = 2"));
}

TEST(RankTable, RankIdOutOfRange) {
  EXPECT_THAT(Rejection("rank_id_out_of_range.json", 4),
              HasSubstr("rank_id 5 on server \"node-b\" is outside [0, rankSize = 4)"));
}

TEST(RankTable, RankIdMissing) {
  EXPECT_THAT(Rejection("rank_id_missing.json", 4),
              HasSubstr("rank_id 2 is missing (ranks 0..3 must each appear once)"));
}

}  // namespace
}  // namespace collops
