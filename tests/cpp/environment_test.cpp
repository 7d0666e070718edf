// The COLLOPS_* knobs (collops/environment.h): one strict syntax per kind, the same suffixes on
// every integer knob, bounds, errors that name the knob; docs/environment.md lists exactly the
// parser's knobs, and no library source reads a COLLOPS_* variable around the parser.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "collops/algorithms.h"
#include "collops/backend.h"
#include "collops/context.h"
#include "collops/environment.h"
#include "collops/reduce.h"
#include "collops/status.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace {

using ::testing::HasSubstr;
using testing::ScopedEnv;

/// The message reading `read` throws with `name` set to `value` ("" when it reads it).
template <class Read>
std::string Refusal(const std::string& name, const char* value, Read read) {
  ScopedEnv env(name.c_str(), value);
  try {
    read();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
    return e.what();
  }
  return "";
}

std::vector<EnvironmentKnob> KnobsOf(KnobSyntax syntax) {
  std::vector<EnvironmentKnob> knobs;
  for (const EnvironmentKnob& knob : EnvironmentKnobs()) {
    if (knob.syntax == syntax) knobs.push_back(knob);
  }
  return knobs;
}

TEST(Environment, EveryIntegerKnobTakesTheSameSuffixes) {
  // 64K worked for COLLOPS_SHM_BYTES and failed for COLLOPS_SHM_CHUNK_BYTES.
  const struct {
    const char* text;
    uint64_t value;
  } forms[] = {{"64K", 64 << 10}, {"64KiB", 64 << 10}, {"1M", 1 << 20}, {"1MiB", 1 << 20},
               {"1G", 1 << 30},   {"1GiB", 1 << 30},   {"4096", 4096},  {"0004096", 4096}};
  for (const EnvironmentKnob& knob : KnobsOf(KnobSyntax::kInteger)) {
    for (const auto& form : forms) {
      if (form.value < knob.minimum || form.value > knob.maximum) continue;
      ScopedEnv env(knob.name.c_str(), form.text);
      EXPECT_EQ(KnobInteger(knob.name, 7), form.value) << knob.name << "=" << form.text;
    }
    unsetenv(knob.name.c_str());
    EXPECT_EQ(KnobInteger(knob.name, 7), 7u) << knob.name << " unset";
    ScopedEnv empty(knob.name.c_str(), "");
    EXPECT_EQ(KnobInteger(knob.name, 7), 7u) << knob.name << " empty";
  }
}

TEST(Environment, IntegerKnobsRefuseAnythingElseNamingTheKnob) {
  for (const EnvironmentKnob& knob : KnobsOf(KnobSyntax::kInteger)) {
    const auto read = [&] { KnobInteger(knob.name, 0); };
    for (const char* bad : {"abc", "-1", "+1", " 1", "1 ", "1k", "1KB", "1T", "0x10", "1.5", "1e3",
                            "2 MiB", "K", "18446744073709551616", "99999999999999999999999"}) {
      EXPECT_THAT(Refusal(knob.name, bad, read),
                  HasSubstr(knob.name + "=\"" + bad + "\" is not an integer from "))
          << knob.name << "=" << bad;
    }
    // The bounds themselves are taken; one past them is not.
    const std::string lowest = std::to_string(static_cast<uint64_t>(knob.minimum));
    const std::string highest = std::to_string(static_cast<uint64_t>(knob.maximum));
    EXPECT_EQ(Refusal(knob.name, lowest.c_str(), read), "") << knob.name << "=" << lowest;
    EXPECT_EQ(Refusal(knob.name, highest.c_str(), read), "") << knob.name << "=" << highest;
    const std::string above = std::to_string(static_cast<uint64_t>(knob.maximum) + 1);
    EXPECT_THAT(Refusal(knob.name, above.c_str(), read), HasSubstr(knob.name + "=\"" + above))
        << knob.name;
    if (knob.minimum > 0) {
      const std::string below = std::to_string(static_cast<uint64_t>(knob.minimum) - 1);
      EXPECT_THAT(Refusal(knob.name, below.c_str(), read), HasSubstr(knob.name + "=\"" + below))
          << knob.name;
    }
  }
}

