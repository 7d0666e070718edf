// The collops_json_demo's file format (json_op_runner.cpp describes it): one rank's part of a file
// read into an op param and filled input tensors, and tensors rendered for the report, without
// running anything. The demo runs what this reads; the fuzz harness
// (tests/fuzz/json_demo_fuzzer.cpp) reads files exactly as the demo does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/collops.h"

namespace collops_demo {

/// A tensor that owns its bytes (one spare byte, so an empty tensor still has an address).
struct OwnedTensor {
  std::vector<uint8_t> bytes;
  collops::Tensor tensor;
};

/// The file's top level: an object with a non-empty "ranks" array; throws std::invalid_argument.
void CheckDemoFile(const nlohmann::json& spec);

/// What rank `rank` of `rankSize` runs: the op, its param (the file's "param", then the rank's
/// own, then rank, rankSize and commMode 1) and its inputs, filled from "data". Throws a
/// std::exception for a file that does not follow the format.
struct DemoRank {
  std::string opName;
  nlohmann::json param;
  std::vector<OwnedTensor> inputs;
};
DemoRank ReadDemoRank(const nlohmann::json& spec, int rank, int rankSize);

/// Runs rank `rank` of the file (ReadDemoRank, then the op's InferShape, Setup and Execute on its
/// outputs, in `context`, null: the default one) and returns its line of the report. Throws a
/// std::exception when the file or a step fails.
std::string RunDemoRank(const nlohmann::json& spec, int rank, int rankSize,
                        collops::Context* context = nullptr);

/// A zeroed tensor of `dtype` and `shape`; throws std::invalid_argument for a negative dim or
/// more than the demo's 1 GiB.
OwnedTensor MakeTensor(collops::DataType dtype, const std::vector<int64_t>& shape);

/// "[[1, 2], [3, 4]]": the tensor's values, rows along its last dim.
std::string Render(const OwnedTensor& t);

}  // namespace collops_demo
