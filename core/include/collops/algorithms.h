// The algorithm table: every algorithm a communicator engine chooses from, one row each, in the
// style of UCC's algorithm listing — its name, what it does, when it can run, and when the
// engine's automatic selector picks it (by size, rank count and machine). Engines register their
// rows (RegisterAlgorithms); `collops-bench --algorithms` prints the table and docs/backends.md
// holds the same text (a test compares them).
#pragma once

#include <string>
#include <vector>

namespace collops {

struct AlgorithmInfo {
  const char* collective;   ///< "AllReduce", ...
  const char* serves;       ///< the Communicator primitives it runs: "AllGatherBytes, AllGatherV"
  const char* name;         ///< the name COLLOPS_ALGO_<COLLECTIVE> takes
  const char* description;  ///< what it does, one line
  const char* condition;    ///< when it can run at all; forced where it cannot, a call fails
  const char* selection;    ///< when the automatic selector picks it
};

/// One engine's algorithms, in the order they are listed.
struct EngineAlgorithms {
  const char* engine;  ///< "lccl, multi-process (`commMode` 0)", ...
  int order;           ///< engines are listed by this, then by name
  /// "COLLOPS_ALGO_<COLLECTIVE>" where a knob forces this engine's algorithms, "" where the
  /// selector alone decides.
  const char* knobPrefix;
  std::vector<AlgorithmInfo> rows;
};

/// Adds an engine's rows to the table; called from a static initialiser of the engine.
bool RegisterAlgorithms(EngineAlgorithms engine);

/// Every registered engine's algorithms, engines in their order.
std::vector<EngineAlgorithms> AlgorithmTable();

/// The table as Markdown: a section per engine, a row per algorithm.
std::string AlgorithmTableMarkdown();

/// "COLLOPS_ALGO_ALLREDUCE" for "AllReduce" under prefix "COLLOPS_ALGO_".
std::string AlgorithmKnob(const char* knobPrefix, const char* collective);

}  // namespace collops
