// Every message collops stores is valid UTF-8, whatever bytes it quotes (a file's, a user's, a
// peer's): a JSON report or a Python string built from it must not fail in place of the error.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "collops/status.h"

namespace collops {
namespace {

/// nlohmann's own UTF-8 check: dump() throws type_error 316 on invalid UTF-8.
bool JsonAccepts(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

TEST(ErrorText, InvalidBytesAreEscapedAndValidTextIsKept) {
  const std::string valid = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF";
  EXPECT_EQ(Error(ERROR_INVALID_PARAM, valid).what(), valid);
  const struct {
    std::string bytes, text;
  } cases[] = {
      {"a\xFF"
       "b",
       "a\\xFFb"},
      {"lone \x80", "lone \\x80"},
      {"cut \xC3", "cut \\xC3"},
      {"overlong \xC0\xAF", "overlong \\xC0\\xAF"},
      {"overlong \xE0\x80\xAF", "overlong \\xE0\\x80\\xAF"},
      {"surrogate \xED\xA0\x80", "surrogate \\xED\\xA0\\x80"},
      {"past U+10FFFF \xF4\x90\x80\x80", "past U+10FFFF \\xF4\\x90\\x80\\x80"},
      {"\xC3\xA9\xFF\xC3\xA9", "\xC3\xA9\\xFF\xC3\xA9"},
  };
  for (const auto& c : cases) {
    ASSERT_FALSE(JsonAccepts(c.bytes)) << c.text;
    const std::string message = Error(ERROR_INVALID_PARAM, c.bytes).what();
    EXPECT_EQ(message, c.text);
    EXPECT_TRUE(JsonAccepts(message)) << c.text;
  }
}

TEST(ErrorText, TheLastErrorMessageIsValidUtf8) {
  SetLastErrorMessage("from a library: \xFE\xFF");
  EXPECT_EQ(LastErrorMessage(), "from a library: \\xFE\\xFF");
  const Status status = Guarded([] { Fail(ERROR_INVALID_PARAM, "field \"", "\xFF", "\""); });
  EXPECT_EQ(status, ERROR_INVALID_PARAM);
  EXPECT_EQ(LastErrorMessage(), "field \"\\xFF\"");
  SetLastErrorMessage("");
}

}  // namespace
}  // namespace collops
