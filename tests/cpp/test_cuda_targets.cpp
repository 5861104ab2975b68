// core/cuda_targets.h: parsing a build's list of nvcc targets, and which compute capabilities
// its kernel images serve (SASS within a major, 'a' exactly, 'f' within the family, PTX upwards).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cuda_targets.h"

namespace oink {
namespace {

constexpr const char* kProduction = "sm_80,sm_90a,sm_100a,sm_103a,sm_120,compute_90";

void expect_target(const CudaTarget& t, bool ptx, int arch, char suffix) {
  EXPECT_EQ(t.ptx, ptx) << arch;
  EXPECT_EQ(t.arch, arch);
  EXPECT_EQ(t.suffix, suffix) << arch;
}

void expect_production(const std::vector<CudaTarget>& t) {
  ASSERT_EQ(t.size(), 6u);
  expect_target(t[0], false, 80, 0);
  expect_target(t[1], false, 90, 'a');
  expect_target(t[2], false, 100, 'a');
  expect_target(t[3], false, 103, 'a');
  expect_target(t[4], false, 120, 0);
  expect_target(t[5], true, 90, 0);
}

TEST(CudaTargets, ParsesTheProductionList) { expect_production(parse_cuda_targets(kProduction)); }

TEST(CudaTargets, ParsesSemicolonSeparatedLists) {
  expect_production(parse_cuda_targets("sm_80;sm_90a;sm_100a;sm_103a;sm_120;compute_90"));
  expect_production(parse_cuda_targets("sm_80;sm_90a,sm_100a;sm_103a,sm_120;compute_90;"));
}

TEST(CudaTargets, SkipsJunkItems) {
  const std::vector<CudaTarget> t = parse_cuda_targets(
      ",arch,sm_80,,foo;sm_;compute_;sm_9x;sm_a;sm_12345;SM_90;gfx90a;compute_100f,sm_90a;bar;");
  ASSERT_EQ(t.size(), 3u);
  expect_target(t[0], false, 80, 0);
  expect_target(t[1], true, 100, 'f');
  expect_target(t[2], false, 90, 'a');
  EXPECT_TRUE(parse_cuda_targets("").empty());
  EXPECT_TRUE(parse_cuda_targets(";,;").empty());
  EXPECT_TRUE(parse_cuda_targets("none").empty());
}

bool serves(const std::string& list, int major, int minor) {
  return targets_serve(parse_cuda_targets(list), major, minor);
}

TEST(CudaTargets, ProductionListServes) {
  EXPECT_FALSE(serves(kProduction, 7, 5));
  EXPECT_FALSE(serves(kProduction, 7, 0));
  EXPECT_TRUE(serves(kProduction, 8, 0));
  EXPECT_TRUE(serves(kProduction, 8, 6));
  EXPECT_TRUE(serves(kProduction, 8, 9));
  EXPECT_TRUE(serves(kProduction, 9, 0));
  EXPECT_TRUE(serves(kProduction, 10, 0));
  EXPECT_TRUE(serves(kProduction, 10, 3));
  EXPECT_TRUE(serves(kProduction, 11, 0));
  EXPECT_TRUE(serves(kProduction, 12, 0));
  EXPECT_TRUE(serves(kProduction, 12, 1));
}

TEST(CudaTargets, ProductionListServesThroughTheExpectedTargets) {
  // 8.x only through sm_80 (compute_90 PTX does not run below 9.0).
  const std::string no_sm80 = "sm_90a,sm_100a,sm_103a,sm_120,compute_90";
  EXPECT_FALSE(serves(no_sm80, 8, 0));
  EXPECT_FALSE(serves(no_sm80, 8, 6));
  EXPECT_FALSE(serves(no_sm80, 8, 9));
  // 11.0 only through compute_90 (no SASS for major 11).
  const std::string no_ptx = "sm_80,sm_90a,sm_100a,sm_103a,sm_120";
  EXPECT_FALSE(serves(no_ptx, 11, 0));
  EXPECT_TRUE(serves(no_ptx, 9, 0));
  EXPECT_TRUE(serves(no_ptx, 10, 0));
  EXPECT_TRUE(serves(no_ptx, 10, 3));
  EXPECT_TRUE(serves(no_ptx, 12, 0));
  EXPECT_TRUE(serves(no_ptx, 12, 1));
  EXPECT_FALSE(serves(no_ptx, 10, 1));  // sm_100a, sm_103a: exactly those
  EXPECT_FALSE(serves(no_ptx, 9, 1));
}

TEST(CudaTargets, PtxOnlyServesItsCapabilityAndAbove) {
  for (int minor : {0, 6, 7, 9}) EXPECT_FALSE(serves("compute_90", 8, minor)) << minor;
  EXPECT_FALSE(serves("compute_90", 7, 5));
  EXPECT_TRUE(serves("compute_90", 9, 0));
  EXPECT_TRUE(serves("compute_90", 10, 0));
  EXPECT_TRUE(serves("compute_90", 10, 3));
  EXPECT_TRUE(serves("compute_90", 11, 0));
  EXPECT_TRUE(serves("compute_90", 12, 0));
  EXPECT_TRUE(serves("compute_90", 12, 1));
  EXPECT_FALSE(serves("compute_90a", 10, 0));  // arch-specific PTX: that capability only
  EXPECT_TRUE(serves("compute_90a", 9, 0));
}

TEST(CudaTargets, ArchSpecificServesOnlyItsCapability) {
  EXPECT_TRUE(serves("sm_90a", 9, 0));
  EXPECT_FALSE(serves("sm_90a", 8, 0));
  EXPECT_FALSE(serves("sm_90a", 9, 1));
  EXPECT_FALSE(serves("sm_90a", 10, 0));
  EXPECT_FALSE(serves("sm_90a", 12, 0));
}

TEST(CudaTargets, FamilyServesItsMajorFromItsMinor) {
  EXPECT_TRUE(serves("sm_100f", 10, 0));
  EXPECT_TRUE(serves("sm_100f", 10, 3));
  EXPECT_FALSE(serves("sm_100f", 12, 0));
  EXPECT_FALSE(serves("sm_100f", 9, 0));
  EXPECT_FALSE(serves("sm_103f", 10, 0));
  EXPECT_TRUE(serves("sm_103f", 10, 3));
}

TEST(CudaTargets, SassServesItsMajorFromItsMinor) {
  EXPECT_TRUE(serves("sm_80", 8, 0));
  EXPECT_TRUE(serves("sm_80", 8, 9));
  EXPECT_FALSE(serves("sm_80", 7, 5));
  EXPECT_FALSE(serves("sm_80", 9, 0));
  EXPECT_FALSE(serves("sm_86", 8, 0));
  EXPECT_TRUE(serves("sm_120", 12, 1));
  EXPECT_FALSE(serves("sm_121", 12, 0));
}

TEST(CudaTargets, EmptyListServesNothing) {
  for (int major = 5; major <= 12; ++major) {
    for (int minor : {0, 3, 6, 9}) EXPECT_FALSE(serves("", major, minor)) << major << "." << minor;
  }
  EXPECT_FALSE(targets_serve({}, 9, 0));
}

}  // namespace
}  // namespace oink
