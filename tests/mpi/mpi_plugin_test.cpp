// Backend "mpi" as a plugin: this binary links libcollops.so only (not libcollops_mpi.so), the way
// Python and every non-MPI user do. libmpi must not be in the process until backend "mpi" is
// asked for; then core dlopens libcollops_mpi.so and the communicator works. ctest runs it
// without mpirun, so it is also the MPI singleton case: rankSize must be 1, and any other value
// is an error saying why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "collops/backend.h"
#include "collops/collops.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

bool Loaded(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("/" + library) != std::string::npos;
}

bool UnderMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }
bool PluginHidden() { return std::getenv("COLLOPS_TEST_NO_PLUGIN") != nullptr; }

CommParam MpiParam(const std::string& domain, int rankSize) {
  CommParam param;
  param.backend = "mpi";
  param.commDomain = domain;
  param.rankSize = rankSize;
  return param;
}

TEST(MpiPlugin, LoadedOnFirstUseOnly) {
  if (UnderMpirun() || PluginHidden()) GTEST_SKIP() << "needs the plugin, without mpirun";
  EXPECT_FALSE(Loaded("libmpi.so"));
  EXPECT_FALSE(Loaded("libcollops_mpi.so"));
  std::shared_ptr<Communicator> comm;
  ASSERT_EQ(Guarded([&] { comm = CreateCommunicator(MpiParam("plugin", 1)); }), NO_ERROR)
      << LastErrorMessage();
  EXPECT_TRUE(Loaded("libcollops_mpi.so"));
  EXPECT_TRUE(Loaded("libmpi.so"));
  EXPECT_EQ(comm->BackendName(), "mpi");
  int32_t value = 21;
  comm->AllReduce(&value, &value, 1, ACL_INT32, ReduceOp::kSum);
  EXPECT_EQ(value, 21);
}

TEST(MpiPlugin, SingletonNeedsRankSizeOne) {
  if (UnderMpirun() || PluginHidden()) GTEST_SKIP() << "needs the plugin, without mpirun";
  EXPECT_EQ(Guarded([] { CreateCommunicator(MpiParam("singleton", 2)); }), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rankSize = 2"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("not launched by mpirun"));
}

TEST(MpiPlugin, ThreadModeIsNotOffered) {
  CommParam param = MpiParam("thread", 1);
  param.commMode = COMM_MULTI_THREAD;
  EXPECT_EQ(Guarded([&] { CreateCommunicator(param); }), ERROR_BACKEND_UNAVAILABLE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("thread mode is not available"));
}

/// ctest runs this alone with LD_LIBRARY_PATH at a directory holding libcollops.so and no plugin:
/// what a build without MPI looks like.
TEST(MpiPlugin, MissingPluginSaysCollopsWasBuiltWithoutMpi) {
  if (std::getenv("COLLOPS_TEST_NO_PLUGIN") == nullptr) GTEST_SKIP() << "COLLOPS_TEST_NO_PLUGIN";
  EXPECT_EQ(Guarded([] { CreateCommunicator(MpiParam("none", 1)); }), ERROR_BACKEND_UNAVAILABLE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("collops was built without MPI"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("/libcollops_mpi.so does not exist"));
  EXPECT_FALSE(Loaded("libmpi.so"));
}

}  // namespace
}  // namespace testing
}  // namespace collops
