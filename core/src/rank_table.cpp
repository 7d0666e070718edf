#include "collops/rank_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/param_json.h"
#include "collops/status.h"
#include "core/comm/shm/process_fd.h"

namespace collops {
namespace {

using nlohmann::json;

/// A table of 4096 ranks is well under 1 MiB; anything this large is not a rank table, and reading
/// it whole (a log file named by mistake) would only exhaust memory.
constexpr off_t kMaxRankTableBytes = off_t{64} << 20;

/// Every message starts with the file, so a job with several tables says which one is wrong.
template <class... Args>
[[noreturn]] void Bad(const std::string& path, Args&&... args) {
  Fail(ERROR_INVALID_PARAM, "rank table ", path, ": ", std::forward<Args>(args)...);
}

const json& Member(const json& object, const char* key, const std::string& where,
                   const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end()) Bad(path, where, " has no \"", key, "\"");
  return *it;
}

/// HCCL writes numbers as strings ("rank_id": "3"); hand-written tables use integers.
long long Number(const json& value, const std::string& where, const std::string& path) {
  if (value.is_number_integer() && value.get<long long>() >= 0) return value.get<long long>();
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    bool digits = !text.empty() && text.size() <= 9;
    for (char c : text) digits = digits && c >= '0' && c <= '9';
    if (digits) return std::stoll(text);
  }
  Bad(path, where, " = ", ShowJson(value),
      " is not a non-negative integer (or a string of digits)");
}

std::string Text(const json& value, const std::string& where, const std::string& path) {
  if (!value.is_string()) Bad(path, where, " = ", ShowJson(value), " must be a string");
  return value.get<std::string>();
}

/// "a FIFO", for a file that is not a regular one.
const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/// The whole file open at `fd`.
std::string ReadRegularFile(int fd, const std::string& path) {
  struct stat info;
  if (fstat(fd, &info) != 0) Bad(path, "cannot be read: ", std::strerror(errno));
  // A FIFO would block until a writer came (COLLOPS_TIMEOUT bounds only waits for peers), and a
  // device such as /dev/zero never ends.
  if (!S_ISREG(info.st_mode)) {
    Bad(path, "cannot be read: it is ", FileKind(info.st_mode), ", not a regular file");
  }
  auto tooLarge = [&] {
    Bad(path, "cannot be read: it is larger than ", kMaxRankTableBytes >> 20,
        " MiB, far more than a rank table of any job size needs");
  };
  if (info.st_size > kMaxRankTableBytes) tooLarge();
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) Bad(path, "cannot be read: ", std::strerror(errno));
    if (got == 0) return text;
    text.append(buffer, static_cast<size_t>(got));
    // The file may grow while it is read, and /proc files report a size of 0.
    if (text.size() > static_cast<size_t>(kMaxRankTableBytes)) tooLarge();
  }
}

}  // namespace

HostLayout LoadRankTable(const std::string& path, int rankSize) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer opens it.
  const shm::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.Valid()) Bad(path, "cannot be read: ", std::strerror(errno));
  return ParseRankTable(ReadRegularFile(fd.Get(), path), path, rankSize);
}

HostLayout ParseRankTable(const std::string& text, const std::string& path, int rankSize) {
  json table;
  try {
    table = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte counts from 1 and points at the offending character.
    Bad(path, "malformed JSON at byte offset ", e.byte == 0 ? 0 : e.byte - 1, " (", e.what(), ")");
  } catch (const json::exception& e) {  // out_of_range 406: a number such as 1e400
    Bad(path, "malformed JSON (", e.what(), ")");
  }
  if (!table.is_object()) Bad(path, "the top level must be an object, not ", table.type_name());
  if (table.contains("version")) Text(table["version"], "version", path);
  if (table.contains("status")) {
    const std::string status = Text(table["status"], "status", path);
    if (status != "completed") {
      Bad(path, "status = \"", status, "\"; only a \"completed\" table can be used (HCCL marks a ",
          "table that is still being written otherwise)");
    }
  }
  const json& servers = Member(table, "server_list", "the table", path);
  if (!servers.is_array()) Bad(path, "server_list must be an array, not ", servers.type_name());
  const long long serverCount =
      Number(Member(table, "server_count", "the table", path), "server_count", path);
  if (serverCount != static_cast<long long>(servers.size())) {
    Bad(path, "server_count = ", serverCount, " but server_list has ", servers.size(), " servers");
  }

  struct Device {
    long long rank;
    int server;
  };
  std::vector<Device> devices;
  std::vector<std::string> serverIds;
  std::map<std::string, size_t> serverOfId;
  for (size_t s = 0; s < servers.size(); ++s) {
    const std::string where = Concat("server_list[", s, "]");
    if (!servers[s].is_object()) Bad(path, where, " must be an object");
    const std::string id =
        Text(Member(servers[s], "server_id", where, path), where + ".server_id", path);
    const auto known = serverOfId.emplace(id, s);
    if (!known.second) {
      Bad(path, "server_id \"", id, "\" is listed twice (server_list[", known.first->second,
          "] and [", s, "])");
    }
    serverIds.push_back(id);
    const json& list = Member(servers[s], "device", where, path);
    if (!list.is_array()) Bad(path, where, ".device must be an array");
    for (size_t d = 0; d < list.size(); ++d) {
      const std::string at = Concat(where, ".device[", d, "]");
      if (!list[d].is_object()) Bad(path, at, " must be an object");
      Number(Member(list[d], "device_id", at, path), at + ".device_id", path);
      const long long rank = Number(Member(list[d], "rank_id", at, path), at + ".rank_id", path);
      devices.push_back({rank, static_cast<int>(s)});
    }
  }

  // Duplicates first: they are wrong whatever the job's size. Then a table that is complete for a
  // job of another size says so as such, rather than as a list of missing or extra ranks.
  std::map<long long, int> serverOfRankId;
  long long maxRank = -1;
  for (const Device& device : devices) {
    const auto placed = serverOfRankId.emplace(device.rank, device.server);
    if (!placed.second) {
      Bad(path, "rank_id ", device.rank, " appears twice: on server \"",
          serverIds[placed.first->second], "\" and on server \"", serverIds[device.server], "\"");
    }
    maxRank = std::max(maxRank, device.rank);
  }
  const long long listed = static_cast<long long>(devices.size());
  if (maxRank + 1 == listed && listed != rankSize) {
    Bad(path, "the table describes ", listed, " ranks (rank_id 0..", listed - 1,
        ") but rankSize = ", rankSize);
  }
  for (const Device& device : devices) {
    if (device.rank >= rankSize) {
      Bad(path, "rank_id ", device.rank, " on server \"", serverIds[device.server],
          "\" is outside [0, rankSize = ", rankSize, ")");
    }
  }
  // Every rank_id is distinct and below rankSize: the table is complete exactly when it lists
  // rankSize of them. Checked before anything is sized by rankSize, which nothing else bounds (a
  // rankSize of 2^31 - 1 with two listed ranks would have allocated 8 GiB to say one is missing).
  if (listed != rankSize) {
    long long missing = 0;
    for (const auto& entry : serverOfRankId) {
      if (entry.first != missing) break;
      ++missing;
    }
    Bad(path, "rank_id ", missing, " is missing (ranks 0..", rankSize - 1,
        " must each appear once; the table lists ", listed, ")");
  }
  std::vector<int> serverOfRank(rankSize, -1);
  for (const auto& [rank, server] : serverOfRankId) serverOfRank[rank] = server;
  return NormalizeLayout(serverOfRank, serverIds);
}

}  // namespace collops
