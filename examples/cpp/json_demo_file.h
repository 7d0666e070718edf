// The collops_json_demo's file format (json_op_runner.cpp describes it): a file's text parsed and
// checked, one rank's part of it read into an op param and filled input tensors, tensors rendered
// for the report, and a whole file run on thread ranks. The demo runs what this reads; the fuzz
// harness (tests/fuzz/json_demo_fuzzer.cpp) reads files exactly as the demo does.
#pragma once

#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/collops.h"

namespace collops_demo {

/// A file that does not follow the format; what() names the field ("ranks[1].inputs[0].dtype:
/// ...").
class DemoFileError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Arrays and objects nest at most this deep in a file (the format needs 6 levels, a param a few
/// more): deeper nesting is refused while parsing, before anything recurses over it.
constexpr int kMaxDemoDepth = 64;

/// A tensor that owns its bytes (one spare byte, so an empty tensor still has an address).
struct OwnedTensor {
  std::vector<uint8_t> bytes;
  collops::Tensor tensor;
};

/// `text` parsed as a demo file and checked by CheckDemoFile; throws DemoFileError for text that
/// is not JSON or nests deeper than kMaxDemoDepth.
nlohmann::json ParseDemoText(const std::string& text);

/// The file's top level: an object with a non-empty "ranks" array; throws DemoFileError.
void CheckDemoFile(const nlohmann::json& spec);

/// What rank `rank` of `rankSize` runs: the op, its param (the file's "param", then the rank's
/// own, then rank, rankSize and commMode 1) and its inputs, filled from "data". Throws
/// DemoFileError naming the field for a file that does not follow the format.
struct DemoRank {
  std::string opName;
  nlohmann::json param;
  std::vector<OwnedTensor> inputs;
};
DemoRank ReadDemoRank(const nlohmann::json& spec, int rank, int rankSize);

/// Runs rank `rank`'s part (the op's InferShape, Setup and Execute on its outputs, in `context`,
/// null: the default one) and returns its line of the report. Throws a std::exception when a step
/// fails.
std::string RunDemoRank(DemoRank mine, int rank, collops::Context* context = nullptr);
/// ReadDemoRank, then the above.
std::string RunDemoRank(const nlohmann::json& spec, int rank, int rankSize,
                        collops::Context* context = nullptr);

/// The demo itself: reads the file at `path`, every rank's part of it first, then runs the ranks
/// as threads and writes their report lines to `out`. Returns the exit code: 0, 1 when a rank
/// failed (its line says why), 2 when the file cannot be read or does not follow the format (a
/// line on `err` names the file and the field).
int RunDemoFile(const std::string& path, std::ostream& out, std::ostream& err);

/// A zeroed tensor of `dtype` and `shape`; throws std::invalid_argument for a negative dim, more
/// dims than a tensor has or more than the demo's 1 GiB.
OwnedTensor MakeTensor(collops::DataType dtype, const std::vector<int64_t>& shape);

/// "[[1, 2], [3, 4]]": the tensor's values, rows along its last dim.
std::string Render(const OwnedTensor& t);

}  // namespace collops_demo
