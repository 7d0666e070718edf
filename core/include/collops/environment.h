// The COLLOPS_* environment knobs: one table of every knob the library reads, and one strict
// parser for them. docs/environment.md is the same table for users (a test keeps the two equal).
//
// A knob that is unset or empty takes its default. Any other value must follow its knob's syntax
// exactly (no spaces, no sign, nothing after the number) and lie within its bounds; otherwise the
// read throws Error(ERROR_INVALID_PARAM) naming the knob, its value and what it takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace collops {

enum class KnobSyntax {
  /// Decimal digits, optionally followed by K, M or G (or KiB, MiB, GiB): times 2^10, 2^20, 2^30.
  kInteger,
  /// A decimal number of seconds (digits, an optional fraction and exponent: 2, 0.5, 1e3), or inf.
  kSeconds,
  /// One of the words in `words`.
  kWord,
  /// Any text of at most `maximum` bytes.
  kText,
};

struct EnvironmentKnob {
  std::string name;
  KnobSyntax syntax;
  double minimum;     ///< kInteger, kSeconds: the smallest value taken
  double maximum;     ///< kInteger, kSeconds: the largest; kText: the most bytes
  std::string words;  ///< kWord: the values taken, separated by '|'
};

/// Every knob: the fixed ones, then a COLLOPS_ALGO_<COLLECTIVE> per collective of each engine in
/// the algorithm table (collops/algorithms.h) that has a knob prefix, taking "auto" and the names
/// of that collective's algorithms.
std::vector<EnvironmentKnob> EnvironmentKnobs();

/// The knob `name`; std::logic_error (a programming error) when the table does not hold it.
EnvironmentKnob FindKnob(const std::string& name);

/// The text of `name` when set and not empty, else null. Reads the table's knobs only.
const char* KnobValue(const std::string& name);

/// kInteger knob `name`, or `fallback` when unset.
uint64_t KnobInteger(const std::string& name, uint64_t fallback);
/// kSeconds knob `name`, or `fallback` when unset; inf (and any value above the maximum, which
/// only says "wait as long as can be") is the maximum.
double KnobSeconds(const std::string& name, double fallback);
/// kWord knob `name`, or `fallback` when unset.
std::string KnobWord(const std::string& name, const std::string& fallback);
/// kText knob `name`, or "" when unset.
std::string KnobText(const std::string& name);

}  // namespace collops
