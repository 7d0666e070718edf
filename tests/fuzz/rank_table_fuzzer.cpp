// libFuzzer harness: the rank-table parser (collops/rank_table.h), on a table as a user or a
// launcher might have written it, for a job of any size.
//
// Input: the job's rankSize in decimal on the first line, then the table's text:
//   2
//   {"server_count": "1", "server_list": [{"server_id": "a", "device": [...]}]}
// The parser must return a layout of exactly rankSize ranks or throw Error(ERROR_INVALID_PARAM);
// anything else (another exception, a crash, a sanitizer report, memory out of proportion to the
// text) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "collops/rank_table.h"
#include "collops/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == std::string::npos || newline == 0 || newline > 10) return 0;
  long long rankSize = 0;
  for (size_t i = 0; i < newline; ++i) {
    if (input[i] < '0' || input[i] > '9') return 0;
    rankSize = rankSize * 10 + (input[i] - '0');
  }
  // Any rankSize a param can carry: ValidateCommParam admits every positive int.
  if (rankSize < 1 || rankSize > 2147483647LL) return 0;
  try {
    const collops::HostLayout layout =
        collops::ParseRankTable(input.substr(newline + 1), "fuzz.json", static_cast<int>(rankSize));
    if (layout.hostOfRank.size() != static_cast<size_t>(rankSize)) __builtin_trap();
  } catch (const collops::Error& e) {
    if (e.status() != collops::ERROR_INVALID_PARAM) __builtin_trap();
  }
  return 0;
}