TEST(Environment, MpiMaxCountThatIsNotANumberIsAnError) {
  // "abc" silently became INT_MAX.
  EXPECT_THAT(
      Refusal("COLLOPS_MPI_MAX_COUNT", "abc", [] { KnobInteger("COLLOPS_MPI_MAX_COUNT", 0); }),
      HasSubstr("COLLOPS_MPI_MAX_COUNT=\"abc\" is not an integer from 1 to 2147483647"));
}

TEST(Environment, TimeoutIsANumberOfSecondsOfAtLeastAMillisecond) {
  const auto read = [] { CommTimeoutSeconds(); };
  // 1e-300 was accepted: every wait timed out at once.
  for (const char* bad : {"1e-300", "0", "0.0001", "-5", "abc", "nan", "2abc", "2 s", " 2.5 ",
                          "0x10", "+2", ".", "1e", "infinity", "Inf"}) {
    EXPECT_THAT(Refusal("COLLOPS_TIMEOUT", bad, read),
                HasSubstr(std::string("COLLOPS_TIMEOUT=\"") + bad +
                          "\" is not a number of seconds from 0.001 to "))
        << bad;
  }
  for (const auto& [text, seconds] :
       std::vector<std::pair<const char*, double>>{{"2", 2},
                                                   {"0.5", 0.5},
                                                   {".5", 0.5},
                                                   {"5.", 5},
                                                   {"1e3", 1000},
                                                   {"0.001", 0.001},
                                                   {"1E-3", 0.001},
                                                   {"1e10", kMaxCommTimeoutSeconds},
                                                   {"inf", kMaxCommTimeoutSeconds}}) {
    ScopedEnv env("COLLOPS_TIMEOUT", text);
    EXPECT_EQ(CommTimeoutSeconds(), seconds) << text;
  }
}

TEST(Environment, ABadTimeoutFailsTheCommunicatorsCreation) {
  ScopedEnv env("COLLOPS_TIMEOUT", "1e-300");
  CommParam param;
  param.rank = 0;
  param.rankSize = 1;
  param.commMode = COMM_MULTI_THREAD;
  param.backend = "lccl";
  param.commDomain = "environment-bad-timeout";
  try {
    CreateCommunicator(param);
    ADD_FAILURE() << "created";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
    EXPECT_THAT(e.what(), HasSubstr("COLLOPS_TIMEOUT=\"1e-300\""));
  }
}

TEST(Environment, WordKnobsTakeTheirWordsOnly) {
  for (const EnvironmentKnob& knob : KnobsOf(KnobSyntax::kWord)) {
    std::stringstream words(knob.words);
    std::string word;
    while (std::getline(words, word, '|')) {
      ScopedEnv env(knob.name.c_str(), word.c_str());
      EXPECT_EQ(KnobWord(knob.name, "x"), word) << knob.name;
    }
    EXPECT_THAT(Refusal(knob.name, "nonsense", [&] { KnobWord(knob.name, "x"); }),
                HasSubstr(knob.name + "=\"nonsense\" is not one of "));
  }
  // COLLOPS_ISA=avx3 was ignored with a warning; it fails the communicator's creation now.
  EXPECT_THAT(Refusal("COLLOPS_ISA", "AVX2", [] { KnobWord("COLLOPS_ISA", ""); }),
              HasSubstr("COLLOPS_ISA=\"AVX2\" is not one of generic, avx2, avx512"));
}

