#include "collops/algorithms.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <mutex>
#include <utility>

namespace collops {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<EngineAlgorithms> engines;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: static initialisers register
  return *registry;
}

}  // namespace

bool RegisterAlgorithms(EngineAlgorithms engine) {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.engines.push_back(std::move(engine));
  return true;
}

std::vector<EngineAlgorithms> AlgorithmTable() {
  Registry& registry = TheRegistry();
  std::vector<EngineAlgorithms> engines;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    engines = registry.engines;
  }
  std::sort(engines.begin(), engines.end(),
            [](const EngineAlgorithms& a, const EngineAlgorithms& b) {
              return a.order != b.order ? a.order < b.order : std::strcmp(a.engine, b.engine) < 0;
            });
  return engines;
}

std::string AlgorithmKnob(const char* knobPrefix, const char* collective) {
  std::string knob = knobPrefix;
  for (const char* c = collective; *c != '\0'; ++c) {
    knob += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  }
  return knob;
}

std::string AlgorithmTableMarkdown() {
  std::string text;
  for (const EngineAlgorithms& engine : AlgorithmTable()) {
    const bool knobs = *engine.knobPrefix != '\0';
    text += std::string("#### ") + engine.engine + "\n\n";
    text +=
        knobs
            ? "| collective | knob | algorithm | what it does | runs when | auto picks it when |\n"
              "|---|---|---|---|---|---|\n"
            : "| collective | algorithm | what it does | runs when | auto picks it when |\n"
              "|---|---|---|---|---|\n";
    const char* previous = "";
    for (const AlgorithmInfo& row : engine.rows) {
      const bool first = std::strcmp(row.collective, previous) != 0;
      previous = row.collective;
      std::string collective;
      if (first) {
        collective = row.collective;
        if (std::strcmp(row.serves, row.collective) != 0) {
          collective += std::string(" (") + row.serves + ")";
        }
      }
      text += "| " + collective + " | ";
      if (knobs) {
        text += first ? "`" + AlgorithmKnob(engine.knobPrefix, row.collective) + "` | " : " | ";
      }
      text += std::string("`") + row.name + "` | " + row.description + " | " + row.condition +
              " | " + row.selection + " |\n";
    }
    text += "\n";
  }
  return text;
}

}  // namespace collops
