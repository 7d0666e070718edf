// Concat writes every piece as std::ostream's operator<< does, whether it appends the piece
// itself (text, characters, integers) or streams it (everything else).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include "collops/status.h"

namespace collops {
namespace {

template <class T>
std::string Streamed(const T& piece) {
  std::ostringstream out;
  out << piece;
  return out.str();
}

template <class T>
void ExpectAsStreamed(const T& piece) {
  EXPECT_EQ(Concat(piece), Streamed(piece));
  EXPECT_EQ(Concat("<", piece, ">"), "<" + Streamed(piece) + ">");
}

TEST(Concat, WritesEveryPieceAsOstreamDoes) {
  ExpectAsStreamed("inTensors");
  ExpectAsStreamed(std::string("outTensors"));
  ExpectAsStreamed(std::string_view("view"));
  ExpectAsStreamed(std::string());
  ExpectAsStreamed('x');
  ExpectAsStreamed(static_cast<signed char>('s'));
  ExpectAsStreamed(static_cast<unsigned char>('A'));
  ExpectAsStreamed(static_cast<int8_t>(66));
  ExpectAsStreamed(static_cast<uint8_t>(67));
  ExpectAsStreamed(0);
  ExpectAsStreamed(-3);
  ExpectAsStreamed(static_cast<int16_t>(-7));
  ExpectAsStreamed(static_cast<uint16_t>(65535));
  ExpectAsStreamed(std::numeric_limits<int64_t>::min());
  ExpectAsStreamed(std::numeric_limits<uint64_t>::max());
  ExpectAsStreamed(static_cast<size_t>(12));
  ExpectAsStreamed(true);
  ExpectAsStreamed(false);
  ExpectAsStreamed(1.5);
  ExpectAsStreamed(0.1);
  ExpectAsStreamed(1e300);
  ExpectAsStreamed(2.5f);
  ExpectAsStreamed(ERROR_INVALID_PARAM);  // an unscoped enum: its number
  int local = 0;
  ExpectAsStreamed(static_cast<const void*>(&local));
}

TEST(Concat, ANullCStringWritesNothing) {
  const char* none = nullptr;
  EXPECT_EQ(Concat("a", none, "b"), "ab");
}

TEST(Concat, MixesPieces) {
  const char* role = "inTensors";
  size_t index = 2;
  EXPECT_EQ(Concat(role, "[", index, "]"), "inTensors[2]");
  EXPECT_EQ(Concat("rank ", 3, " of ", 4, ": ", 0.5, ' ', std::string("done")),
            "rank 3 of 4: 0.5 done");
}

}  // namespace
}  // namespace collops