TEST(Environment, TextKnobsAreBoundedInLength) {
  for (const EnvironmentKnob& knob : KnobsOf(KnobSyntax::kText)) {
    const std::string longest(static_cast<size_t>(knob.maximum), 'k');
    EXPECT_EQ(Refusal(knob.name, longest.c_str(), [&] { KnobText(knob.name); }), "");
    const std::string longer = longest + "k";
    EXPECT_THAT(Refusal(knob.name, longer.c_str(), [&] { KnobText(knob.name); }),
                HasSubstr(knob.name + " is " + std::to_string(longer.size()) + " bytes long"));
  }
}

TEST(Environment, TheAlgorithmKnobsTakeTheAlgorithmTablesNames) {
  for (const EngineAlgorithms& engine : AlgorithmTable()) {
    if (*engine.knobPrefix == '\0') continue;
    for (const AlgorithmInfo& row : engine.rows) {
      const EnvironmentKnob knob = FindKnob(AlgorithmKnob(engine.knobPrefix, row.collective));
      EXPECT_THAT("|" + knob.words + "|", HasSubstr(std::string("|") + row.name + "|"));
      EXPECT_THAT(knob.words, ::testing::StartsWith("auto|"));
    }
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(EnvironmentTable, TheDocsListEveryKnobOnceWithItsSyntaxAndWords) {
  const std::string docs = ReadFile(std::string(COLLOPS_SOURCE_DIR) + "/docs/environment.md");
  ASSERT_FALSE(docs.empty()) << "docs/environment.md";
  // Rows: | `NAME` | syntax | bounds | default | meaning |
  const std::regex row(R"(\n\| `(COLLOPS_[A-Z_0-9]+)` \| ([a-z]+) \| ([^|]*) \|)");
  std::map<std::string, std::pair<std::string, std::string>> documented;
  for (auto it = std::sregex_iterator(docs.begin(), docs.end(), row); it != std::sregex_iterator();
       ++it) {
    const std::string name = (*it)[1];
    EXPECT_EQ(documented.count(name), 0u) << name << " is listed twice";
    documented[name] = {(*it)[2], (*it)[3]};
  }
  const char* const syntaxNames[] = {"integer", "seconds", "word", "text"};
  std::set<std::string> known;
  for (const EnvironmentKnob& knob : EnvironmentKnobs()) {
    known.insert(knob.name);
    const auto it = documented.find(knob.name);
    if (it == documented.end()) {
      ADD_FAILURE() << knob.name << " is missing from docs/environment.md";
      continue;
    }
    EXPECT_EQ(it->second.first, syntaxNames[static_cast<int>(knob.syntax)]) << knob.name;
    std::stringstream words(knob.words);
    std::string word;
    while (std::getline(words, word, '|')) {
      EXPECT_THAT(it->second.second, HasSubstr("`" + word + "`")) << knob.name;
    }
  }
  for (const auto& [name, unused] : documented) {
    EXPECT_TRUE(known.count(name))
        << name << " is in docs/environment.md but no knob of the parser";
  }
}

/// Every file under `dir` (recursively) whose name ends in .cpp or .h.
void Sources(const std::string& dir, std::vector<std::string>* files) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    if (entry->d_type == DT_DIR) {
      Sources(path, files);
    } else if (name.size() > 4 &&
               (name.rfind(".cpp") == name.size() - 4 || name.rfind(".h") == name.size() - 2)) {
      files->push_back(path);
    }
  }
  closedir(d);
}

TEST(EnvironmentTable, NoLibrarySourceReadsAKnobAroundTheParser) {
  std::vector<std::string> files;
  for (const char* dir : {"core", "ops", "torch_bindings"}) {
    Sources(std::string(COLLOPS_SOURCE_DIR) + "/" + dir, &files);
  }
  ASSERT_GT(files.size(), 20u);
  const std::regex direct(R"(getenv\(\s*"COLLOPS_)");
  for (const std::string& file : files) {
    if (file.find("/core/src/environment.cpp") != std::string::npos) continue;
    EXPECT_FALSE(std::regex_search(ReadFile(file), direct))
        << file << " reads a COLLOPS_* variable with getenv: use collops/environment.h";
  }
}

}  // namespace
}  // namespace collops
