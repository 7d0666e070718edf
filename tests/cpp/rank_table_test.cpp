// Rank tables (rank_table.h): the HCCL format is read, and every bad table is ERROR_INVALID_PARAM
// naming the file and the problem. Fixtures: tests/cases/rank_tables/.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include <nlohmann/json.hpp>

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

/// The message of the ERROR_INVALID_PARAM that LoadRankTable(path, rankSize) throws, "" (after a
/// failure) when it throws nothing.
std::string LoadRejection(const std::string& path, int rankSize = 1) {
  try {
    LoadRankTable(path, rankSize);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(path)) << "the message names the file";
    return e.what();
  }
  ADD_FAILURE() << path << " was accepted";
  return "";
}

/// The same for the fixture table `name`.
std::string Rejection(const std::string& name, int rankSize) {
  return LoadRejection(Fixture(name), rankSize);
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

/// A fresh directory for one test's files, removed (with what the test put there) at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "collops_rank_table_XXXXXX";
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : "";
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed";
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Opening a FIFO for reading blocked until a writer came: a job hung forever, whatever
// COLLOPS_TIMEOUT said.
TEST(RankTable, FifoIsRefusedAtOnce) {
  ScratchDir dir;
  const std::string fifo = dir.File("table.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto load = std::async(std::launch::async, [&] { return LoadRejection(fifo); });
  if (load.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "LoadRankTable blocked on a FIFO";
    close(open(fifo.c_str(), O_WRONLY));  // a writer that leaves at once releases the reader
  }
  EXPECT_THAT(load.get(), HasSubstr("it is a FIFO, not a regular file"));
}

// A device such as /dev/zero would be read until memory ran out: refused, naming the file.
TEST(RankTable, DeviceIsRefused) {
  EXPECT_THAT(LoadRejection("/dev/zero"),
              HasSubstr("it is a character device, not a regular file"));
}

TEST(RankTable, FileLargerThan64MiBIsRefused) {
  ScratchDir dir;
  const std::string big = dir.File("big.json");
  const int fd = open(big.c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, (off_t{64} << 20) + 1), 0);  // sparse: costs no disk
  close(fd);
  EXPECT_THAT(LoadRejection(big), HasSubstr("larger than 64 MiB"));
}

/// `[[[...0...]]]`, `depth` arrays deep.
std::string Nested(size_t depth) { return std::string(depth, '[') + "0" + std::string(depth, ']'); }

// dump() of a value nested this deep recursed once per level and overflowed the stack (Setup
// crashed). Parsing and destroying such a document do not recurse.
TEST(RankTable, DeeplyNestedValuesAreShownShort) {
  const std::string deep = Nested(200000);
  for (const char* key : {"version", "status", "server_count"}) {
    std::string message;
    try {
      ParseRankTable(Concat("{\"", key, "\": ", deep, ", \"server_list\": []}"), "inline", 1);
      ADD_FAILURE() << key << " nested 200000 deep was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
      message = e.what();
    }
    EXPECT_THAT(message, HasSubstr(Concat(key, " = [[...]]"))) << key;
    EXPECT_LT(message.size(), 300u) << key;
  }
  try {
    ParseRankTable(Concat(R"({"server_count": 1, "server_list": [{"server_id": "a", "device": [)",
                          R"({"device_id": 0, "rank_id": )", deep, "}]}]}"),
                   "inline", 1);
    ADD_FAILURE() << "rank_id nested 200000 deep was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("server_list[0].device[0].rank_id = [[...]] is not"));
  }
}

TEST(RankTable, NumberTooLargeForADoubleIsInvalidParam) {
  try {
    ParseRankTable(R"({"server_count": 1e400, "server_list": []})", "inline", 1);
    ADD_FAILURE() << "1e400 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("rank table inline: malformed JSON"), HasSubstr("1e400")));
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
  EXPECT_THAT(
      Rejection("rank_id_missing.json", 4),
      HasSubstr("rank_id 2 is missing (ranks 0..3 must each appear once; the table lists 3)"));
}

// A file's bytes quoted in the message are escaped where they are not UTF-8: a torch caller's
// JSON report of the error failed on them (type_error 316) and replaced the real error.
TEST(RankTable, AFileThatIsNotUtf8GivesAUtf8Message) {
  const std::string text =
      "{\"server_count\": \"1\", \"server_list\": [{\"server_id\": \"\xFF\xFE\", \"device\": []}]}";
  std::string message;
  try {
    ParseRankTable(text, "inline", 1);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_THAT(message, HasSubstr("rank table inline: malformed JSON")) << message;
  EXPECT_THAT(message, HasSubstr("\\xFF")) << message;
  EXPECT_NO_THROW((void)nlohmann::json(message).dump()) << message;
}

// A rankSize far beyond what the table lists (a typo, or a hostile value) is refused by comparing
// it with the table's entries, before anything is allocated for it: under an address-space limit
// of 256 MiB more than the process uses, the loader allocated 1 GiB (2^28 ranks) or 8 GiB
// (2^31 - 1) and failed with bad_alloc instead.
TEST(RankTableSize, AHugeRankSizeIsRefusedBeforeAnythingIsSizedByIt) {
  for (const int rankSize : {1 << 28, 2147483647}) {
    const pid_t child = fork();
    if (child == 0) {
      std::ifstream status("/proc/self/status");
      std::string line;
      rlim_t used = 0;
      while (std::getline(status, line)) {
        if (line.rfind("VmSize:", 0) == 0) used = std::stoull(line.substr(7)) * 1024;
      }
      const rlim_t room = used + (rlim_t{256} << 20);
      const rlimit limit{room, room};
      if (used == 0 || setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
      int code = 1;
      try {
        LoadRankTable(Fixture("rank_id_missing.json"), rankSize);
      } catch (const Error& e) {
        const bool named = std::string(e.what()).find("rank_id 2 is missing") != std::string::npos;
        code = e.status() == ERROR_INVALID_PARAM && named ? 0 : 2;
      } catch (const std::bad_alloc&) {
        code = 4;
      }
      _exit(code);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "rankSize " << rankSize << ": killed by a signal";
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "rankSize " << rankSize
        << ": 1 = accepted, 2 = another error, 3 = no limit set, 4 = out of memory first";
  }
}

}  // namespace
}  // namespace collops
