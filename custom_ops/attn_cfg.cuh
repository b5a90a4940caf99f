// The tile configurations of the split-K decode kernel (attn_splitk.cuh): which warp work it runs
// (scalar, tensor-core, register-streamed, register-fed tensor-core, or a pair picked per block) and
// the shapes that size its grid, its pipelines and its shared memory.
#pragma once

#include "cuda_common.cuh"

namespace {

template <class T, int HD, int NW_, int NST_, int STB_, bool MMA_ = false>
struct AttnCfg {
  static constexpr int NW = NW_, NST = NST_, STB = STB_;
  static constexpr bool MMA = MMA_;                // tensor-core warp work (attn_mma.cuh), 16-bit types
  static constexpr bool REG = false;               // register-streamed warp work (attn_regs.cuh, AttnRegCfg)
  static constexpr bool PAIR = false;              // both tensor-core forms, picked per block (AttnPairCfg)
  static constexpr int U = 0;
  static constexpr int EPC = Elem<T>::EPC;
  static constexpr int C16 = HD / EPC;             // 16-byte chunks per row
  static constexpr int C = 16 / EPC;               // QK: chunks per lane (16 elements)
  static constexpr int LPR = C16 / C;              // QK: lanes per row
  static constexpr int R = 32 / LPR;               // QK: rows per step
  static constexpr int TR = STB / (2 * HD * (int)sizeof(T));  // rows per stage
  static constexpr int STEPS = TR / R;
  static constexpr int PL = C16 < 32 ? C16 : 32;   // PV: lanes per row
  static constexpr int RV = 32 / PL;               // PV: rows in parallel
  static constexpr int CV = C16 / PL;              // PV: chunks per lane
  static constexpr int AV = CV * EPC;              // PV: accumulators per lane and head
  static constexpr int STAGE16 = 2 * TR * C16;     // chunks per stage (K then V)
  static constexpr int SMEM = NW * NST * STB;
  static_assert(LPR >= 1 && LPR <= 32 && TR % R == 0 && R % RV == 0 && (TR * C16) % 32 == 0, "attention tile shape");
};

// The register-streamed form (attn_regs.cuh): NW warps, U warp loads of K/V rows ahead per warp, no
// stages: shared memory holds the merge area only (for up to 4 heads per block). TR: rows per warp
// per pass (Rows rounds a split's rows to NW * TR); the base's other members are those of a scalar tile.
template <class T, int HD, int NW_, int U_>
struct AttnRegCfg : AttnCfg<T, HD, NW_, 1, 4096> {
  static constexpr bool REG = true;
  static constexpr int U = U_;
  static constexpr int TR = 32 / (HD / Elem<T>::EPC) * U_;
  static constexpr int SMEM = (NW_ * 4 * HD + NW_ * 4 * 2 + 4 * HD + 4 * 2) * 4;
};
// The register-fed tensor-core form (attn_regmma.cuh), 16-bit types: U units of 8 rows ahead per warp.
template <class T, int HD, int NW_, int U_>
struct AttnRegMmaCfg : AttnRegCfg<T, HD, NW_, U_> {
  static constexpr bool MMA = true;
  static constexpr int TR = 8 * U_;
};

// Both tensor-core forms in one kernel (16-bit types): a block whose slice has at least MIN rows takes
// the register-fed form (Reg), a shorter one the cp.async form (Mma, whose members these are). The
// kernel's registers and shared memory are the larger of the two forms'; both must have Mma's warps
// and rows per pass.
template <class Mma, class Reg, int MIN>
struct AttnPairCfg : Mma {
  static constexpr bool PAIR = true;
  using RegCfg = Reg;
  static constexpr int MIN_ROWS = MIN;
  static_assert(Mma::MMA && Reg::REG && Reg::MMA && Reg::NW == Mma::NW && Reg::TR == Mma::TR, "paired tensor-core forms");
};


}  // namespace
