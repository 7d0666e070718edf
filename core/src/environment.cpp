#include "collops/environment.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "collops/algorithms.h"
#include "collops/backend.h"
#include "collops/status.h"

namespace collops {
namespace {

constexpr double kKiB = 1024.0;
constexpr double kMiB = kKiB * 1024;
constexpr double kGiB = kMiB * 1024;
constexpr double kTiB = kGiB * 1024;

EnvironmentKnob Integer(const char* name, double minimum, double maximum) {
  return {name, KnobSyntax::kInteger, minimum, maximum, ""};
}

EnvironmentKnob Word(const char* name, const char* words) {
  return {name, KnobSyntax::kWord, 0, 0, words};
}

EnvironmentKnob Text(const char* name, double maxBytes) {
  return {name, KnobSyntax::kText, 0, maxBytes, ""};
}

/// "2^30" and the like for a bound, else its digits.
std::string BoundText(double bound) {
  const char* const units[] = {"TiB", "GiB", "MiB", "KiB"};
  const double sizes[] = {kTiB, kGiB, kMiB, kKiB};
  for (int u = 0; u < 4; ++u) {
    if (bound >= sizes[u] && std::fmod(bound, sizes[u]) == 0) {
      return Concat(static_cast<uint64_t>(bound / sizes[u]), " ", units[u]);
    }
  }
  return Concat(static_cast<uint64_t>(bound));
}

[[noreturn]] void Refuse(const EnvironmentKnob& knob, const char* value, const std::string& takes) {
  Fail(ERROR_INVALID_PARAM, knob.name, "=\"", value, "\" is not ", takes);
}

std::string IntegerTakes(const EnvironmentKnob& knob) {
  return Concat("an integer from ", BoundText(knob.minimum), " to ", BoundText(knob.maximum),
                " (digits, optionally followed by K, M or G)");
}

/// The value of `digits`..`end` (all decimal digits), false past 2^64 - 1.
bool Digits(const char* digits, const char* end, uint64_t* value) {
  if (digits == end) return false;
  uint64_t v = 0;
  for (const char* c = digits; c != end; ++c) {
    const uint64_t d = static_cast<uint64_t>(*c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *value = v;
  return true;
}

/// True when `text` is a decimal number as kSeconds takes it: digits with an optional fraction
/// (at least one digit in all), then an optional exponent.
bool DecimalNumber(const char* text) {
  const char* c = text;
  int digits = 0;
  while (*c >= '0' && *c <= '9') ++c, ++digits;
  if (*c == '.') {
    ++c;
    while (*c >= '0' && *c <= '9') ++c, ++digits;
  }
  if (digits == 0) return false;
  if (*c == 'e' || *c == 'E') {
    ++c;
    if (*c == '+' || *c == '-') ++c;
    if (!(*c >= '0' && *c <= '9')) return false;
    while (*c >= '0' && *c <= '9') ++c;
  }
  return *c == '\0';
}

const std::vector<EnvironmentKnob>& FixedKnobs() {
  static const std::vector<EnvironmentKnob> knobs = {
      {"COLLOPS_TIMEOUT", KnobSyntax::kSeconds, 0.001, kMaxCommTimeoutSeconds, ""},
      Text("COLLOPS_JOB_ID", 1024),
      Text("COLLOPS_HOST_ID", 1024),
      Word("COLLOPS_ENGINE", "mpi|c10d|lccl"),
      Word("COLLOPS_ISA", "generic|avx2|avx512"),
      Integer("COLLOPS_SHM_BYTES", 1, kGiB),
      Integer("COLLOPS_SHM_HEAP_BYTES", 0, kTiB),
      Integer("COLLOPS_SHM_HEAP_CACHE_BYTES", 0, kTiB),
      Integer("COLLOPS_SHM_CHUNK_BYTES", 4096, kGiB),
      Integer("COLLOPS_SHM_STREAM_BYTES", 0, 1024 * kTiB),
      Integer("COLLOPS_SHM_CMA_BYTES", 0, 1024 * kTiB),
      Integer("COLLOPS_SHM_SPIN_US", 0, 10'000'000),
      Integer("COLLOPS_SHM_YIELD_US", 0, 10'000'000),
      Integer("COLLOPS_SHM_BIND", 0, 1),
      Integer("COLLOPS_MPI_MAX_COUNT", 1, INT_MAX),
      Word("COLLOPS_ALGO_LINEARPARALLEL", "serial|overlap|auto"),
  };
  return knobs;
}

/// COLLOPS_ALGO_<COLLECTIVE> for every collective of an engine with a knob prefix: "auto" and the
/// names of its rows. Built on each call: engines register their rows from static initialisers.
std::vector<EnvironmentKnob> AlgorithmKnobs() {
  std::vector<EnvironmentKnob> knobs;
  for (const EngineAlgorithms& engine : AlgorithmTable()) {
    if (*engine.knobPrefix == '\0') continue;
    for (const AlgorithmInfo& row : engine.rows) {
      const std::string name = AlgorithmKnob(engine.knobPrefix, row.collective);
      EnvironmentKnob* knob = nullptr;
      for (EnvironmentKnob& k : knobs) {
        if (k.name == name) knob = &k;
      }
      if (knob == nullptr) knob = &knobs.emplace_back(Word(name.c_str(), "auto"));
      knob->words += Concat("|", row.name);
    }
  }
  return knobs;
}

EnvironmentKnob Checked(const std::string& name, KnobSyntax syntax) {
  EnvironmentKnob knob = FindKnob(name);
  if (knob.syntax != syntax) throw std::logic_error(name + " is read with another syntax");
  return knob;
}

}  // namespace

std::vector<EnvironmentKnob> EnvironmentKnobs() {
  std::vector<EnvironmentKnob> knobs = FixedKnobs();
  for (EnvironmentKnob& knob : AlgorithmKnobs()) knobs.push_back(std::move(knob));
  return knobs;
}

EnvironmentKnob FindKnob(const std::string& name) {
  for (const EnvironmentKnob& knob : FixedKnobs()) {
    if (knob.name == name) return knob;
  }
  for (EnvironmentKnob& knob : AlgorithmKnobs()) {
    if (knob.name == name) return std::move(knob);
  }
  throw std::logic_error(name + " is not in the table of environment knobs");
}

const char* KnobValue(const std::string& name) {
  (void)FindKnob(name);
  const char* value = std::getenv(name.c_str());
  return value != nullptr && *value != '\0' ? value : nullptr;
}

uint64_t KnobInteger(const std::string& name, uint64_t fallback) {
  const EnvironmentKnob knob = Checked(name, KnobSyntax::kInteger);
  const char* text = KnobValue(name);
  if (text == nullptr) return fallback;
  const char* end = text;
  while (*end >= '0' && *end <= '9') ++end;
  const std::string suffix = end;
  uint64_t scale = 0;
  if (suffix.empty()) {
    scale = 1;
  } else if (suffix == "K" || suffix == "KiB") {
    scale = uint64_t{1} << 10;
  } else if (suffix == "M" || suffix == "MiB") {
    scale = uint64_t{1} << 20;
  } else if (suffix == "G" || suffix == "GiB") {
    scale = uint64_t{1} << 30;
  }
  uint64_t value = 0;
  if (scale == 0 || !Digits(text, end, &value) || value > UINT64_MAX / scale ||
      static_cast<double>(value * scale) < knob.minimum ||
      static_cast<double>(value * scale) > knob.maximum) {
    Refuse(knob, text, IntegerTakes(knob));
  }
  return value * scale;
}

double KnobSeconds(const std::string& name, double fallback) {
  const EnvironmentKnob knob = Checked(name, KnobSyntax::kSeconds);
  const char* text = KnobValue(name);
  if (text == nullptr) return fallback;
  if (std::string(text) == "inf") return knob.maximum;
  const std::string takes = Concat("a number of seconds from ", knob.minimum, " to ", knob.maximum,
                                   " (2, 0.5, 1e3; larger values and inf mean ", knob.maximum, ")");
  if (!DecimalNumber(text)) Refuse(knob, text, takes);
  // The grammar leaves strtod no choice but a decimal number ("C" locale digits and '.').
  const double seconds = std::strtod(text, nullptr);
  if (!(seconds >= knob.minimum)) Refuse(knob, text, takes);
  return std::min(seconds, knob.maximum);
}

std::string KnobWord(const std::string& name, const std::string& fallback) {
  const EnvironmentKnob knob = Checked(name, KnobSyntax::kWord);
  const char* text = KnobValue(name);
  if (text == nullptr) return fallback;
  const std::string word = text;
  size_t from = 0;
  std::string listed;
  while (from <= knob.words.size()) {
    const size_t bar = std::min(knob.words.find('|', from), knob.words.size());
    const std::string candidate = knob.words.substr(from, bar - from);
    if (candidate == word) return word;
    listed += Concat(listed.empty() ? "" : ", ", candidate);
    from = bar + 1;
  }
  Refuse(knob, text, Concat("one of ", listed));
}

std::string KnobText(const std::string& name) {
  const EnvironmentKnob knob = Checked(name, KnobSyntax::kText);
  const char* text = KnobValue(name);
  if (text == nullptr) return "";
  const std::string value = text;
  if (static_cast<double>(value.size()) > knob.maximum) {
    Fail(ERROR_INVALID_PARAM, knob.name, " is ", value.size(), " bytes long; at most ",
         static_cast<uint64_t>(knob.maximum), " are allowed");
  }
  return value;
}

}  // namespace collops
