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
// rank; "data" may hold fewer values than the shape (the rest are zero), never more. Integer
// dtypes take integers in their range, exactly; float dtypes any number, rounded to nearest even
// (past the largest finite value: an infinity). A file that does not follow this format is
// refused before any rank runs, with a message naming the field (exit 2); a rank whose op fails
// says so in its line (exit 1).
#include <iostream>

#include "json_demo_file.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " <op.json>\n";
    return 2;
  }
  return collops_demo::RunDemoFile(argv[1], std::cout, std::cerr);
}
