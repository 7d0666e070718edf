// collops_json_demo: runs one operation, configured by a JSON file, on thread ranks (commMode 1)
// and prints each rank's outputs.
//
//   collops_json_demo examples/json/all_to_allvv2_seed.json
//
// File format:
//   {"op": "AllToAllVV2Operation",
//    "param": {...params common to every rank...},
//    "ranks": [{"param": {...this rank's params...},
//               "inputs": [{"dtype": "int64", "shape": [2, 4], "data": [...]}, ...]}, ...]}
// "rank", "rankSize" (the number of "ranks" entries) and "commMode": 1 are filled in for each
// rank; "data" may hold fewer values than the shape (the rest are zero), never more. A file that
// does not follow this format is refused with a message (exit 2).
#include <fstream>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collops/collops.h"
#include "json_demo_file.h"

using nlohmann::json;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " <op.json>\n";
    return 2;
  }
  std::ifstream file(argv[1]);
  if (!file) {
    std::cerr << "cannot read " << argv[1] << "\n";
    return 2;
  }
  json spec;
  try {
    spec = json::parse(file);
    collops_demo::CheckDemoFile(spec);
  } catch (const std::exception& e) {
    std::cerr << argv[1] << ": " << e.what() << "\n";
    return 2;
  }
  const int rankSize = static_cast<int>(spec["ranks"].size());
  std::vector<std::string> reports(rankSize);
  std::vector<std::thread> threads;
  int failures = 0;
  std::mutex mutex;
  for (int rank = 0; rank < rankSize; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        reports[rank] = collops_demo::RunDemoRank(spec, rank, rankSize);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        reports[rank] = "rank " + std::to_string(rank) + " FAILED: " + e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : reports) std::cout << r << "\n";
  return failures == 0 ? 0 : 1;
}
