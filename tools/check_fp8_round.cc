// Exhaustive check of Fp8E4M3RoundSat (common/dtypes.h) against the reference pair
// Fp8E4M3ToFloat(FloatToFp8E4M3Sat(f)) for every float32 bit pattern (~20 s).
//   g++ -O2 -std=c++17 -I ort_ops tools/check_fp8_round.cc -o /tmp/check_fp8_round && /tmp/check_fp8_round
#include <cstdint>
#include <cstdio>

#include "common/dtypes.h"

int main() {
  uint64_t bad = 0;
  for (uint64_t i = 0; i <= 0xFFFFFFFFull; ++i) {
    const float f = pyquant::BitsToFloat(static_cast<uint32_t>(i));
    const uint32_t want = pyquant::FloatToBits(pyquant::Fp8E4M3ToFloat(pyquant::FloatToFp8E4M3Sat(f)));
    const uint32_t got = pyquant::FloatToBits(pyquant::Fp8E4M3RoundSat(f));
    if (want != got && bad++ < 10) {
      std::printf("mismatch: %08llx -> %08x, want %08x\n", static_cast<unsigned long long>(i), got, want);
    }
  }
  std::printf("%llu mismatches over 2^32 inputs\n", (unsigned long long)bad);
  return bad != 0;
}
